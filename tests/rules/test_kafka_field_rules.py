"""Kafka rules the lab cannot produce on demand, on synthetic sample streams: each fires, and a look-alike does not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.analysis.subject_kinds import compute_signals

STEP = 5.0


def brokers_listed(ids: list[int]) -> list[Sample]:
    """What the AdminClient collector says about the live brokers."""
    return [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=b, host="127.0.0.1", port=9092, rack="") for b in ids] + [
        sample("kdiag_kafka_controller_id", ids[0])]


def run(snapshot: Callable[[float], list[Sample]], seconds: float, local_broker: int | None = None) -> list[Diagnosis]:
    """Feed one snapshot every STEP seconds through the shipped catalog; the diagnoses at the end."""
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), local_broker)
    judged = EngineState()
    diagnoses: list[Diagnosis] = []
    for i in range(int(seconds / STEP) + 1):
        t = 1764430000.0 + i * STEP
        history.add(t, snapshot(t - 1764430000.0))
        judged = engine.evaluate(judged, t, compute_signals(history, 30.0))
        diagnoses = judged.current()
    return diagnoses


def fired(diagnoses: list[Diagnosis]) -> list[tuple[str, str, str]]:
    return sorted((d.rule.id, d.subject, d.state) for d in diagnoses)


def test_a_broker_gone_for_good_is_broker_down():
    out = run(lambda t: brokers_listed([1, 2, 3] if t < 60 else [1, 2]), 120)
    assert fired(out) == [("broker_down", "cluster", "firing")]
    assert out[0].evidence["missing_broker_ids"] == "3" and out[0].evidence["expected_brokers"] == 3.0


def test_a_broker_restarted_within_seconds_is_not():
    assert fired(run(lambda t: brokers_listed([1, 2, 3] if not 60 <= t < 70 else [1, 2]), 120)) == []


def gc_seconds(share: float) -> Callable[[float], list[Sample]]:
    """Broker 1 spending `share` of its time in GC."""
    return lambda t: [*brokers_listed([1]), sample("kdiag_jvm_gc_collection_seconds_total", 100 + share * t, COUNTER, broker_id=1)]


def test_a_broker_collecting_garbage_a_quarter_of_the_time_is_broker_gc_pressure():
    out = run(gc_seconds(0.25), 120)
    assert fired(out) == [("broker_gc_pressure", "broker 1", "firing")]
    assert abs(out[0].evidence["gc_seconds_per_second"] - 0.25) < 0.01


def test_a_healthy_gc_share_is_quiet():
    # Seed 002: 20-40 ms of GC a minute is healthy; here 1% of the time.
    assert fired(run(gc_seconds(0.01), 120)) == []


def group(members: Callable[[float], int]) -> Callable[[float], list[Sample]]:
    """One consumer group whose member count follows members(t); Stable whenever it has two."""
    return lambda t: [*brokers_listed([1]), sample("kdiag_kafka_consumergroup_members", members(t), GAUGE, group="g"),
                      sample("kdiag_kafka_consumergroup_stable", int(members(t) == 2), GAUGE, group="g")]


def test_a_member_leaving_and_rejoining_every_20_seconds_is_consumer_rebalancing():
    out = run(group(lambda t: 1 if int(t // 10) % 2 else 2), 300)
    assert fired(out) == [("consumer_rebalancing", "g", "firing")]


def test_one_rolling_restart_of_the_consumers_is_not():
    # Two members restarted one after the other: four changes, once.
    assert fired(run(group(lambda t: 1 if 100 <= t < 110 or 130 <= t < 140 else 2), 300)) == []


def broker_host(cpus: int = 32, wmem_max: int = 212992, rx_queues: int = 8, memory: int = 64 << 30, broker_here: bool = True,
                **configs: float) -> Callable[[float], list[Sample]]:
    """A host running broker 1 (or not) with the given kernel and NIC, and broker 1's configs (dots as underscores)."""
    leaders = configs.pop("leaders", 100)

    def snapshot(t: float) -> list[Sample]:
        out = [*brokers_listed([1]), sample("kdiag_process_is_broker", int(broker_here), GAUGE, pid=2000, comm="java"),
               sample("kdiag_sysctl", wmem_max, GAUGE, name="net.core.wmem_max"),
               sample("kdiag_sysctl", wmem_max, GAUGE, name="net.core.rmem_max"),
               sample("kdiag_memory_MemTotal_bytes", memory),
               sample("kdiag_network_queues", rx_queues, GAUGE, device="eth0", direction="rx"),
               sample("kdiag_kafka_broker_leaders", leaders, GAUGE, broker_id=1)]
        out += [sample("kdiag_cpu_seconds_total", t * 0.5, COUNTER, cpu=c, mode=m) for c in range(cpus) for m in ("user", "idle")]
        defaults = {"num.io.threads": 16, "num.network.threads": 9, "socket.send.buffer.bytes": 102400,
                    "socket.receive.buffer.bytes": 102400}
        for name, value in {**defaults, **{k.replace("_", "."): v for k, v in configs.items()}}.items():
            out.append(sample("kdiag_kafka_broker_config", value, GAUGE, broker_id=1, name=name))
        return out
    return snapshot


