"""The faults of a broker's container (a `kdiag lab up --containers` lab): its memory limit squeezed under its page
cache while a consumer re-reads more than the cache can hold."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kdiag.tools.drill.faults import Target, in_background
from kdiag.tools.lab import containers, lab

MiB = 2**20


def anon_bytes(base: int, node: int) -> int:
    """The anonymous memory (heap, stacks) charged to a container node's cgroup now."""
    dirs = containers.cgroup_dirs(base, node)
    stat_file, key = (dirs["v2"] / "memory.stat", "anon") if "v2" in dirs else (dirs["memory"] / "memory.stat",
                                                                                 "total_rss")
    for line in stat_file.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise RuntimeError(f"{stat_file}: no {key} line")


def lab_base(target: Target) -> int:
    """The base port of the target's container lab; RuntimeError when it is not one."""
    info = lab.status(target.lab_dir)[0]
    if info is None or "containers" not in info:
        raise RuntimeError("the lab runs no containers: kdiag lab up --containers --brokers 3")
    return info["base_port"]


@contextmanager
def memory_limit(target: Target, node: int, room: int) -> Iterator[int]:
    """The node's memory limit lowered to its anonymous memory now plus `room` (page cache and heap growth), as a
    tight resources.limits.memory does; the lab's limit back at the end. Yields the limit set."""
    base = lab_base(target)
    before = containers.memory_limit(base, node)
    limit = anon_bytes(base, node) + room
    containers.set_memory_limit(base, node, limit)
    try:
        yield limit
    finally:
        containers.set_memory_limit(base, node, before)


def fill(bootstrap: str, name: str, size: int, record: int = 100_000) -> None:
    """Write `size` bytes of incompressible-enough records to the topic and wait until every one is acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1", "batch.size": 1_000_000})
    value = bytes(range(256)) * (record // 256)
    failed: list[str] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(str(error))

    for _ in range(size // len(value)):
        while True:
            try:
                producer.produce(name, value=value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"filling {name} failed: {failed[:1] or 'records left unsent'}")


@contextmanager
def rereader(bootstrap: str, name: str) -> Iterator[None]:
    """A consumer reading partition 0 of the topic from its start again each time it reaches the end."""
    def run(stop: threading.Event) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{name}-rereader", "log_level": 3,
                             "enable.partition.eof": True, "enable.auto.commit": False})
        start = TopicPartition(name, 0, 0)
        consumer.assign([start])
        try:
            while not stop.is_set():
                message = consumer.poll(0.5)
                error = message.error() if message is not None else None
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    consumer.seek(start)
        finally:
            consumer.close()
    with in_background(run):
        yield

