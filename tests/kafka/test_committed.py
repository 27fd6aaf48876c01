"""The committed offsets the AdminClient's process keeps: compact per topic, and which groups a fetch reads again."""

from __future__ import annotations

import time

from kdiag.kafka.committed import CommittedCache, PartitionOffsets, by_topic


def test_partition_offsets_iterate_compare_and_group_by_topic():
    offsets = by_topic([("t", 0, 5), ("u", 3, 2**40), ("t", 1, 7)])
    assert {t: list(o) for t, o in offsets.items()} == {"t": [(0, 5), (1, 7)], "u": [(3, 2**40)]}
    assert offsets["t"] == PartitionOffsets([(0, 5), (1, 7)]) and offsets["t"] != PartitionOffsets([(0, 5), (1, 8)])
    assert len(offsets["t"]) == 2 and list(offsets["t"]) == list(offsets["t"])  # iterated again, not used up


def test_committed_cache_reads_moving_and_active_groups_every_fetch():
    cache = CommittedCache(300.0)
    for offset in (0, 1, 2):  # an Empty group committing from outside (assign mode): read each time
        assert cache.due("flink", "EMPTY")
        cache.put("flink", "EMPTY", [("t", 0, offset)])
    cache.put("flink", "EMPTY", [("t", 0, 2)])
    assert not cache.due("flink", "EMPTY")  # the same twice: quiet
    assert cache.due("flink", "STABLE")  # a member joined: read every fetch
    cache.put("never", "EMPTY", [])  # never committed: nothing read
    assert cache.get("never") == {} and {t: list(o) for t, o in cache.get("flink").items()} == {"t": [(0, 2)]}
    cache.keep(["never"])
    assert cache.get("flink") == {} and cache.due("flink", "EMPTY")


def test_quiet_groups_come_due_spread_over_half_to_one_and_a_half_intervals():
    cache = CommittedCache(100.0)
    groups = [f"group-{i}" for i in range(1000)]
    for g in groups:
        cache.put(g, "EMPTY", [("t", 0, 1)])
        cache.put(g, "EMPTY", [("t", 0, 1)])
    now = time.monotonic()
    shares = sorted(cache._quiet[g][1] for g in groups)
    assert shares[0] >= 0.5 and shares[-1] < 1.5
    # A tenth of the interval's width holds about a tenth of the groups, not all of them.
    assert max(sum(1 for s in shares if lo / 10 <= s < (lo + 1) / 10) for lo in range(5, 15)) < 200
    assert not any(cache.due(g, "EMPTY") for g in groups) and cache._quiet[groups[0]][0] <= now
    cache.quiet_interval = 0  # the interval is over for every group
    assert all(cache.due(g, "EMPTY") for g in groups)