LINTS = [
    # (rule, host that fires it, look-alike that does not)
    ("socket_buffer_capped", broker_host(socket_send_buffer_bytes=1048576),
     broker_host(socket_send_buffer_bytes=1048576, wmem_max=2097152)),
    ("socket_buffer_capped", broker_host(socket_send_buffer_bytes=1048576),
     broker_host(socket_send_buffer_bytes=1048576, broker_here=False)),
    ("io_threads_low", broker_host(num_io_threads=8), broker_host(num_io_threads=16)),
    ("network_threads_low", broker_host(num_network_threads=3), broker_host(num_network_threads=9)),
    ("partitions_per_broker_high", broker_host(leaders=300), broker_host(leaders=200)),
]


@pytest.mark.parametrize(("rule", "firing", "quiet"), LINTS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(LINTS)])
def test_broker_config_lints_against_this_host(rule: str, firing, quiet) -> None:
    assert fired(run(firing, 30)) == [(rule, "broker 1", "firing")]
    assert fired(run(quiet, 30)) == []


@pytest.mark.parametrize(("rule", "firing"), [(r, f) for r, f, _ in LINTS], ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(LINTS)])
def test_a_broker_config_lint_is_left_to_the_daemon_on_that_brokers_host(rule: str, firing) -> None:
    # Every daemon reads every broker's configs; compared with broker 2's host, broker 1's say nothing.
    assert fired(run(firing, 30, local_broker=1)) == [(rule, "broker 1", "firing")]
    assert fired(run(firing, 30, local_broker=2)) == []


def topic(segment_bytes: float, messages_per_second: float) -> Callable[[float], list[Sample]]:
    """Topic t with the given segment.bytes and produce rate."""
    return lambda t: [*brokers_listed([1]), sample("kdiag_kafka_topic_partitions", 3, GAUGE, topic="t"),
                      sample("kdiag_kafka_topic_replication_factor", 3, GAUGE, topic="t"),
                      sample("kdiag_kafka_topic_config", segment_bytes, GAUGE, topic="t", name="segment.bytes"),
                      sample("kdiag_kafka_topic_log_end_offset_total", 1e6 + messages_per_second * t, COUNTER, topic="t")]


def test_small_segments_on_a_busy_topic_are_segment_bytes_small():
    assert fired(run(topic(64 << 20, 5000), 30)) == [("segment_bytes_small", "t", "firing")]
    assert fired(run(topic(1 << 30, 5000), 30)) == []
    assert fired(run(topic(64 << 20, 10), 30)) == []


def brokers_writing(slow_after: float, bytes_per_second: float = 10e6, all_slow: bool = False) -> Callable[[float], list[Sample]]:
    """Three brokers writing at 5 ms produce local p99; broker 2 (or all) at 60 ms from slow_after on."""
    def snapshot(t: float) -> list[Sample]:
        out = brokers_listed([1, 2, 3])
        for b in (1, 2, 3):
            slow = t >= slow_after and (all_slow or b == 2)
            out += [sample("kdiag_kafka_bytes_in_total", 1e9 + bytes_per_second * t, COUNTER, broker_id=b),
                    sample("kdiag_kafka_request_time_seconds", 0.06 if slow else 0.005, GAUGE, broker_id=b,
                           request="Produce", phase="local", quantile="0.99")]
        return out
    return snapshot


def test_a_busy_broker_turning_much_slower_than_its_peers_is_broker_slow_vs_peers():
    out = run(brokers_writing(slow_after=600), 720)
    assert fired(out) == [("broker_slow_vs_peers", "broker 2", "firing")]
    assert out[0].evidence["slowness_vs_peers"] == 12.0


def test_a_slow_idle_broker_or_all_brokers_slowing_together_is_not():
    assert fired(run(brokers_writing(slow_after=600, bytes_per_second=1e5), 720)) == []
    assert fired(run(brokers_writing(slow_after=600, all_slow=True), 720)) == []


def test_a_broker_that_never_joined_is_broker_down_once_kafka_expected_brokers_names_it():
    def expecting_4(t: float) -> list[Sample]:
        return [*brokers_listed([1, 2, 3]), *(sample("kdiag_kafka_broker_expected", 1, GAUGE, broker_id=b) for b in (1, 2, 3, 4))]

    out = run(expecting_4, 60)
    assert fired(out) == [("broker_down", "cluster", "firing")] and out[0].evidence["missing_broker_ids"] == "4"
    assert fired(run(lambda t: brokers_listed([1, 2, 3]), 60)) == []
