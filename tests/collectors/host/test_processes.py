import os
import shutil
import subprocess

import pytest
from tests.collectors.golden import assert_golden, fixture_root

from kdiag.collectors.host.processes import (
    ProcessesCollector,
    log_dir_of,
    log_dir_samples,
    parse_max_fds,
    path_arguments,
    top_readers,
    touches,
)
from kdiag.collectors.host.proctable import IO, NO_IO, Process, Reading, read_process
from kdiag.core.mountinfo import place
from kdiag.core.procfs import Stat, parse_cmdline, parse_stat
from kdiag.core.root import Root


def by_pid(samples, name):
    """{pid: value} of one metric."""
    return {dict(s.labels)["pid"]: s.value for s in samples if s.name == name}


def two_states(top_n=4):
    """A collector that has seen procs-t0, as the scheduler leaves it for the next collect."""
    collector = ProcessesCollector(top_n=top_n)
    collector.collect(fixture_root("procs-t0"))
    return collector


@pytest.fixture
def t1_samples():
    return two_states().collect(fixture_root("procs-t1"))


def test_golden():
    assert_golden("processes-procs-t0", ProcessesCollector(top_n=4).collect(fixture_root("procs-t0")))
    assert_golden("processes-procs-t1", two_states().collect(fixture_root("procs-t1")))


def test_brokers_and_top_readers_by_growth(t1_samples):
    # Growth t0->t1: tar 500 MB, rsync 300 MB, stats.py 50 MB, du 2 MB read; logreader only rchar (cut by top_n
    # readers), but it used CPU, and the top CPU users are chosen too.
    brokers = {"2000": 1, "2100": 1}
    chosen = ["3000", "3100", "3200", "3300", "3400"]
    assert by_pid(t1_samples, "kdiag_process_is_broker") == brokers | dict.fromkeys(chosen, 0)


def test_touches_log_dir(t1_samples):
    touched = by_pid(t1_samples, "kdiag_process_touches_log_dir")
    assert touched["3000"] == 1  # tar: cmdline names the log dir
    assert touched["3100"] == 1  # stats.py: cwd is the log dir
    assert touched["3400"] == 1  # du -sh /data: an ancestor of the log dir
    assert touched["3200"] == 0  # rsync of /home/alice
    assert touched["2000"] == touched["2100"] == 1


def test_log_dirs_discovered_on_whole_disks(t1_samples):
    infos = [dict(s.labels) for s in t1_samples if s.name == "kdiag_kafka_log_dir_info"]
    assert infos == [
        {"path": "/data/kafka-logs", "device": "sdb", "mountpoint": "/data"},
        {"path": "/data2/kafka-logs", "device": "nvme0n1", "mountpoint": "/data2"},
    ]


def test_configured_log_dirs_win():
    samples = ProcessesCollector(log_dirs=["/home/alice/"]).collect(fixture_root("procs-t1"))
    infos = [dict(s.labels) for s in samples if s.name == "kdiag_kafka_log_dir_info"]
    assert infos == [{"path": "/home/alice", "device": "vda", "mountpoint": "/"}]
    assert by_pid(samples, "kdiag_process_touches_log_dir")["3200"] == 1


def test_vanished_pid_is_skipped(t1_samples):
    assert "999" not in by_pid(t1_samples, "kdiag_process_info")


def test_first_collect_ranks_by_cumulative_reads():
    samples = ProcessesCollector(top_n=2).collect(fixture_root("procs-t0"))
    assert set(by_pid(samples, "kdiag_process_info")) == {"2000", "2100", "3200", "3000"}


def test_parse_stat_comm_with_parens_and_spaces():
    text = "3300 (log) reader) S 1 3300 3300 0 -1 4194560 1200 0 0 0 187 63 0 0 20 0 1 0 92000 3133440\n"
    assert parse_stat(text) == Stat("log) reader", 250, 92000, "S")
    with pytest.raises(ValueError, match="/proc/1/stat line 1"):
        parse_stat("1 (init) S 1\n", "/proc/1/stat")


# Captured from a 6.x kernel: a kworker, flags 69238880 (PF_KTHREAD set), and a shell, flags 4194560.
KWORKER_STAT = ("10 (kworker/0:0H-events_highpri) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 0 -20 1 0 26 0 0 "
                "18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
SHELL_STAT = "3300 (bash) S 1 3300 3300 0 -1 4194560 1200 0 0 0 187 63 0 0 20 0 1 0 92000 3133440\n"


def test_kernel_threads_are_scanned_from_stat_alone(tmp_path):
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "stat").write_text(KWORKER_STAT)  # no io, no cmdline: neither is read
    (tmp_path / "3300").mkdir()
    (tmp_path / "3300" / "stat").write_text(SHELL_STAT)
    (tmp_path / "3300" / "io").write_text("rchar: 7\nwchar: 0\nread_bytes: 4096\nwrite_bytes: 0\n")
    (tmp_path / "3300" / "cmdline").write_text("bash\0-c\0du /data\0")
    root = Root(proc=tmp_path, sys=tmp_path)
    procs = {pid: read_process(root, pid, None) for pid in (10, 3300)}
    assert procs[10] == Process(10, Stat("kworker/0:0H-events_highpri", 0, 26, "I", True), [], NO_IO)
    assert procs[3300] == Process(3300, Stat("bash", 250, 92000, "S", False), ["bash", "-c", "du /data"], IO(4096, 7, 0))


