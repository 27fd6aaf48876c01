"""Log end offsets asked per leader through librdkafka (where kafka-python's batched client cannot be had): each
offsets_for_times call names partitions of one leader only, so librdkafka sends it as one ListOffsets request (it
splits a call by leader)."""

from __future__ import annotations

from confluent_kafka import OFFSET_END, TopicPartition

from kdiag.kafka import admin as kafka_admin


class Answering:
    """A Consumer's offsets_for_times as librdkafka answers it (the end offset in each TopicPartition), keeping the
    partitions of each call."""

    def __init__(self, ends: dict[tuple[str, int], int]):
        self.ends = ends
        self.calls: list[list[tuple[str, int]]] = []

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        assert all(tp.offset == OFFSET_END for tp in partitions) and timeout > 0
        self.calls.append([(tp.topic, tp.partition) for tp in partitions])
        return [TopicPartition(tp.topic, tp.partition, self.ends[tp.topic, tp.partition]) for tp in partitions]


def test_each_call_asks_one_leader_in_batches_and_offline_partitions_are_not_asked(monkeypatch):
    monkeypatch.setattr(kafka_admin, "OFFSETS_BATCH", 4)
    # 3 topics of 5 partitions, leaders 1, 2, 3 in turn; partition 4 of topic c offline.
    topics = {t: {"partitions": [{"partition": p, "leader": -1 if (t, p) == ("c", 4) else 1 + (p + i) % 3,
                                  "replicas": [], "isr": [], "log_end_offset": None} for p in range(5)],
                  "configs": {}} for i, t in enumerate("abc")}
    consumer = Answering({(t, p): 10 * i + p for i, t in enumerate("abc") for p in range(5)})
    got = kafka_admin._log_end_offsets(consumer, topics, deadline=float("inf"), batch=None)
    assert got == {(t, p): 10 * i + p for i, t in enumerate("abc") for p in range(5) if (t, p) != ("c", 4)}
    leader = {(t, d["partition"]): d["leader"] for t, v in topics.items() for d in v["partitions"]}
    assert all(len({leader[tp] for tp in call}) == 1 for call in consumer.calls)
    assert sorted(len(call) for call in consumer.calls) == [1, 1, 4, 4, 4]  # 5, 5 and 4 partitions per leader
