"""Crafted recordings (issue 12 #1, #5, #8): refused with one line and exit 1, reading and writing nothing outside."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kdiag.cli.main import main
from kdiag.recording.recording import Recording, RecordingError
from kdiag.core.archive import KAFKA_STATE_VERSION, MAX_FILE_BYTES
from tests.paths import FIXTURES, RECORDINGS

ADMIN_STATE = FIXTURES / "kafka" / "admin-state.json"
PASSWD_LINE = Path("/etc/passwd").read_text().splitlines()[0]  # root:x:0:0:...


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    """A small real recording: two snapshots of swap-in-use (with its fd and cwd links)."""
    d = tmp_path / "rec"
    d.mkdir()
    shutil.copy(RECORDINGS / "swap-in-use" / "manifest.json", d)
    for snap in ("0000", "0001"):
        shutil.copytree(RECORDINGS / "swap-in-use" / snap, d / snap, symlinks=True)
    return d


def tar_of(directory: Path, *extra: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    """directory as `rec/` in a .tar.gz beside it, then the extra members in order."""
    archive = directory.parent / "crafted.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(directory, arcname="rec")
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return archive


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, link: str = "",
           size: int | None = None) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if data is not None else (size or 0)
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 5  # /dev/zero
    return info, data


def kdiag(*argv: str, tmpdir: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    return subprocess.run([sys.executable, "-m", "kdiag", *argv], capture_output=True, text=True, timeout=timeout,
                          env=env)


def refused(path: Path, *fragments: str, tmpdir: Path | None = None, capsys=None) -> str:
    """`kdiag diagnose --from path` (a process, or main() with capsys): exit 1, one line holding every fragment."""
    if capsys:
        code, (out, err) = main(["diagnose", "--from", str(path)]), capsys.readouterr()
    else:
        result = kdiag("diagnose", "--from", str(path), tmpdir=tmpdir)
        code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 1, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("kdiag: ") and len(err) < 400
    for fragment in fragments:
        assert fragment in err
    assert PASSWD_LINE not in err
    return err


@pytest.mark.integration
def test_hard_link_member_does_not_rewrite_the_file_it_names(rec: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    archive = tar_of(rec, member("rec/0000/hh", tarfile.LNKTYPE, link=str(victim)),
                     member("rec/0000/hh", data=b"rewritten\n"))
    refused(archive, f"member 'rec/0000/hh' is a hard link to '{victim}'")
    assert victim.read_text() == "original\n"


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../../../../../../../../etc/passwd"])
@pytest.mark.integration
def test_symlink_to_a_host_file_is_refused_in_a_tar(rec: Path, target: str) -> None:
    (rec / "0001" / "proc" / "loadavg").unlink()
    archive = tar_of(rec, member("rec/0001/proc/loadavg", tarfile.SYMTYPE, link=target))
    refused(archive, "member 'rec/0001/proc/loadavg' is a symlink to", "outside the recording")


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../../../../../../../../etc/passwd"])
@pytest.mark.integration
def test_symlink_to_a_host_file_is_refused_in_a_directory(rec: Path, target: str) -> None:
    (rec / "0001" / "proc" / "loadavg").unlink()
    (rec / "0001" / "proc" / "loadavg").symlink_to(target)
    refused(rec, f"{rec}/0001/proc/loadavg: is a symlink to", "outside its snapshot")


@pytest.mark.parametrize("form", ["dir", "tar"])
@pytest.mark.integration
def test_link_chain_that_looks_inside_but_leads_out_is_refused(rec: Path, form: str) -> None:
    # deep/k leads back to the snapshot's top, so climbing from it leaves the snapshot though the text stays inside.
    deep = rec / "0001" / "sys" / Path(*[f"d{i}" for i in range(30)])
    deep.mkdir(parents=True)
    (deep / "k").symlink_to("../" * 31)
    (rec / "0001" / "proc" / "loadavg").unlink()
    (rec / "0001" / "proc" / "loadavg").symlink_to(f"../sys/{'/'.join(f'd{i}' for i in range(30))}/k/{'../' * 30}etc/passwd")
    refused(rec if form == "dir" else tar_of(rec), "0001/proc/loadavg: is a symlink to", "outside its snapshot")


@pytest.mark.parametrize("form", ["dir", "tar"])
@pytest.mark.integration
def test_fifo_never_blocks(rec: Path, form: str) -> None:
    (rec / "0001" / "proc" / "loadavg").unlink()
    if form == "dir":
        os.mkfifo(rec / "0001" / "proc" / "loadavg")
        refused(rec, f"{rec}/0001/proc/loadavg: is a FIFO")
    else:
        refused(tar_of(rec, member("rec/0001/proc/loadavg", tarfile.FIFOTYPE)),
                "member 'rec/0001/proc/loadavg' is a FIFO")


@pytest.mark.integration
def test_device_node_member_is_refused(rec: Path) -> None:
    (rec / "0001" / "proc" / "meminfo").unlink()
    refused(tar_of(rec, member("rec/0001/proc/meminfo", tarfile.CHRTYPE)), "member 'rec/0001/proc/meminfo' is a device node")


@pytest.mark.integration
def test_device_node_in_a_directory_is_refused(rec: Path) -> None:
    (rec / "0001" / "proc" / "meminfo").unlink()
    try:
        os.mknod(rec / "0001" / "proc" / "meminfo", 0o600 | 0o020000, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod needs root")
    refused(rec, "0001/proc/meminfo: is a device node")


class Zeros(io.RawIOBase):
    """n zero bytes, made as they are read."""

    def __init__(self, n: int):
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


@pytest.mark.integration
def test_file_over_the_bound_is_refused_before_it_is_read(rec: Path) -> None:
    (rec / "0001" / "proc" / "meminfo").unlink()
    archive = rec.parent / "big.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(rec, arcname="rec")
        info = tarfile.TarInfo("rec/0001/proc/meminfo")
        info.size = MAX_FILE_BYTES + 1
        tar.addfile(info, io.BufferedReader(Zeros(info.size)))
    assert archive.stat().st_size < 2**20
    refused(archive, f"member 'rec/0001/proc/meminfo' is {MAX_FILE_BYTES + 1} bytes, larger than")
    with open(rec / "0001" / "proc" / "meminfo", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse
    refused(rec, f"{rec}/0001/proc/meminfo: larger than {MAX_FILE_BYTES} bytes")


@pytest.mark.integration
def test_hard_link_inside_a_directory_recording_is_refused(rec: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not for the report\n")
    (rec / "0001" / "proc" / "loadavg").unlink()
    os.link(secret, rec / "0001" / "proc" / "loadavg")
    assert "not for the report" not in refused(rec, f"{rec}/0001/proc/loadavg: has other hard links")


@pytest.mark.parametrize(("extra", "problem"), [
    ([member("/ABS/escaped", data=b"x")], "member '/ABS/escaped' is an absolute path or has '..' in it"),
    ([member("rec/../../../escaped", data=b"x")], "member 'rec/../../../escaped' is an absolute path or has '..'"),
    ([member("rec/0000/meta.json", data=b'{"time": 1}')], "member 'rec/0000/meta.json' appears twice"),
    ([member("rec/0000/lnk", tarfile.SYMTYPE, link="proc"), member("rec/0000/lnk/escaped", data=b"x")],
     "member 'rec/0000/lnk/escaped' is inside 'rec/0000/lnk', which is not a directory"),
])
@pytest.mark.integration
def test_member_paths_that_could_write_elsewhere_are_refused(rec: Path, tmp_path: Path, extra, problem: str) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    for info, _ in extra:
        info.name = info.name.replace("/ABS", str(tmp_path))
    refused(tar_of(rec, *extra), problem.replace("/ABS", str(tmp_path)), tmpdir=tmpdir)
    assert not (tmp_path / "escaped").exists() and not (rec / "0000" / "proc" / "escaped").exists()
    assert list(tmpdir.iterdir()) == []  # the extraction directory is removed


@pytest.mark.integration
def test_truncated_tar_gz_is_one_line_at_any_cut(rec: Path, tmp_path: Path) -> None:
    whole = tar_of(rec).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    for at in sorted({*range(0, len(whole), max(1, len(whole) // 40)), len(whole) - 8, len(whole) - 1}):
        cut.write_bytes(whole[:at])
        with pytest.raises(RecordingError, match=rf"{cut}: not a readable .tar.gz recording"):
            Recording(cut)
    cut.write_bytes(whole[: len(whole) // 2])
    refused(cut, f"{cut}: not a readable .tar.gz recording")


@pytest.mark.parametrize(("manifest", "problem"), [
    ('{"format": "kdiag-recording", "version": 1, "interval_s": -5}', "interval_s -5 is not a number of seconds"),
    ('{"format": "kdiag-recording", "version": 1, "interval_s": 0.0001}', "interval_s 0.0001 is not a number"),
    ('{"format": "kdiag-recording", "version": 1, "interval_s": "abc"}', "interval_s 'abc' is not a number"),
    ('{"format": "kdiag-recording", "version": 1, "interval_s": NaN}', "interval_s nan is not a number"),
    ('{"format": "kdiag-recording", "version": 1, "interval_s": null}', "interval_s None is not a number"),
    ('{"format": "kdiag-recording", "version": 1, "interval_s": 1e999}', "interval_s inf is not a number"),
    ('{"format": "kdiag-recording", "version": 2}', "version 2 is not supported"),
    ('{"format": "kdiag-recording", "version": true}', "version True is not supported"),
    ('{"format": "kdiag-recording", "version": 1, "host": "' + "h" * 10000 + '"}', "host 'hhh"),
    ('{"format": "kdiag-recording", "version": 1, "host": 5}', "host 5 is not a printable text"),
    ('{"format": "kdiag-recording", "version": 1, "host": "a\\u001b[2Jb"}', "host 'a\\x1b[2Jb' is not a printable"),
    ('["kdiag-recording", 1]', "expected a JSON object, got list"),
    ("[" * 100000, "not JSON"),
])
def test_bad_manifest_is_one_line_naming_the_field(rec: Path, manifest: str, problem: str, capsys) -> None:
    (rec / "manifest.json").write_text(manifest)
    refused(rec, f"{rec / 'manifest.json'}: {problem}", capsys=capsys)


@pytest.mark.integration
def test_run_from_a_negative_interval_exits_instead_of_spinning(rec: Path) -> None:
    (rec / "manifest.json").write_text('{"format": "kdiag-recording", "version": 1, "interval_s": -5}')
    result = kdiag("run", "--from", str(rec), "--listen", "127.0.0.1:9", timeout=60)
    assert result.returncode == 1 and "interval_s -5 is not a number of seconds from 0.1 to 3600" in result.stderr


@pytest.mark.parametrize("time", ["NaN", "1e400", "-1", "true", '"noon"', "1e300"])
def test_bad_snapshot_time_is_one_line_naming_meta_json(rec: Path, time: str, capsys) -> None:
    (rec / "0001" / "meta.json").write_text(f'{{"time": {time}}}')
    refused(rec, f'{rec / "0001" / "meta.json"}: expected {{"time": <epoch seconds>}}', capsys=capsys)


@pytest.mark.integration
def test_deeply_nested_kafka_json_fails_only_that_snapshots_kafka_collectors(rec: Path) -> None:
    admin = json.loads(ADMIN_STATE.read_text())
    (rec / "0000" / "kafka.json").write_text(json.dumps({"version": KAFKA_STATE_VERSION, "sources": {"admin": admin}}))
    (rec / "0001" / "kafka.json").write_text("[" * 100000)
    result = kdiag("diagnose", "--from", str(rec), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"collector kafka_admin failed: ValueError: {rec / '0001' / 'kafka.json'}: not a kdiag Kafka state" \
        in result.stderr
    assert "swap_in_use" in {d["rule"] for d in json.loads(result.stdout)["diagnoses"]}  # host collectors went on


def test_snapshot_root_reads_nothing_outside_even_when_planted_after_the_check(rec: Path) -> None:
    recording = Recording(rec)
    proc = rec / "0001" / "proc"
    (proc / "loadavg").unlink()
    (proc / "loadavg").symlink_to("/etc/passwd")
    (proc / "meminfo").unlink()
    os.mkfifo(proc / "meminfo")
    (proc / "vmstat").unlink()
    (proc / "vmstat").symlink_to("../../../../../../../../../../etc/passwd")
    root = list(recording.roots())[1]
    for name in ("loadavg", "meminfo", "vmstat"):
        with pytest.raises(OSError):
            root.read("proc", name)
    # cwd and fd links are text: readable as links, never followed.
    assert root.readlink("proc", "2000/cwd") == os.readlink(proc / "2000" / "cwd")
    assert not root.exists("proc", "2000/cwd/etc/passwd")
    with pytest.raises(FileNotFoundError):
        root.read("proc", "2000/cwd/etc/passwd")


@pytest.mark.integration
def test_a_huge_malformed_line_gives_a_short_error(rec: Path) -> None:
    (rec / "0001" / "proc" / "meminfo").write_text("x" * 5_000_000 + "\n")
    result = kdiag("diagnose", "--from", str(rec))
    assert result.returncode == 0
    lines = [line for line in result.stderr.splitlines() if "meminfo" in line]
    assert lines and max(map(len, lines)) < 600


def interrupted(argv: list[str], ready: str, tmpdir: Path) -> subprocess.CompletedProcess:
    """Run kdiag, send SIGINT once a stderr line holds `ready`, and return what it did."""
    # A test run started in the background (`.ci/run &`) passes SIGINT on ignored, and Python then keeps ignoring it:
    # kdiag gets the default disposition, as from a terminal.
    proc = subprocess.Popen([sys.executable, "-m", "kdiag", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = []
        while not any(ready in line for line in seen):
            line = proc.stderr.readline()
            assert line, f"kdiag exited before {ready!r}: {seen}"
            seen.append(line)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.integration
def test_ctrl_c_in_diagnose_exits_130_with_one_line(tmp_path: Path) -> None:
    result = interrupted(["diagnose", "--duration", "600s", "--step", "1s"], "sampling", tmp_path)
    assert result.returncode == 130 and result.stderr == "kdiag: interrupted\n"


@pytest.mark.parametrize("output", ["out", "out.tar.gz"])
@pytest.mark.integration
def test_ctrl_c_in_record_keeps_the_snapshots_taken_and_no_temp_dir(tmp_path: Path, output: str) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / output
    result = interrupted(["record", "-o", str(out), "--duration", "600s", "--interval", "1s"], "snapshot 2/", tmpdir)
    assert result.returncode == 130
    assert result.stderr.splitlines()[-1].startswith("kdiag: interrupted: ")
    assert f"snapshot(s) kept in {out}" in result.stderr and "Traceback" not in result.stderr
    assert list(tmpdir.iterdir()) == []
    recording = Recording(out)
    try:
        assert len(recording.snapshots) >= 2
        if out.is_dir():  # nothing half-taken is left beside the complete snapshots
            assert sorted(p.name for p in out.iterdir()) == sorted(["manifest.json", *(s.name for s in recording.snapshots)])
    finally:
        recording.close()


@pytest.mark.integration
def test_record_never_overwrites_an_archive(tmp_path: Path) -> None:
    existing = tmp_path / "existing.tar.gz"
    existing.write_bytes(b"keep me")
    result = kdiag("record", "-o", str(existing), "--duration", "1s", "--interval", "1s", tmpdir=tmp_path)
    assert result.returncode == 2 and f"{existing}: exists; record into a new file" in result.stderr
    assert existing.read_bytes() == b"keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["existing.tar.gz"]


@pytest.mark.parametrize("argv", [["diagnose", "--step", "0s"], ["record", "-o", "x", "--interval", "0.0001s"]])
@pytest.mark.integration
def test_zero_or_tiny_steps_are_usage_errors(argv: list[str]) -> None:
    result = kdiag(*argv)
    assert result.returncode == 2 and "is not a duration from 0.1s to 3600s" in result.stderr


def test_a_huge_tar_header_is_refused_before_it_is_read(rec: Path) -> None:
    archive = rec.parent / "longname.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.add(rec, arcname="rec")
        tar.addfile(tarfile.TarInfo("rec/" + "a" * 3 * 2**20))  # a GNU long-name header of 3 MiB
    with pytest.raises(RecordingError, match=r"not a readable .tar.gz recording \(a tar header asks to read \d+ bytes"):
        Recording(archive)
