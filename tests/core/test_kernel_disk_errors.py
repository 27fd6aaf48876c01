import json
import uuid
from pathlib import Path

import pytest

from tests.paths import FIXTURES

from kdiag.core.kernel_disk_errors import error_devices, message
from kdiag.core.kmsg import KernelLog
from kdiag.core.root import Root, SnapshotRoot, TeeRoot

KMSG = FIXTURES / "kmsg"
DISKS = ["sda", "sdb", "nvme0n1", "nvme0n2", "nvme1n1"]


def records(name: str) -> list[str]:
    return (KMSG / name).read_text().splitlines()


def test_each_kernel_error_format_names_its_disk() -> None:
    got = [error_devices(r, DISKS) for r in records("disk-errors.txt")]
    assert got == [["sdb"]] * 5 + [["nvme0n1", "nvme0n2"], ["nvme0n1"]]


@pytest.mark.parametrize("record", records("not-disk-errors.txt") + records("this-machine-boot.txt"))
def test_recovered_senses_unsupported_ops_and_other_records_are_no_disk_error(record: str) -> None:
    assert error_devices(record, DISKS) == []


def test_message_is_the_text_after_the_record_prefix() -> None:
    assert message("6,911,81234568,-;a; b") == "a; b" and message("no prefix; here") == "no prefix; here"


def test_a_reader_sees_only_what_was_logged_after_it_opened_once(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text("6,1,0,-;before kdiag\n")
    reader = KernelLog(str(log))
    assert reader.new_lines() == []
    with log.open("a") as f:
        f.write("3,2,5,-;I/O error, dev sdb, sector 8\n SUBSYSTEM=block\n DEVICE=b8:16\n")
    assert reader.new_lines() == ["3,2,5,-;I/O error, dev sdb, sector 8"]
    assert reader.new_lines() == []
    reader.close()


def test_readers_of_dev_kmsg_are_independent() -> None:
    try:
        first, second = KernelLog(), KernelLog()
        first.new_lines(), second.new_lines()
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(f"<7>kdiag test {uuid.uuid4()}: two readers\n")  # debug level: not on the console
    except PermissionError:
        pytest.skip("/dev/kmsg needs root")
    mine = [line for line in first.new_lines() if "kdiag test" in line]
    assert mine and mine == [line for line in second.new_lines() if "kdiag test" in line]
    first.close(), second.close()


def test_a_recording_keeps_the_records_read_and_its_replay_reads_them_back(tmp_path: Path) -> None:
    log, snap = tmp_path / "dev-kmsg", tmp_path / "0000"
    log.write_text("6,1,0,-;before kdiag\n")
    live = Root(kmsg=str(log))
    assert TeeRoot(live, tmp_path).kernel_log() == []  # the snapshot before: nothing new yet
    log.write_text(log.read_text() + (KMSG / "sdb-medium-error.txt").read_text())
    snap.mkdir()
    read = TeeRoot(live, snap).kernel_log()
    (snap / "meta.json").write_text(json.dumps({"time": 1.0e9}))
    assert read == records("sdb-medium-error.txt") == SnapshotRoot(snap).kernel_log()
    assert SnapshotRoot(snap).kernel_log() == SnapshotRoot(snap).kernel_log()  # a replay reads it as often as asked
    (snap / "kmsg").unlink()
    assert SnapshotRoot(snap).kernel_log() == []  # recorded before kdiag read the kernel log
