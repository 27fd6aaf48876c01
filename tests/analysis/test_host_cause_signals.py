"""The proc subject's memory-limit signals from hand-built cgroup_memory samples."""

from __future__ import annotations

import pytest

from kdiag.analysis.host_cause_signals import proc_memory_signals, proc_wait_signals, produce_latency_moved, where
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample

pytestmark = pytest.mark.unit
GiB = 2**30
POD = "/kubepods.slice/kubepods-pod1.slice"
CONTAINER = f"{POD}/cri-containerd-abc.scope"


def cgroup(pid: str, path: str, limit: float, usage: float, anon: float, file: float, hits: float,
           oom_kills: float) -> list[Sample]:
    labels = {"pid": pid, "comm": "java", "cgroup": path}
    return [sample("kdiag_process_cgroup_memory_limit_bytes", limit, GAUGE, **labels),
            sample("kdiag_process_cgroup_memory_usage_bytes", usage, GAUGE, **labels),
            sample("kdiag_process_cgroup_memory_bytes", anon, GAUGE, **labels, type="anon"),
            sample("kdiag_process_cgroup_memory_bytes", file, GAUGE, **labels, type="file"),
            sample("kdiag_process_cgroup_memory_limit_hits_total", hits, COUNTER, **labels),
            sample("kdiag_process_cgroup_memory_oom_kills_total", oom_kills, COUNTER, **labels)]


def test_the_smallest_limit_gives_the_page_cache_room_and_its_reclaim_rate() -> None:
    h = History()
    for t, hits in ((0.0, 100.0), (10.0, 150.0)):
        h.add(t, cgroup("7", POD, 8 * GiB, 2 * GiB, GiB, GiB, 0, 0) +
              cgroup("7", CONTAINER, 2 * GiB, 1.95 * GiB, 1.5 * GiB, 0.45 * GiB, hits, 0))
    s = proc_memory_signals(h, 30.0)["7"]
    assert s["memory_limit_bytes"] == 2 * GiB and s["memory_cgroup"] == CONTAINER
    assert s["memory_cache_room_bytes"] == 0.5 * GiB and s["memory_file_bytes"] == 0.45 * GiB
    assert s["memory_usage_share"] == pytest.approx(0.975)
    assert s["memory_limit_hits_per_second"] == pytest.approx(5.0)
    assert s["memory_oom_kills_recent"] == 0.0


def test_an_oom_kill_is_told_to_the_broker_that_came_back_in_the_same_cgroup() -> None:
    h = History()
    h.add(0.0, cgroup("7", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 3))
    h.add(10.0, cgroup("7", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 3))
    # pid 7 was killed between two cycles; pid 9 starts with the cgroup's count that includes the kill.
    h.add(20.0, cgroup("9", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 4))
    out = proc_memory_signals(h, 30.0)
    assert "7" not in out
    assert out["9"]["memory_oom_kills_recent"] == 1.0 and out["9"]["memory_oom_cgroup"] == CONTAINER


def test_old_kills_are_not_recent() -> None:
    h = History()
    h.add(0.0, cgroup("7", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 3))
    h.add(400.0, cgroup("9", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 4))
    h.add(700.0, cgroup("9", CONTAINER, 2 * GiB, GiB, GiB, 0, 0, 4))
    assert proc_memory_signals(h, 30.0)["9"]["memory_oom_kills_recent"] == 0.0


@pytest.mark.parametrize(("cgroup", "named"), [
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e_a2b3.slice/cri-containerd-4c2a9d8e7f6b5a41.scope",
     "pod 0f1e-a2b3 container 4c2a9d8e7f6b"),
    ("/kubepods.slice/kubepods-pod77aa_01.slice", "pod 77aa-01"),
    ("/kubepods/burstable/pod0f1e-a2b3/4c2a9d8e7f6b5a41", "pod 0f1e-a2b3 container 4c2a9d8e7f6b"),
    ("/kubepods/pod0f1e-a2b3", "pod 0f1e-a2b3"),
])
def test_a_kubernetes_cgroup_is_named_by_its_pod_and_container(cgroup: str, named: str) -> None:
    assert where(cgroup) == f"{named} (cgroup {cgroup})"


def test_any_other_cgroup_is_named_by_its_path() -> None:
    assert where("/system.slice/kafka.service") == "cgroup /system.slice/kafka.service"
    assert where("/user.slice/kubepods-fake") == "cgroup /user.slice/kubepods-fake"


def produce_p99(broker: str, seconds: float) -> Sample:
    return sample("kdiag_kafka_request_time_seconds", seconds, GAUGE, broker_id=broker, request="Produce",
                  phase="total", quantile="0.99")


def test_produce_latency_moved_against_its_own_lower_quartile() -> None:
    h = History()
    for t, p99 in enumerate((0.01, 0.012, 0.011, 0.01, 0.08)):
        h.add(float(t), [produce_p99("1", p99), sample("kdiag_kafka_request_time_seconds", 0.5, GAUGE, broker_id="1",
                                                       request="Produce", phase="total", quantile="0.5")])
    p99, moved = produce_latency_moved(h) or (None, None)
    assert p99 == 0.08 and moved == pytest.approx(0.08 / 0.01, rel=0.02)


def test_produce_latency_moved_against_its_peers_and_unknown_before_four_reads() -> None:
    h = History()
    for t in range(4):
        h.add(float(t), [produce_p99("1", 0.3), produce_p99("2", 0.01), produce_p99("3", 0.02)])
    assert produce_latency_moved(h) == (0.3, pytest.approx(0.3 / 0.015))
    short = History()
    for t in range(3):
        short.add(float(t), [produce_p99("1", 0.3 * (t + 1))])
    assert produce_latency_moved(short) is None


def test_a_broker_process_carries_the_moved_latency_others_do_not() -> None:
    h = History()
    for t in range(5):
        h.add(float(t), [produce_p99("1", 0.01 if t < 4 else 0.05),
                         sample("kdiag_process_is_broker", 1, GAUGE, comm="java", pid="7"),
                         sample("kdiag_process_is_broker", 0, GAUGE, comm="yes", pid="8")])
    signals = proc_wait_signals(h, 30.0)
    assert signals["7"]["broker_produce_p99_seconds"] == 0.05
    assert signals["7"]["broker_produce_p99_vs_baseline"] == pytest.approx(5.0)
    assert "broker_produce_p99_seconds" not in signals.get("8", {})
