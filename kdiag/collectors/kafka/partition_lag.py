"""Per-partition lag in seconds for the partitions lagging most (kafka.top_partitions, chosen in the AdminClient's
process by lag in messages): how long ago the partition's log end was at the group's committed offset.

Each admin fetch adds the log end of every partition that was among them in the last `retention` seconds (a bounded
history: not one per partition of the cluster); interpolating it answers once the history reaches back to the
committed offset. Before that (a partition just in the top, a consumer stuck since before kdiag started) the time
the record at the committed offset was written answers, read once per offset in the AdminClient's process and taken
when plausible (lag.py). Commit timestamps (kafka.committed_offsets: offsets_topic) say when a consumer committed,
not when the record it stopped at was written: a consumer stuck at one offset and committing it again would look
current, so they do not answer here.
"""

from __future__ import annotations

from kdiag.core.history import Points, drop_before

from kdiag.collectors.kafka.lag import plausible_record_time, time_at_offset
from kdiag.core.sample import Sample
from kdiag.families.kafka import CONSUMER_PARTITION_LAG_SECONDS
from kdiag.kafka.state import AdminState


class PartitionLagClock:
    """Log end history of the partitions that lagged most within `retention` seconds, and their lag in seconds."""

    def __init__(self, retention: float = 900.0):
        self.retention = retention
        self._ends: dict[tuple[str, int], Points] = {}
        self._seen: dict[tuple[str, int], float] = {}  # when each tracked partition was last among the top

    def samples(self, now: float, state: AdminState) -> list[Sample]:
        """kdiag_consumer_partition_lag_seconds of each partition in state's top_partitions that can be answered."""
        top = state.get("top_partitions", [])
        for e in top:
            self._seen[e["topic"], e["partition"]] = now
        for key in [k for k, t in self._seen.items() if now - t > self.retention]:
            del self._seen[key]
            self._ends.pop(key, None)
        topics = state["topics"]
        by_topic: dict[str, dict[int, int | None]] = {}
        for topic, partition in self._seen:
            if topic not in by_topic:
                parts = topics[topic]["partitions"] if topic in topics else []
                by_topic[topic] = {p["partition"]: p["log_end_offset"] for p in parts}
            if (end := by_topic[topic].get(partition)) is not None:
                points = self._ends.setdefault((topic, partition), [])
                points.append((now, float(end)))
                drop_before(points, now - self.retention)
        out = []
        for e in top:
            at = time_at_offset(self._ends.get((e["topic"], e["partition"]), ()), e["committed"])
            configs = topics[e["topic"]]["configs"] if e["topic"] in topics else {}
            if at is None and "record_time" in e and plausible_record_time(e["record_time"], now, configs):
                at = e["record_time"]
            if at is not None:
                out.append(CONSUMER_PARTITION_LAG_SECONDS.sample(max(now - at, 0.0), group=e["group"],
                                                                 topic=e["topic"], partition=e["partition"]))
        return out
