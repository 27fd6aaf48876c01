"""Per-series ring buffers of recent samples, and rates that survive counter resets and 32-bit wraps."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator

from kdiag.core.sample import COUNTER, COUNTER32, Sample, SampleKind

Key = tuple[str, tuple[tuple[str, str], ...]]
# (time, value), oldest first. A list, not a deque: most series hold a few points (a Kafka fetch's, one a minute),
# and a deque's first block alone is 600 bytes (66,000 series at 100,000 partitions: 45 MB).
Points = list[tuple[float, float]]
WRAP32 = 2**32


class History:
    """The last `retention` seconds of every series, plus the labels of the latest snapshot."""

    def __init__(self, retention: float = 900.0):
        self.retention = retention
        self._points: dict[Key, Points] = {}
        self._kinds: dict[Key, SampleKind] = {}
        # The latest add's batches (lists of samples) with their keys: a source's list is handed cycle after cycle as
        # the same list until its job runs again (Kafka's fetch), so its keys are made once and it is walked only when
        # it comes or goes. A batch seen before gets no new point, so rates over Kafka's fetches see real steps, not a
        # staircase of repeated values.
        self._batches: list[tuple[list[Sample], dict[Key, Sample]]] = []
        self._present_in: dict[Key, int] = {}  # the series of the latest add's batches, and in how many of them
        self._gone: set[Key] = set()  # present series whose points aged out: absent until the next add gives one
        # Insertion-ordered, unlike a set: sums and ties (the busiest CPU) must not depend on the hash seed.
        self._by_name: dict[str, dict[Key, None]] = {}
        self._appended: deque[tuple[float, list[Key]]] = deque()  # per add, the series that got a point
        # Per name, a number that moves whenever its series do (a point added or dropped, a series appearing or
        # vanishing): signals read from names that did not move are the same (kdiag.analysis.subject_kinds.SignalCache).
        self.versions: dict[str, int] = {}
        self._reads: set[str] | None = None
        self.latest_time: float | None = None

    def add(self, t: float, samples: Iterable[Sample], carried: Iterable[list[Sample]] = ()) -> None:
        """Append one snapshot taken at time t: a point for each sample, the carried batches' series present (a point
        only for a series it does not hold), and drop what is older than the retention."""
        self.add_batches(t, [list(samples)], carried)

    def add_batches(self, t: float, new: Iterable[list[Sample]], carried: Iterable[list[Sample]] = ()) -> None:
        """Append one snapshot taken at time t as lists of samples: each series of a new list gets a point, a carried
        list (one an earlier add had) marks its series present (a point only for a series it does not hold)."""
        appended: list[Key] = []
        held = {id(known[0]): known for known in self._batches}
        batches = []
        points, kinds, by_name, append = self._points, self._kinds, self._by_name, appended.append
        for batch in new:
            keys = {}
            for s in batch:  # _append, inline: 70,000 series a Kafka fetch
                key = (s.name, s.labels)
                keys[key] = s
                kept = points.get(key)
                if kept is None:
                    kept = points[key] = []
                    by_name.setdefault(s.name, {})[key] = None
                    kinds[key] = s.kind
                kept.append((t, s.value))
                append(key)
            batches.append((batch, keys))
        for batch in carried:
            known = held.get(id(batch))
            if known is None:  # a list this history never had
                known = (batch, {(s.name, s.labels): s for s in batch})
                for key, s in known[1].items():
                    if key not in self._points:
                        self._append(t, key, s, appended)
            batches.append(known)
        entered, left = self._recount(held, batches)
        self._batches = batches
        present = self._present_in
        for key in self._gone & present.keys():
            if key not in points:
                self._append(t, key, next(keys[key] for _, keys in batches if key in keys), appended)
        self._gone = set()
        changed = {key[0] for key in entered}
        changed.update(key[0] for key in left)
        changed.update(key[0] for key in appended)
        self._appended.append((t, appended))
        self.latest_time = t
        # Points leave in the order they came: only the series that got a point at a time now too old are touched,
        # not every series each cycle (Kafka's thousands get one per fetch).
        horizon = t - self.retention
        while self._appended and self._appended[0][0] < horizon:
            for key in self._appended.popleft()[1]:
                kept = points[key]
                del kept[0]
                changed.add(key[0])
                if not kept:
                    del points[key], self._kinds[key]
                    self._by_name[key[0]].pop(key, None)
                    self._gone.add(key)
        for name in changed:
            self.versions[name] = self.versions.get(name, 0) + 1

    def _recount(self, held: dict[int, tuple[list[Sample], dict[Key, Sample]]],
                 batches: list[tuple[list[Sample], dict[Key, Sample]]]) -> tuple[set[Key], set[Key]]:
        """Count each series over the new batches; the series that appeared, and those that vanished. Only batches
        that came or went are walked (ids compare identity: the last add's batches are still held, so no new list can
        share an id with one), the new ones first, so a series in both a batch that came and one that went stays."""
        counts, entered, left = self._present_in, set(), set()
        now = {id(b): keys for b, keys in batches}
        for i, keys in now.items():
            if i not in held:
                for key in keys:
                    n = counts.get(key, 0)
                    counts[key] = n + 1
                    if not n:
                        entered.add(key)
        for i, (_, keys) in held.items():
            if i not in now:
                for key in keys:
                    if n := counts[key] - 1:
                        counts[key] = n
                    else:
                        del counts[key]
                        left.add(key)
        return entered, left

    def _present(self, key: Key) -> bool:
        # Its points are gone once they aged out; until the next add gives it one, it is absent.
        return key in self._present_in and key in self._points

    def read_names(self) -> set[str]:
        """Start noting the names read (series, recent_series, latest, rate) into the returned set, until stop_reading."""
        self._reads = set()
        return self._reads

    def stop_reading(self) -> None:
        """Stop noting the names read."""
        self._reads = None

    def note_read(self, name: str) -> None:
        """Note a name as read (for a helper that caches what it read)."""
        if self._reads is not None:
            self._reads.add(name)

    def _append(self, t: float, key: Key, s: Sample, appended: list[Key]) -> None:
        appended.append(key)
        points = self._points.get(key)
        if points is None:
            points = self._points[key] = []
            self._by_name.setdefault(s.name, {})[key] = None
            self._kinds[key] = s.kind
        points.append((t, s.value))

    def series(self, name: str) -> Iterator[tuple[dict[str, str], Points, SampleKind]]:
        """(labels, points, kind) of every series with this name present in the latest snapshot."""
        self.note_read(name)
        present = self._present_in
        for key in self._by_name.get(name, ()):
            if key in present:
                yield dict(key[1]), self._points[key], self._kinds[key]

    def series_of(self, name: str, label: str) -> Iterator[tuple[str, Points]]:
        """(one label's value, '' without it; points) of every series with this name present in the latest snapshot:
        series() without a dict of labels per series (10,000 groups' series, read by several signals each)."""
        self.note_read(name)
        present, points = self._present_in, self._points
        for key in self._by_name.get(name, ()):
            if key in present:
                yield next((v for k, v in key[1] if k == label), ""), points[key]

    def recent_series(self, name: str) -> Iterator[tuple[dict[str, str], Points]]:
        """(labels, points) of every series with this name seen within the retention, absent now or not."""
        self.note_read(name)
        for key in self._by_name.get(name, ()):
            yield dict(key[1]), self._points[key]

    def latest(self, name: str, **labels: str) -> float | None:
        """Latest value of one series, or None when it is absent from the latest snapshot."""
        self.note_read(name)
        key = (name, tuple(sorted(labels.items())))
        return self._points[key][-1][1] if self._present(key) else None

    def rate(self, name: str, window: float, **labels: str) -> float | None:
        """Per-second increase of one counter over the last `window` seconds, or None without two points."""
        self.note_read(name)
        key = (name, tuple(sorted(labels.items())))
        if not self._present(key):
            return None
        return window_rate(self._points[key], window, self._kinds[key])


def drop_before(points: Points, horizon: float) -> None:
    """Drop the points older than `horizon` (points in time order)."""
    old = 0
    while old < len(points) and points[old][0] < horizon:
        old += 1
    del points[:old]


def counter_increase(previous: float, current: float, kind: SampleKind) -> float:
    """Increase between two counter readings: a drop is a wrap for 32-bit counters, else a reset."""
    if current >= previous:
        return current - previous
    # A 32-bit counter that wrapped gained less than half its range; a bigger "gain" means it was reset.
    if kind == COUNTER32 and previous < WRAP32 and current + WRAP32 - previous < WRAP32 // 2:
        return current + WRAP32 - previous
    return current


def window_rate(points: Points, window: float, kind: SampleKind = COUNTER) -> float | None:
    """Per-second increase across the points in the last `window` seconds (at least two points)."""
    start = points[-1][0] - window
    # From the newest point back: a series holds the whole retention (180 points at 5 s), a window only a few.
    selected = []
    for point in reversed(points):
        if point[0] < start:
            break
        selected.append(point)
    selected.reverse()
    if len(selected) < 2:
        # A window shorter than the interval still rates the last two points.
        if len(points) < 2:
            return None
        selected = [points[-2], points[-1]]
    increase = sum(counter_increase(a[1], b[1], kind) for a, b in itertools.pairwise(selected))
    elapsed = selected[-1][0] - selected[0][0]
    return increase / elapsed if elapsed > 0 else None
