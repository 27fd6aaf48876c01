"""Recordings (the format: docs/RECORDING.md): a directory, or a .tar.gz of one, of timed /proc, /sys and Kafka snapshots."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
from typing import Any, TypeVar
from collections.abc import Callable, Iterator
from pathlib import Path

from kdiag.core.outfile import check_output_dir
from kdiag.runtime.pipeline import CollectorSet
from kdiag.core.archive import (KAFKA_STATE_VERSION, MAX_JSON_BYTES, RecordingError, check_tree, extract, is_number,
                                read_recorded)
from kdiag.core.quote import quote
from kdiag.core.root import KafkaTee, Root, SnapshotRoot, TeeRoot, recorded_time

FORMAT = "kdiag-recording"
VERSION = 1
MIN_INTERVAL, MAX_INTERVAL = 0.1, 3600
MAX_HOST = 255
T = TypeVar("T")


def read_manifest(file: Path) -> dict[str, Any]:
    """A recording's manifest.json ({} without one); RecordingError naming the field that is wrong."""
    if not os.path.lexists(file):
        return {}
    try:
        manifest = json.loads(read_recorded(str(file), MAX_JSON_BYTES))
    except (OSError, ValueError, RecursionError) as e:
        raise RecordingError(f"{file}: not JSON: {str(e)[:200]}") from None
    if not isinstance(manifest, dict):
        raise RecordingError(f"{file}: expected a JSON object, got {type(manifest).__name__}")
    if manifest and manifest.get("format") != FORMAT:
        raise RecordingError(f"{file}: format is {quote(manifest.get('format'))}, not {FORMAT!r}")
    problem = None
    version, host, interval = manifest.get("version", VERSION), manifest.get("host", ""), manifest.get("interval_s", 5)
    if version != VERSION or isinstance(version, bool):
        problem = f"version {quote(version)} is not supported (only {VERSION})"
    elif not isinstance(host, str) or len(host) > MAX_HOST or not host.isprintable():
        problem = f"host {quote(host)} is not a printable text of at most {MAX_HOST} characters"
    elif not is_number(interval) or not MIN_INTERVAL <= interval <= MAX_INTERVAL:
        problem = f"interval_s {quote(interval)} is not a number of seconds from {MIN_INTERVAL} to {MAX_INTERVAL}"
    if problem:
        raise RecordingError(f"{file}: {problem}")
    return manifest


def _is_snapshot(path: Path) -> bool:
    """A real directory (not a link) with a meta.json."""
    return not path.is_symlink() and path.is_dir() and os.path.lexists(path / "meta.json")


