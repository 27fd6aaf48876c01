import shutil

import pytest
from tests.collectors.golden import FIXTURES, fixture_root

from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.collectors.host.cgroup_cpu import (CgroupCpuCollector, ancestors, controller_cgroup, hierarchies, parse_cfs_quota,
                                              parse_cpu_max, parse_proc_cgroup)
from kdiag.collectors.host.mounts import parse_mounts
from kdiag.core.root import Root

K8S = "/kubepods.slice/kubepods-pod7c1e.slice"


def by_cgroup(samples, name):
    return {dict(s.labels)["cgroup"]: s.value for s in samples if s.name == name}


def test_v2_reports_every_cgroup_with_a_quota_from_the_pod_to_the_container():
    samples = CgroupCpuCollector().collect(fixture_root("slow-broker-v2"))
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_quota_cores") == {K8S: 2.0, f"{K8S}/cri-containerd-9a2b.scope": 1.0}
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_throttled_periods_total")[f"{K8S}/cri-containerd-9a2b.scope"] == 9120
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_throttled_seconds_total")[K8S] == pytest.approx(0.31)
    assert all(dict(s.labels)["pid"] == "4242" for s in samples)


def test_v1_on_a_hybrid_host_reads_the_cpu_hierarchy_and_throttled_time_in_nanoseconds():
    # This project's VM: cpu bound to v1 (/sys/fs/cgroup/cpu), cgroup2 at /sys/fs/cgroup/unified without it.
    samples = CgroupCpuCollector().collect(fixture_root("slow-broker-v1"))
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_quota_cores") == {"/docker/0d1f": 1.5}
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_throttled_seconds_total") == {"/docker/0d1f": pytest.approx(713.842117734)}
    assert by_cgroup(samples, "kdiag_process_cgroup_cpu_periods_total") == {"/docker/0d1f": 52341}


def test_parsers():
    assert parse_cpu_max("max 100000\n") is None and parse_cpu_max("150000 100000\n") == 1.5
    assert parse_cfs_quota("-1\n", "100000\n") is None and parse_cfs_quota("50000", "100000") == 0.5
    assert parse_proc_cgroup("1:cpu,cpuacct:/a/b\n0::/x:y\n")[1].path == "/x:y"
    assert ancestors("/a/b") == ["/a/b", "/a", "/"] and ancestors("/") == ["/"]
    with pytest.raises(ValueError, match=r"^/proc/<pid>/cgroup line 2: expected ID:CONTROLLERS:/PATH"):
        parse_proc_cgroup("0::/\ngarbage\n")
    with pytest.raises(ValueError, match=r"cpu\.max line 1"):
        parse_cpu_max("lots\n")
    with pytest.raises(ValueError, match="not a plain path"):
        ancestors("/a/../b")


def test_v1_wins_where_cpu_is_bound_to_it():
    mounts = parse_mounts((FIXTURES / "slow-broker-v1/proc/mounts").read_text())
    cpu = hierarchies(mounts, "cpu")
    assert cpu == {"v1": "fs/cgroup/cpu", "v2": "fs/cgroup/unified"}
    entries = parse_proc_cgroup("1:cpu:/docker/0d1f\n0::/\n")
    assert controller_cgroup(entries, cpu, "cpu") == ("v1", "fs/cgroup/cpu", "/docker/0d1f")
    assert controller_cgroup(entries, {"v2": "fs/cgroup"}, "cpu") == ("v2", "fs/cgroup", "/")


def test_an_unreadable_broker_cgroup_degrades_only_that_broker(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2", tmp_path / "h")
    (tmp_path / "h/proc/4242/cgroup").write_text("nonsense\n")
    root = Root(tmp_path / "h/proc", tmp_path / "h/sys")
    samples = CgroupCpuCollector().collect(root)
    assert [(s.name, dict(s.labels)["reason"], s.value) for s in samples] == [
        ("kdiag_collector_skipped_entries", "malformed", 1.0)]
    (tmp_path / "h/proc/4242/cgroup").unlink()
    assert dict(CgroupCpuCollector().collect(root)[0].labels)["reason"] == "ENOENT"


def test_broker_pids_are_checked_each_call_and_rescanned_when_one_went(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    now = [0.0]
    root = Root(tmp_path / "proc", tmp_path / "sys", clock=lambda: now[0])
    lookup = BrokerPids(rescan_seconds=300.0, idle_rescan_seconds=60.0)
    assert [b.pid for b in lookup.brokers(root)] == [4242]
    shutil.copytree(tmp_path / "proc/4242", tmp_path / "proc/5000")  # a second broker: found at the next rescan
    now[0] = 299.0
    assert [b.pid for b in lookup.brokers(root)] == [4242]
    now[0] = 300.0
    assert [b.pid for b in lookup.brokers(root)] == [4242, 5000]
    shutil.rmtree(tmp_path / "proc/4242")  # gone: rescanned at once, not cached as alive
    now[0] = 301.0
    assert [b.pid for b in lookup.brokers(root)] == [5000]
    shutil.rmtree(tmp_path / "proc/5000")  # none left: looked for again every minute, not every 5
    now[0] = 302.0
    assert lookup.brokers(root) == []
    shutil.copytree(tmp_path / "proc/1", tmp_path / "proc/6000")
    (tmp_path / "proc/6000/cmdline").write_text((FIXTURES / "slow-broker-v2/proc/4242/cmdline").read_text())
    now[0] = 361.0
    assert lookup.brokers(root) == []
    now[0] = 362.0
    assert [b.pid for b in lookup.brokers(root)] == [6000]
