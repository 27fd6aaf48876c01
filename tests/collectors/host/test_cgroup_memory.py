import shutil

import pytest
from tests.collectors.golden import FIXTURES, fixture_root

from kdiag.app.wiring import host_collectors
from kdiag.collectors.host.cgroup_memory import CgroupMemoryCollector, parse_limit
from kdiag.config.settings import Config
from kdiag.core.root import Root

K8S = "/kubepods.slice/kubepods-pod7c1e.slice"
CONTAINER = f"{K8S}/cri-containerd-9a2b.scope"


def by_cgroup(samples, name, **labels):
    return {dict(s.labels)["cgroup"]: s.value for s in samples
            if s.name == name and labels.items() <= dict(s.labels).items()}


def test_v2_reports_the_pod_and_the_container_limits_and_their_oom_kills():
    samples = CgroupMemoryCollector().collect(fixture_root("slow-broker-v2", "broker-memory/v2"))
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_limit_bytes") == {K8S: 8 * 2**30, CONTAINER: 4 * 2**30}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_usage_bytes")[CONTAINER] == 4119011328
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_limit_hits_total")[CONTAINER] == 1873
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_oom_kills_total") == {K8S: 2, CONTAINER: 2}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_bytes", type="anon")[CONTAINER] == 3 * 2**30
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_bytes", type="file")[CONTAINER] == 856735744
    assert all(dict(s.labels)["pid"] == "4242" for s in samples)


def test_v1_on_a_hybrid_host_reads_the_memory_hierarchy_and_leaves_out_the_unlimited_cgroups():
    # This machine's memory files (cgroup v1 memory controller, v2 mounted at fs/cgroup/unified without it); only the
    # container sets a limit.
    samples = CgroupMemoryCollector().collect(fixture_root("slow-broker-v1", "broker-memory/v1"))
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_limit_bytes") == {"/docker/0d1f": 4 * 2**30}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_usage_bytes") == {"/docker/0d1f": 616239104}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_oom_kills_total") == {"/docker/0d1f": 0}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_bytes", type="file") == {"/docker/0d1f": 598093824}
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_bytes", type="anon") == {"/docker/0d1f": 2203648}


def test_no_limit_is_none_in_either_version():
    assert parse_limit("max\n", "memory.max", "v2") is None
    assert parse_limit("9223372036854771712\n", "memory.limit_in_bytes", "v1") is None  # 4 KiB pages
    assert parse_limit("9223372036854710272\n", "memory.limit_in_bytes", "v1") is None  # 64 KiB pages
    assert parse_limit("4294967296\n", "memory.limit_in_bytes", "v1") == 4 * 2**30
    with pytest.raises(ValueError, match="expected a number"):
        parse_limit("lots\n", "memory.max", "v2")


def copy(tmp_path, proc: str, sys: str) -> Root:
    shutil.copytree(FIXTURES / proc / "proc", tmp_path / "proc")
    shutil.copytree(FIXTURES / sys / "sys", tmp_path / "sys")
    return Root(tmp_path / "proc", tmp_path / "sys")


def test_a_broken_cgroup_file_leaves_that_broker_out_and_counts_it(tmp_path):
    root = copy(tmp_path, "slow-broker-v2", "broker-memory/v2")
    (tmp_path / f"sys/fs/cgroup{CONTAINER}/memory.events").write_text("low 0\nhigh 0\n")
    samples = CgroupMemoryCollector().collect(root)
    assert [(s.name, dict(s.labels)["reason"], s.value) for s in samples] == [
        ("kdiag_collector_skipped_entries", "malformed", 1.0)]


def test_v1_without_oom_kill_counts_gives_the_other_series(tmp_path):
    root = copy(tmp_path, "slow-broker-v1", "broker-memory/v1")
    (tmp_path / "sys/fs/cgroup/memory/docker/0d1f/memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    samples = CgroupMemoryCollector().collect(root)
    assert not by_cgroup(samples, "kdiag_process_cgroup_memory_oom_kills_total")
    assert by_cgroup(samples, "kdiag_process_cgroup_memory_limit_bytes") == {"/docker/0d1f": 4 * 2**30}


def test_it_registers_itself_and_runs_after_processes_over_its_broker_table():
    collectors = host_collectors(Config())
    names = [c.name for c in collectors]
    memory = collectors[names.index("cgroup_memory")]
    assert names.index("processes") < names.index("cgroup_memory")
    assert memory.brokers.table is collectors[names.index("processes")].table
