"""Log end offsets of every partition of the lab's cluster: kdiag's batched ListOffsets (kafka/end_offsets.py, through
kafka-python's client) against librdkafka's offsets_for_times (500 partitions of one leader a call), alternating in one
process; wall time and CPU of each round, and the ratio of the medians.

    KDIAG_LAB_DIR=/tmp/lab-scale PYTHONPATH=.. python end_offsets.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kdiag.kafka import admin as kafka_admin
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.group_offsets import BatchedReads
from kdiag.tools.lab.lab import read_lab


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    lab = read_lab()
    if not lab:
        print("no lab: start one with `KDIAG_LAB_DIR=... kdiag lab up`", file=sys.stderr)
        return 2
    bootstrap = lab["bootstrap"]
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
    topics = {t: {"partitions": [{"partition": p.id, "leader": p.leader} for p in d.partitions.values()]}
              for t, d in metadata.topics.items()}
    print(f"{sum(len(d['partitions']) for d in topics.values())} partitions on {len(metadata.brokers)} brokers")
    batch = BatchedReads(ClientSettings(), bootstrap, 30.0)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kdiag-offsets", "enable.auto.commit": False})
    cpu: dict[str, list[float]] = {"kafka-python": [], "librdkafka": []}
    try:
        for round_ in range(args.rounds + 1):  # the first round opens the connections: not counted
            for name, used in (("kafka-python", batch), ("librdkafka", None)):
                wall, began = time.monotonic(), time.process_time()
                got = kafka_admin._log_end_offsets(consumer, topics, time.monotonic() + 60, used)
                spent = time.process_time() - began
                print(f"round {round_} {name}: {len(got)} offsets, {time.monotonic() - wall:.2f} s wall, "
                      f"{spent:.2f} s CPU", flush=True)
                if round_:
                    cpu[name].append(spent)
    finally:
        batch.close()
        consumer.close()
    ours, theirs = statistics.median(cpu["kafka-python"]), statistics.median(cpu["librdkafka"])
    print(f"CPU median: kafka-python {ours:.2f} s, librdkafka {theirs:.2f} s, ratio {ours / theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