def test_parse_cmdline():
    assert parse_cmdline("du\0-sh\0/data\0") == ["du", "-sh", "/data"]
    assert parse_cmdline("") == []
    assert parse_cmdline("postgres: writer") == ["postgres: writer"]


def test_parse_max_fds():
    assert parse_max_fds("Max open files            1024                 4096                 files\n") == 1024
    with pytest.raises(ValueError, match="Max open files"):
        parse_max_fds("Max processes 1 1 processes\n")


def test_log_dir_of():
    assert log_dir_of("/data/kafka-logs/orders-0/00000000000000000000.log") == "/data/kafka-logs"
    assert log_dir_of("/k/__consumer_offsets-12/00000000000000000042.timeindex") == "/k"
    assert log_dir_of("/data/kafka-logs/orders-1/00000000000000001234.log (deleted)") is None
    assert log_dir_of("/var/log/app-1/server.log") is None
    assert log_dir_of("socket:[1]") is None


def test_touches():
    assert touches(["/data"], ["/data/kafka-logs"])
    assert touches(["/data/kafka-logs/orders-0"], ["/data/kafka-logs/"])
    assert not touches(["/"], ["/data/kafka-logs"])
    assert not touches(["/data/kafka-logs-old"], ["/data/kafka-logs"])
    assert not touches(["/data"], ["/data/kafka-logs"], ancestors=False)  # a cwd above the log dirs is no walk
    assert path_arguments(["tar", "-C", "/data/", "--file=/backup/x.tgz", "rel"]) == [
        "/data",
        "/backup/x.tgz",
    ]


def test_top_readers_rank_by_rate_since_each_ones_last_read():
    def proc(pid, read_bytes):
        return Process(pid, Stat("x", 0, 100), ["x"], IO(read_bytes, read_bytes, 0))

    # pid 1 is new (no read before) and read 50 in its 5 s; pid 2 read 30 in 5 s; pid 3 read 200, but over the
    # 60 s since the full scan that last read it; pid 4 read nothing.
    readings = [Reading(proc(1, 50), None, 5.0), Reading(proc(2, 40), proc(2, 10), 5.0),
                Reading(proc(3, 700), proc(3, 500), 60.0), Reading(proc(4, 9), proc(4, 9), 5.0)]
    assert [p.pid for p in top_readers(readings, 5)] == [1, 2, 3]


@pytest.mark.integration
def test_count_fds_on_the_live_procfs_matches_the_listing(tmp_path):
    # Linux 6.2+ reports the count as the fd directory's size; older kernels and fixture trees are listed.
    files = [open(tmp_path / f"f{i}", "w") for i in range(40)]  # noqa: SIM115 (closed below)
    try:
        listed = len(os.listdir(f"/proc/{os.getpid()}/fd"))
        assert abs(Root().count_fds(os.getpid()) - listed) <= 1  # the listing itself holds one fd while it runs
        assert listed >= 40
    finally:
        for f in files:
            f.close()


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a mount namespace needs root")
def test_a_log_dir_only_its_containers_namespace_mounts_gets_its_space_through_the_containers_root(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    script = f"mount --make-rprivate / && mount -t tmpfs -o size=64m kdiag-test {data} && echo ready && exec sleep 600"
    proc = subprocess.Popen(["unshare", "--mount", "--", "sh", "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        placed = place(Root(), proc.pid, [str(data)])
        assert placed[0].device and placed[0].rootfs == f"/proc/{proc.pid}/root"  # this host does not mount it
        mount = f"/proc/{proc.pid}/root{data}"
        samples = {(s.name, dict(s.labels)["mountpoint"]): s for s in log_dir_samples(Root(), placed)}
        assert samples[("kdiag_filesystem_size_bytes", mount)].value == 64 * 2**20
        assert dict(samples[("kdiag_filesystem_size_bytes", mount)].labels) == {
            "device": "kdiag-test", "fstype": "tmpfs", "mountpoint": mount}
        assert 0 < samples[("kdiag_filesystem_avail_bytes", mount)].value <= 64 * 2**20
        assert dict(samples[("kdiag_kafka_log_dir_info", mount)].labels) == {
            "path": str(data), "device": "kdiag-test", "mountpoint": mount}
    finally:
        proc.kill()
        proc.wait()
