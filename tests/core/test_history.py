"""History: ring buffers per series, windowed rates across counter resets and 32-bit wraps, retention."""

from __future__ import annotations

import random

import pytest

from kdiag.core.history import WRAP32, History, counter_increase, drop_before, window_rate
from kdiag.core.sample import COUNTER, COUNTER32, GAUGE, sample


def feed(history: History, points: list[tuple[float, float]], name: str = "kdiag_x_total", kind: str = COUNTER,
         **labels: str) -> None:
    for t, v in points:
        history.add(t, [sample(name, v, kind, **labels)])


def test_steady_counter_rate():
    h = History()
    feed(h, [(0, 100), (5, 150), (10, 200)], device="eth0")
    assert h.rate("kdiag_x_total", 30, device="eth0") == pytest.approx(10.0)
    assert h.latest("kdiag_x_total", device="eth0") == 200


def test_labels_select_the_series_and_order_does_not_matter():
    h = History()
    h.add(0, [sample("m_total", 0, COUNTER, a="1", b="2"), sample("m_total", 0, COUNTER, a="1", b="3")])
    h.add(10, [sample("m_total", 100, COUNTER, a="1", b="2"), sample("m_total", 50, COUNTER, a="1", b="3")])
    assert h.rate("m_total", 30, b="2", a="1") == pytest.approx(10.0)
    assert h.rate("m_total", 30, a="1", b="3") == pytest.approx(5.0)
    assert h.rate("m_total", 30, a="1") is None


def test_counter_reset_counts_from_zero():
    h = History()
    # 1000 -> 1100 (+100), reset: 1100 -> 30 counts as +30 (the counter restarted at 0), 30 -> 80 (+50).
    feed(h, [(0, 1000), (10, 1100), (20, 30), (30, 80)])
    assert h.rate("kdiag_x_total", 30) == pytest.approx((100 + 30 + 50) / 30)


def test_plain_counter_drop_near_2_32_is_a_reset_not_a_wrap():
    assert counter_increase(WRAP32 - 10, 5, COUNTER) == 5


def test_counter32_wrap_near_2_32():
    assert counter_increase(WRAP32 - 10, 5, COUNTER32) == 15
    h = History()
    feed(h, [(0, WRAP32 - 1000), (10, WRAP32 - 100), (20, 900)], kind=COUNTER32)
    # +900 up to the wrap, +100 to 2**32, +900 after it.
    assert h.rate("kdiag_x_total", 60) == pytest.approx((900 + 100 + 900) / 20)


def test_counter32_drop_far_from_2_32_is_a_reset():
    # sample.py: "a decrease near 2**32 is a wrap, not a reset". 1000 -> 5 cannot be a wrap within one interval.
    assert counter_increase(1000, 5, COUNTER32) == 5


def test_window_selects_recent_points_only():
    h = History()
    # 1/s for the first minute, then 100/s.
    points = [(t, t) for t in range(0, 61, 5)] + [(60 + t, 60 + 100 * t) for t in range(5, 31, 5)]
    feed(h, points)
    assert h.rate("kdiag_x_total", 30) == pytest.approx(100.0)
    assert h.rate("kdiag_x_total", 90) == pytest.approx((3060 - 0) / 90)


def test_window_shorter_than_interval_rates_the_last_two_points():
    h = History()
    feed(h, [(0, 0), (10, 100), (20, 400)])
    assert h.rate("kdiag_x_total", 1) == pytest.approx(30.0)


def test_rate_needs_two_points():
    h = History()
    feed(h, [(0, 5)])
    assert h.rate("kdiag_x_total", 30) is None
    assert h.rate("no_such_series", 30) is None


def test_window_rate_same_timestamp_is_none():
    from collections import deque

    assert window_rate(deque([(5.0, 1.0), (5.0, 2.0)]), 30) is None


