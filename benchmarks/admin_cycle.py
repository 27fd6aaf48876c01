"""Time the AdminClient collector's cycle on the lab as it is, then with 1,000 more partitions, and print the ratio."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.collectors.kafka.admin_samples import samples_from_admin_state
from kdiag.tools.lab.lab import read_lab


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def time_cycles(collector: KafkaAdminCollector, cycles: int) -> tuple[list[float], list[float], dict]:
    """Seconds per fetch and per samples_from_admin_state over `cycles` cycles, and the last state."""
    fetches, derives, state = [], [], {}
    for _ in range(cycles):
        start = time.perf_counter()
        state = collector.fetch()
        fetched = time.perf_counter()
        samples_from_admin_state(state, collector.max_partition_series)
        derives.append(time.perf_counter() - fetched)
        fetches.append(fetched - start)
    return fetches, derives, state


def report(label: str, fetches: list[float], derives: list[float], state: dict) -> None:
    """One line: partitions, groups, state size and p50/p99 of fetch and of sample derivation."""
    partitions = sum(len(t["partitions"]) for t in state["topics"].values())
    size = len(json.dumps(state))
    print(
        f"{label:<9} partitions={partitions:<5} groups={len(state['consumer_groups']):<3} state={size / 1024:.0f}KiB  "
        f"fetch p50={percentile(fetches, 50) * 1e3:.1f}ms p99={percentile(fetches, 99) * 1e3:.1f}ms  "
        f"samples p50={percentile(derives, 50) * 1e3:.2f}ms p99={percentile(derives, 99) * 1e3:.2f}ms"
    )


def create_big_topic(bootstrap: str, topic: str, partitions: int, group: str) -> None:
    """An RF 1 topic of `partitions` partitions, and a group with a commit on every one (so lag is computed)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=60)
    end = time.monotonic() + 60
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        if time.monotonic() > end:
            raise TimeoutError(f"{topic} did not show {partitions} partitions")
        time.sleep(0.5)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
    finally:
        consumer.close()


def cleanup(bootstrap: str, topic: str, group: str) -> None:
    """Delete the benchmark topic and group."""
    # The client must outlive the future: a collected AdminClient fails its pending requests with _DESTROY.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=60)
    admin.delete_consumer_groups([group])[group].result(timeout=60)


def main(argv: list[str] | None = None) -> int:
    """Time N admin cycles before and after adding an admintest-big-* topic; print p50/p99 and the ratio."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bootstrap-servers", help="default: the running `kdiag lab`")
    p.add_argument("--partitions", type=int, default=1000, help="partitions of the added topic (default 1000)")
    p.add_argument("--cycles", type=int, default=10, help="cycles to time (default 10)")
    args = p.parse_args(argv)
    lab = read_lab()
    bootstrap = args.bootstrap_servers or (lab and lab["bootstrap"])
    if not bootstrap:
        print("no Kafka: start `kdiag lab up --brokers 3` or pass --bootstrap-servers", file=sys.stderr)
        return 2
    # The partition cap is raised so per-partition series are derived too: the worst case of one cycle.
    collector = KafkaAdminCollector(bootstrap, max_partition_series=10**6)
    collector.fetch()  # connect and warm up the metadata cache outside the timing
    base = time_cycles(collector, args.cycles)
    suffix = uuid.uuid4().hex[:6]
    topic, group = f"admintest-big-{suffix}", f"admintest-big-{suffix}"
    create_big_topic(bootstrap, topic, args.partitions, group)
    try:
        collector.fetch()
        big = time_cycles(collector, args.cycles)
    finally:
        cleanup(bootstrap, topic, group)
    print(f"bootstrap {bootstrap}, {args.cycles} cycles each, confluent-kafka AdminClient reused")
    report("baseline", *base)
    report(f"+{args.partitions}", *big)
    print(f"ratio fetch p50 with/without: {percentile(big[0], 50) / percentile(base[0], 50):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
