"""Recordings (contract in DESIGN.md): a directory, or a .tar.gz of one, of timed /proc, /sys and Kafka snapshots."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kdiag.pipeline import CollectorSet
from kdiag.root import Root, SnapshotRoot, TeeRoot, recorded_time

FORMAT = "kdiag-recording"
VERSION = 1
KAFKA_STATE_VERSION = 1


class RecordingError(Exception):
    """A recording that cannot be read, with the path and what is wrong."""


def record(out: Path, duration: float, interval: float, collectors: CollectorSet, live: Root,
           progress: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> Path:
    """Take a snapshot every `interval` seconds for `duration` seconds into out (a dir, or a .tar.gz)."""
    as_tar = out.name.endswith((".tar.gz", ".tgz"))
    directory = Path(tempfile.mkdtemp(prefix="kdiag-rec-")) / out.name.split(".")[0] if as_tar else out
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise RecordingError(f"{directory}: not empty; record into a new directory")
    manifest = {"format": FORMAT, "version": VERSION, "host": socket.gethostname(), "interval_s": interval}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    count = max(1, int(duration // interval) + 1)
    start = time.monotonic()
    for i in range(count):
        snap = directory / f"{i:04d}"
        snap.mkdir()
        tee = TeeRoot(live, snap)
        taken = tee.now()
        collectors.run(tee)
        copy_contract_extras(tee, snap)
        (snap / "meta.json").write_text(json.dumps({"time": taken}) + "\n")
        if tee.kafka_state:
            kafka = {"version": KAFKA_STATE_VERSION, "sources": tee.kafka_state}
            (snap / "kafka.json").write_text(json.dumps(kafka) + "\n")
        failed = [name for name, h in collectors.health.items() if not h.success]
        progress(f"snapshot {i + 1}/{count} taken" + (f" (failed: {', '.join(failed)})" if failed else ""))
        if i + 1 < count:
            sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
    if not as_tar:
        return out
    with tarfile.open(out, "w:gz") as tar:
        tar.add(directory, arcname=directory.name)
    shutil.rmtree(directory.parent)
    return out


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
        self._tmp: tempfile.TemporaryDirectory | None = None
        if not self.path.exists():
            raise RecordingError(f"{self.path}: no such recording")
        directory = self.path if self.path.is_dir() else self._extract()
        self.directory = directory
        manifest_file = directory / "manifest.json"
        try:
            self.manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {}
        except ValueError as e:
            raise RecordingError(f"{manifest_file}: not JSON: {e}") from None
        if self.manifest and self.manifest.get("format") != FORMAT:
            raise RecordingError(f"{manifest_file}: format is {self.manifest.get('format')!r}, not {FORMAT!r}")
        self.snapshots = sorted(p for p in directory.iterdir() if (p / "meta.json").is_file())
        if not self.snapshots:
            raise RecordingError(f"{self.path}: no snapshots (directories with meta.json)")
        try:
            self.times = [recorded_time(s / "meta.json") for s in self.snapshots]
        except ValueError as e:
            raise RecordingError(str(e)) from None

    def _extract(self) -> Path:
        self._tmp = tempfile.TemporaryDirectory(prefix="kdiag-rec-")
        try:
            with tarfile.open(self.path) as tar:
                tar.extractall(self._tmp.name, filter="tar")
        except (tarfile.TarError, OSError) as e:
            raise RecordingError(f"{self.path}: not a readable .tar.gz recording: {e}") from None
        top = Path(self._tmp.name)
        entries = list(top.iterdir())
        # Either the directory's contents sit at the top, or one directory holds them.
        if len(entries) == 1 and entries[0].is_dir() and not (top / "manifest.json").exists():
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
        return self.times[1] - self.times[0] if len(self.times) >= 2 else 5.0

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