def test_retention_prunes_old_points_and_dead_series():
    h = History(retention=20)
    h.add(0, [sample("a_total", 0, COUNTER), sample("gone", 1)])
    for t in (10, 20, 30):
        h.add(t, [sample("a_total", t, COUNTER)])
    (labels, points, kind), = list(h.series("a_total"))
    assert labels == {} and kind == COUNTER
    assert [t for t, _ in points] == [10, 20, 30]  # t=0 is older than 30 - 20
    # The series last seen at t=0 is gone entirely, not just hidden.
    assert h._points.get(("gone", ())) is None
    assert list(h.series("gone")) == []
    # The rate only sees retained points.
    assert h.rate("a_total", 1000) == pytest.approx(1.0)


def test_series_absent_from_latest_snapshot_are_not_returned():
    h = History()
    h.add(0, [sample("g", 1, GAUGE, device="sda"), sample("g", 2, GAUGE, device="sdb"),
              sample("c_total", 0, COUNTER, device="sdb")])
    h.add(5, [sample("g", 3, GAUGE, device="sda"), sample("c_total", 10, COUNTER, device="sdb")])
    h.add(10, [sample("g", 4, GAUGE, device="sda")])
    assert [labels for labels, _, _ in h.series("g")] == [{"device": "sda"}]
    assert h.latest("g", device="sda") == 4
    assert h.latest("g", device="sdb") is None
    assert h.latest("c_total", device="sdb") is None
    assert h.rate("c_total", 60, device="sdb") is None
    assert list(h.series("c_total")) == []
    # A series that comes back is served again, with its older points.
    h.add(15, [sample("c_total", 30, COUNTER, device="sdb")])
    assert h.rate("c_total", 60, device="sdb") == pytest.approx(30 / 15)


def test_latest_time_tracks_the_last_snapshot():
    h = History()
    assert h.latest_time is None
    h.add(3.5, [])
    assert h.latest_time == 3.5


def test_drop_before_keeps_the_points_at_or_after_the_horizon():
    points = [(0.0, 1.0), (5.0, 2.0), (10.0, 3.0)]
    drop_before(points, 5.0)
    assert points == [(5.0, 2.0), (10.0, 3.0)]
    drop_before(points, 11.0)
    assert points == []


def test_presence_and_versions_follow_fresh_and_carried_batches_as_a_naive_model_does():
    """Sources whose lists come new, are carried (the same list an earlier add had new), replaced or dropped in any
    order: each add's present series are those of its new and carried lists, and a name's version moves whenever one
    of its series appeared, vanished or got a point (checked against sets made from scratch each add)."""
    rng = random.Random(7)
    h = History(retention=1e9)
    lists: dict[str, list] = {}
    present_before: set = set()
    for step in range(300):
        t = float(step)
        fresh_sources, carried = [], []
        for source in "abcd":
            roll = rng.random()
            if roll < 0.3 or source not in lists:  # a new list: fresh this add
                lists[source] = [sample(f"{source}_{i % 3}", float(step), kind=GAUGE, n=str(i))
                                 for i in rng.sample(range(12), rng.randint(0, 6))]
                fresh_sources.append(source)
            elif roll < 0.85:
                carried.append(lists[source])
            # else: the source handed nothing this add
        fresh = [s for source in fresh_sources for s in lists[source]]
        before_versions = dict(h.versions)
        before_points = {n: [(dict(labels), list(points)) for labels, points, _ in h.series(n)]
                         for n in (f"{x}_{i}" for x in "abcd" for i in range(3))}
        h.add_batches(t, [lists[source] for source in fresh_sources], carried)
        present = {(s.name, s.labels) for s in fresh} | {(s.name, s.labels) for batch in carried for s in batch}
        for name in (f"{x}_{i}" for x in "abcd" for i in range(3)):
            got = {tuple(sorted(labels.items())) for labels, _, _ in h.series(name)}
            assert got == {labels for n, labels in present if n == name}, (step, name)
            now = [(labels, points) for labels, points, _ in h.series(name)]
            moved = ({k for k in present if k[0] == name} != {k for k in present_before if k[0] == name}
                     or any(s.name == name for s in fresh) or now != before_points[name])
            assert (h.versions.get(name) != before_versions.get(name)) == moved, (step, name)
        present_before = present