def record(out: Path, duration: float, interval: float, collectors: CollectorSet, live: Root,
           progress: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> Path:
    """Take a snapshot every `interval` seconds for `duration` seconds into out (a dir, or a .tar.gz).

    Ctrl-C (KeyboardInterrupt) keeps the snapshots already taken, and is raised again."""
    check_output_dir(out)
    if not out.name.endswith((".tar.gz", ".tgz")):
        if out.is_dir() and any(out.iterdir()):
            raise RecordingError(f"{out}: not empty; record into a new directory", exit_code=2)
        out.mkdir(parents=True, exist_ok=True)
        _take_snapshots(out, out, duration, interval, collectors, live, progress, sleep)
        return out
    if os.path.lexists(out):
        raise RecordingError(f"{out}: exists; record into a new file", exit_code=2)
    tmp = Path(tempfile.mkdtemp(prefix="kdiag-rec-"))
    try:
        directory = tmp / out.name.split(".")[0]
        directory.mkdir()
        try:
            _take_snapshots(directory, out, duration, interval, collectors, live, progress, sleep)
        except KeyboardInterrupt:
            _archive(directory, out)
            raise
        _archive(directory, out)
    finally:
        shutil.rmtree(tmp)
    return out


class Recorder:
    """Snapshots written one at a time into a directory: `kdiag record`'s, or a drill monitor's (Kafka and probe
    states only, with files=False: a recording of the cluster, not of the busy host running the drill)."""

    def __init__(self, directory: Path, interval: float, host: str | None = None, files: bool = True):
        self.directory = directory
        self.files = files
        self.taken = 0
        manifest = {"format": FORMAT, "version": VERSION, "host": host or socket.gethostname(), "interval_s": interval}
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

    def snapshot(self, live: Root, run: Callable[[Root], T]) -> T:
        """run(root) on a root that copies what it reads into the next snapshot; its result."""
        snap = self.directory / f"{self.taken:04d}"
        snap.mkdir()
        tee = TeeRoot(live, snap) if self.files else KafkaTee(live)
        taken = tee.now()
        result = run(tee)
        if isinstance(tee, TeeRoot):
            copy_contract_extras(tee, snap)
        if tee.kafka_state:
            kafka = {"version": KAFKA_STATE_VERSION, "sources": tee.kafka_state}
            (snap / "kafka.json").write_text(json.dumps(kafka) + "\n")
        # meta.json last: a snapshot without it is not read back.
        (snap / "meta.json").write_text(json.dumps({"time": taken}) + "\n")
        self.taken += 1
        return result


def _take_snapshots(directory: Path, out: Path, duration: float, interval: float, collectors: CollectorSet, live: Root,
                    progress: Callable[[str], None], sleep: Callable[[float], None]) -> None:
    recorder = Recorder(directory, interval)
    count = max(1, int(duration // interval) + 1)
    start = time.monotonic()
    try:
        for i in range(count):
            recorder.snapshot(live, collectors.run)
            failed = [name for name, h in collectors.health.items() if not h.success]
            progress(f"snapshot {i + 1}/{count} taken" + (f" (failed: {', '.join(failed)})" if failed else ""))
            if i + 1 < count:
                sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
    except KeyboardInterrupt:
        kept = recorder.taken
        shutil.rmtree(directory / f"{kept:04d}", ignore_errors=True)  # the snapshot under way, if any
        raise KeyboardInterrupt(f"{kept} snapshot(s) kept in {out}" if kept else "no snapshot was complete") from None


def _archive(directory: Path, out: Path) -> None:
    """Write directory as the new file out (.tar.gz); a partly written out is removed."""
    if not any(_is_snapshot(p) for p in directory.iterdir()):
        return
    f = open(out, "xb")  # noqa: SIM115 - out is removed when the write fails
    try:
        with f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            tar.add(directory, arcname=directory.name)
    except BaseException:
        out.unlink()
        raise


def copy_contract_extras(tee: TeeRoot, snap: Path) -> None:
    """Files the recording format promises that no collector reads: mountinfo, and status/comm of sampled pids."""
    sampled = [p.name for p in (snap / "proc").iterdir() if p.name.isdigit() and (p / "fd").is_dir()]
    for rel in ["self/mountinfo", *(f"{pid}/{name}" for pid in sampled for name in ("status", "comm"))]:
        try:
            tee.read("proc", rel)
        except OSError:
            continue  # the process exited meanwhile


class Recording:
    """A readable recording: its manifest and its snapshot directories in lexical order."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if not os.path.lexists(self.path):
            raise RecordingError(f"{self.path}: no such recording", exit_code=2)
        try:
            self.directory = self.path if self.path.is_dir() else self._extract()
            check_tree(self.directory)
            self.manifest = read_manifest(self.directory / "manifest.json")
            self.snapshots = sorted(p for p in self.directory.iterdir() if _is_snapshot(p))
            if not self.snapshots:
                raise RecordingError(f"{self.path}: no snapshots (directories with meta.json)")
            self.times = [recorded_time(s / "meta.json") for s in self.snapshots]
        except (ValueError, OSError) as e:
            self.close()
            raise RecordingError(str(e)) from None
        except BaseException:
            self.close()
            raise

    def _extract(self) -> Path:
        if not self.path.is_file():
            raise RecordingError(f"{self.path}: neither a directory nor a .tar.gz file")
        self._tmp = tempfile.TemporaryDirectory(prefix="kdiag-rec-")
        top = Path(self._tmp.name)
        extract(self.path, top)
        entries = list(top.iterdir())
        # Either the directory's contents sit at the top, or one directory holds them.
        if len(entries) == 1 and not entries[0].is_symlink() and entries[0].is_dir() \
                and not (top / "manifest.json").exists():
            return entries[0]
        return top

    @property
    def host(self) -> str:
        """The recorded host name, or the recording's file name when the manifest is absent."""
        return str(self.manifest.get("host") or self.path.name)

    @property
    def interval(self) -> float:
        """Seconds between snapshots, from the manifest or the snapshot times."""
        if "interval_s" in self.manifest:
            return float(self.manifest["interval_s"])
        measured = self.times[1] - self.times[0] if len(self.times) >= 2 else 5.0
        return min(max(measured, MIN_INTERVAL), MAX_INTERVAL)

    def kafka_sources(self) -> set[str]:
        """The Kafka sources (admin, jmx, ...) any snapshot's kafka.json holds."""
        sources: set[str] = set()
        for snap in self.snapshots:
            # An unreadable kafka.json fails its Kafka collectors in that snapshot only (SnapshotRoot.kafka).
            with contextlib.suppress(ValueError):
                sources |= set(SnapshotRoot(snap).kafka_sources)
        return sources

    def roots(self, time_offset: float = 0.0) -> Iterator[SnapshotRoot]:
        """One Root per snapshot, in order, with times shifted by time_offset."""
        for s in self.snapshots:
            yield SnapshotRoot(s, time_offset)

    def close(self) -> None:
        """Remove the extracted copy of a .tar.gz."""
        if self._tmp:
            self._tmp.cleanup()
