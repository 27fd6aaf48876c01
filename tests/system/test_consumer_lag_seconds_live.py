"""kdiag_consumer_lag_seconds from a real `kdiag run` on the lab matches the lag a test producer knows, within 20%:
from the history of log end offsets for a group committed after kdiag started, from the record at the committed offset
for a group committed before."""

from __future__ import annotations

import contextlib
import math
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tests.promstack import Stack
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka
PARTITIONS = 3
RATE = 60.0  # records per second over all partitions
TRUE_LAG = 40.0  # seconds of lag at which the served value is judged
TOLERANCE = 0.2


class KnownProducer:
    """Records at RATE per second, round robin over the partitions, each stamped with the time it is sent; keeps the
    timestamp of every (partition, offset) the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.stamps: dict[tuple[int, int], float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _acked(self, err, msg) -> None:
        if err is None:
            self.stamps[msg.partition(), msg.offset()] = msg.timestamp()[1] / 1000.0

    def _run(self) -> None:
        n = 0
        start = time.time()
        while not self.stop.is_set():
            due = start + n / RATE
            if (wait := due - time.time()) > 0:
                self.stop.wait(wait)
            stamp = time.time()
            self.producer.produce(self.topic, value=b"x" * 100, partition=n % PARTITIONS, timestamp=int(stamp * 1000),
                                  on_delivery=self._acked)
            self.producer.poll(0)
            n += 1
        self.producer.flush(10)

    def written_at(self, offsets: dict[int, int]) -> float | None:
        """When the oldest of the records at these (partition: offset) was written; None until all are acked."""
        stamps = [self.stamps.get((p, o)) for p, o in offsets.items()]
        return None if None in stamps else min(stamps)


def commit_at_the_end(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """Commit the group's offsets at each partition's log end now (the next records to be written); returns them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False)
        return ends
    finally:
        consumer.close()


