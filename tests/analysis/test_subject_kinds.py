"""SignalCache: a kind's signals are computed again only when the series it reads change, and always equal a full
computation (Kafka samples carried between fetches, a fetch that fails, series ageing out of the history)."""

from __future__ import annotations

from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.analysis.subject_kinds import SignalCache, compute_signals


def host(t: float) -> list[Sample]:
    """Host samples as every 5 s cycle collects them: new values each time."""
    return [sample("kdiag_cpu_seconds_total", t * 0.5, COUNTER, cpu="0", mode="user"),
            sample("kdiag_cpu_seconds_total", t * 0.4, COUNTER, cpu="0", mode="idle"),
            sample("kdiag_memory_available_bytes", 1e9 - t, GAUGE)]


def kafka(fetch: int, groups: int = 3) -> list[Sample]:
    """One AdminClient fetch's samples: a topic, a broker and consumer groups whose lag and members move."""
    out = [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=1, host="h", port=9092, rack=""),
           sample("kdiag_kafka_topic_partitions", 3, GAUGE, topic="t"),
           sample("kdiag_kafka_topic_broker_leaders", 3, GAUGE, topic="t", broker_id=1),
           sample("kdiag_kafka_topic_log_end_offset_total", 100 * fetch, COUNTER, topic="t")]
    for g in range(groups):
        # Irregular changes: the churn over the points kept depends on which points aged out.
        out += [sample("kdiag_kafka_consumergroup_members", (0, 0, 1, 0, 2, 2, 2, 1, 1)[(fetch + g) % 9], GAUGE, group=f"g{g}"),
                sample("kdiag_kafka_consumergroup_stable", 1, GAUGE, group=f"g{g}"),
                sample("kdiag_kafka_consumergroup_lag", 10 * fetch * g, GAUGE, group=f"g{g}")]
    return out


def test_every_cycle_equals_a_full_computation_with_fetches_carried_failed_and_aged_out():
    history, cache = History(retention=120.0), SignalCache()
    last: list[Sample] = []
    for cycle in range(80):
        t = 5.0 * cycle
        fresh = host(t)
        if cycle % 4 == 0:  # a fetch every 20 s
            last = kafka(cycle // 4, groups=3 if cycle < 40 else 2)  # a group deleted halfway
            fresh, carried = fresh + last, []
        elif 50 <= cycle < 58:  # the fetch failed: its samples are gone until the next good one
            last, carried = [], []
        else:
            carried = [last]
        history.add(t, fresh, carried)
        assert cache.compute(history, 30.0) == compute_signals(history, 30.0), f"cycle {cycle}"


def test_kafka_kinds_are_kept_between_fetches_and_computed_again_after_one():
    history, cache = History(), SignalCache()
    fetched = kafka(1)
    history.add(0.0, host(0.0) + fetched)
    history.add(5.0, host(5.0), [fetched])
    before = cache.compute(history, 30.0)
    history.add(10.0, host(10.0), [fetched])
    same = cache.compute(history, 30.0)
    assert same["group"] is before["group"] and same["topic"] is before["topic"]
    assert same["host"] is not before["host"]  # host samples change every cycle
    history.add(15.0, host(15.0) + kafka(2))
    after = cache.compute(history, 30.0)
    assert after["group"] is not before["group"]
    assert after["group"] == compute_signals(history, 30.0)["group"]


def test_a_series_vanishing_from_the_carried_samples_changes_the_signals():
    history, cache = History(), SignalCache()
    fetched = kafka(1)
    history.add(0.0, fetched)
    assert set(cache.compute(history, 30.0)["group"]) == {"g0", "g1", "g2"}
    history.add(5.0, [], [[s for s in fetched if s.labels != (("group", "g2"),)]])
    assert set(cache.compute(history, 30.0)["group"]) == {"g0", "g1"}
