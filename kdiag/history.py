"""Per-series ring buffers of recent samples, and rates that survive counter resets and 32-bit wraps."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator

from kdiag.sample import COUNTER, COUNTER32, Sample

Key = tuple[str, tuple[tuple[str, str], ...]]
WRAP32 = 2**32


class History:
    """The last `retention` seconds of every series, plus the labels of the latest snapshot."""

    def __init__(self, retention: float = 900.0):
        self.retention = retention
        self._points: dict[Key, deque[tuple[float, float]]] = {}
        self._kinds: dict[Key, str] = {}
        # Per carried batch (a list of samples fetched earlier, already added; id -> (list, key -> sample)): a carried
        # series is present without a new point, so rates over Kafka's fetches see real steps, not a staircase of
        # repeated values. A batch is carried cycle after cycle as the same list: its keys are made once.
        self._batches: dict[int, tuple[list[Sample], dict[Key, Sample]]] = {}
        # Insertion-ordered, unlike a set: sums and ties (the busiest CPU) must not depend on the hash seed.
        self._by_name: dict[str, dict[Key, None]] = {}
        self._present: set[Key] = set()
        self._appended: deque[tuple[float, list[Key]]] = deque()  # per add, the series that got a point
        # Per name, a number that moves whenever its series do (a point added or dropped, a series appearing or
        # vanishing): signals read from names that did not move are the same (kdiag.subject_kinds.SignalCache).
        self.versions: dict[str, int] = {}
        self._reads: set[str] | None = None
        self.latest_time: float | None = None

    def add(self, t: float, samples: Iterable[Sample], carried: Iterable[list[Sample]] = ()) -> None:
        """Append one snapshot taken at time t, mark the carried batches' samples present (a point only for a series
        it does not hold), and drop what is older than the retention."""
        present: set[Key] = set()
        appended: list[Key] = []
        for s in samples:
            key = (s.name, s.labels)
            self._append(t, key, s, appended)
            present.add(key)
        points = self._points
        batches = {}
        for batch in carried:
            known = self._batches.get(id(batch))
            if known is None or known[0] is not batch:
                known = (batch, {(s.name, s.labels): s for s in batch})
            batches[id(batch)] = known
            present.update(known[1])
            for key in known[1].keys() - points.keys():
                self._append(t, key, known[1][key], appended)
        self._batches = batches
        changed = {key[0] for key in appended}
        changed.update(key[0] for key in present.symmetric_difference(self._present))
        self._present = present
        self._appended.append((t, appended))
        self.latest_time = t
        # Points leave in the order they came: only the series that got a point at a time now too old are touched,
        # not every series each cycle (Kafka's thousands get one per fetch).
        horizon = t - self.retention
        while self._appended and self._appended[0][0] < horizon:
            for key in self._appended.popleft()[1]:
                kept = points[key]
                kept.popleft()
                changed.add(key[0])
                if not kept:
                    del points[key], self._kinds[key]
                    self._by_name[key[0]].pop(key, None)
                    present.discard(key)  # a carried series with no point left is absent until it gets one
        for name in changed:
            self.versions[name] = self.versions.get(name, 0) + 1

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
            points = self._points[key] = deque()
            self._by_name.setdefault(s.name, {})[key] = None
        self._kinds[key] = s.kind
        points.append((t, s.value))

    def series(self, name: str) -> Iterator[tuple[dict[str, str], deque[tuple[float, float]], str]]:
        """(labels, points, kind) of every series with this name present in the latest snapshot."""
        self.note_read(name)
        for key in self._by_name.get(name, ()):
            if key in self._present:
                yield dict(key[1]), self._points[key], self._kinds[key]

    def recent_series(self, name: str) -> Iterator[tuple[dict[str, str], deque[tuple[float, float]]]]:
        """(labels, points) of every series with this name seen within the retention, absent now or not."""
        self.note_read(name)
        for key in self._by_name.get(name, ()):
            yield dict(key[1]), self._points[key]

    def latest(self, name: str, **labels: str) -> float | None:
        """Latest value of one series, or None when it is absent from the latest snapshot."""
        self.note_read(name)
        key = (name, tuple(sorted(labels.items())))
        if key not in self._present:
            return None
        return self._points[key][-1][1]

    def rate(self, name: str, window: float, **labels: str) -> float | None:
        """Per-second increase of one counter over the last `window` seconds, or None without two points."""
        self.note_read(name)
        key = (name, tuple(sorted(labels.items())))
        if key not in self._present:
            return None
        return window_rate(self._points[key], window, self._kinds[key])


def counter_increase(previous: float, current: float, kind: str) -> float:
    """Increase between two counter readings: a drop is a wrap for 32-bit counters, else a reset."""
    if current >= previous:
        return current - previous
    # A 32-bit counter that wrapped gained less than half its range; a bigger "gain" means it was reset.
    if kind == COUNTER32 and previous < WRAP32 and current + WRAP32 - previous < WRAP32 // 2:
        return current + WRAP32 - previous
    return current


def window_rate(points: deque[tuple[float, float]], window: float, kind: str = COUNTER) -> float | None:
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