def scrape(address: str, topic: str, name: str = "kdiag_consumer_lag_seconds") -> tuple[dict[str, float], float]:
    """kdiag_consumer_lag_seconds (or another per group and topic series) per group on the topic, from /metrics, and
    when the admin collector last ran (the time its values hold at)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
        text = r.read().decode()
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    fetched = [s.value for s in samples if s.name == "kdiag_collector_last_success_timestamp_seconds"
               and s.labels["collector"] == "kafka_admin"]
    return ({s.labels["group"]: s.value for s in samples if s.name == name and s.labels.get("topic") == topic},
            fetched[0] if fetched else math.nan)


def kdiag_config(tmp_path: Path, tag: str) -> Path:
    """A kdiag config for the lab: 2 s cycles and admin fetches, no probe, per-topic series for lagsec-*-<tag> groups."""
    config = tmp_path / "kdiag.yml"
    config.write_text(yaml.safe_dump({
        "interval": "2s", "state_dir": "", "probe": {"enabled": False},
        "kafka": {"interval": "2s", "timeout": "20s", "cluster_scope": "always",
                  "coordination_topic": f"__kdiag_coordination_{tag}", "coordination_group": f"kdiag-{tag}",
                  "group_series": {"allow": [f"lagsec-.*-{tag}"]}}}))
    return config


def lag_seconds(address: str, topic: str) -> dict[str, float]:
    """kdiag_consumer_lag_seconds per group on the topic."""
    return scrape(address, topic)[0]


def test_lag_seconds_match_the_known_lag(kafka_lab: dict, tmp_path: Path) -> None:
    bootstrap = kafka_lab["bootstrap"]
    tag = uuid.uuid4().hex[:8]
    topic, early, late = f"lagsec-{tag}", f"lagsec-early-{tag}", f"lagsec-late-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    producer = KnownProducer(bootstrap, topic)
    stack = Stack(tmp_path)
    try:
        producer.thread.start()
        wait_until(lambda: len(producer.stamps) >= 2 * RATE, 60, "two seconds of records acked")
        # Committed before kdiag starts: its history never holds that end, the record's timestamp answers.
        early_offsets = commit_at_the_end(bootstrap, early, topic)
        address = stack.kdiag_live("--bootstrap-servers", bootstrap, "--config", str(kdiag_config(tmp_path, tag)))
        # A loaded CI box and a shared lab with many topics stretch the admin fetches (up to 6 x kafka.interval).
        wait_until(lambda: early in lag_seconds(address, topic), 360, f"lag seconds of {early}", stack.logs)
        # Committed once kdiag's history of the topic's end has begun (the early group's value needed two fetches).
        late_offsets = commit_at_the_end(bootstrap, late, topic)
        late_at = wait_until(lambda: producer.written_at(late_offsets), 30, "the records at the late commit acked")
        early_at = producer.written_at(early_offsets)
        assert early_at is not None
        wait_until(lambda: time.time() - late_at >= TRUE_LAG and late in lag_seconds(address, topic), 360,
                   f"{TRUE_LAG:g} s of lag for {late}", stack.logs)
        # Values hold at the admin fetch, seconds before the scrape (kafka.interval, stretched while fetches are slow).
        served, fetched = scrape(address, topic)
        for group, written in ((late, late_at), (early, early_at)):
            true_lag = fetched - written
            assert abs(served[group] - true_lag) <= TOLERANCE * true_lag, (group, served[group], true_lag)
        # Nobody reads for either group while the topic is written: they never catch up.
        assert scrape(address, topic, "kdiag_consumer_catch_up_seconds")[0] == {early: math.inf, late: math.inf}
    finally:
        producer.stop.set()
        producer.thread.join(15)
        stack.close()
        admin.delete_topics([topic])[topic].result(30)
        for group in (early, late):
            with contextlib.suppress(KafkaException):  # a group the test did not get to commit does not exist
                admin.delete_consumer_groups([group])[group].result(30)


def test_records_stamped_1970_give_no_lag_of_decades(kafka_lab: dict, tmp_path: Path) -> None:
    """A producer that sets CreateTime=1 (issue 30: 57 years of lag): the record time is not taken, the end offsets'
    history answers once it reaches back to the group's offset."""
    bootstrap = kafka_lab["bootstrap"]
    tag = uuid.uuid4().hex[:8]
    topic, early, late = f"lagsec-1970-{tag}", f"lagsec-early-{tag}", f"lagsec-late-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Kept forever: a segment whose newest record is from 1970 would otherwise be deleted on the next retention check.
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"retention.ms": "-1"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stop = threading.Event()

    def produce_from_1970() -> None:
        while not stop.wait(0.05):
            producer.produce(topic, value=b"x" * 100, timestamp=1)
            producer.poll(0)
        producer.flush(10)

    stack = Stack(tmp_path)
    writer = threading.Thread(target=produce_from_1970, daemon=True)
    started = time.time()
    try:
        for _ in range(100):
            producer.produce(topic, value=b"x" * 100, timestamp=1)
        assert producer.flush(30) == 0
        # Behind before kdiag starts: only a record time could say how far, and it says 1970.
        committer = Consumer({"bootstrap.servers": bootstrap, "group.id": early, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
        committer.close()
        writer.start()
        address = stack.kdiag_live("--bootstrap-servers", bootstrap, "--config", str(kdiag_config(tmp_path, tag)))
        wait_until(lambda: early in scrape(address, topic, "kdiag_kafka_consumergroup_lag")[0], 240,
                   f"the lag of {early}", stack.logs)
        commit_at_the_end(bootstrap, late, topic, partitions=1)
        # The late group's value needs two fetches after its commit; by then the early group's record was read.
        wait_until(lambda: late in lag_seconds(address, topic), 240, f"lag seconds of {late}", stack.logs)
        served = lag_seconds(address, topic)
        elapsed = time.time() - started
        assert served[late] <= elapsed, served
        assert served.get(early, 0.0) <= elapsed, served  # absent until kdiag's history reaches back to offset 50
    finally:
        stop.set()
        if writer.is_alive():
            writer.join(15)
        stack.close()
        admin.delete_topics([topic])[topic].result(30)
        for group in (early, late):
            with contextlib.suppress(KafkaException):
                admin.delete_consumer_groups([group])[group].result(30)
