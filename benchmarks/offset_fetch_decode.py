"""kdiag's OffsetFetch v8 reader against kafka-python's decoder on the same answer: CPU per answer and the ratio.

The answer is what a coordinator sends for one of kdiag's batched requests at the 100,000-partition benchmark's shape
(kafka/group_offsets.py BATCH_GROUPS groups, each committed on one topic of 100 partitions), encoded by kafka-python.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time

from kafka.protocol.consumer.group import OffsetFetchResponse

from kdiag.kafka.group_offsets import BATCH_GROUPS
from kdiag.kafka.offset_fetch_answer import decode_groups

RESPONSE = OffsetFetchResponse[8]
GROUP = RESPONSE.OffsetFetchResponseGroup
TOPIC = GROUP.OffsetFetchResponseTopics
PARTITION = TOPIC.OffsetFetchResponsePartitions


def answer(groups: int, partitions: int) -> bytes:
    """An answer of `groups` groups, each committed on every partition of one topic."""
    return bytes(RESPONSE(throttle_time_ms=0, groups=[GROUP(group_id=f"scale-g{g}", error_code=0, topics=[
        TOPIC(name=f"scale-t{g % 1000}", partitions=[
            PARTITION(partition_index=p, committed_offset=1_000_000 + p, committed_leader_epoch=-1, metadata="",
                      error_code=0) for p in range(partitions)])]) for g in range(groups)]).encode())


def cpu_per_call(decode: object, data: bytes, rounds: int) -> list[float]:
    """CPU seconds of each of `rounds` calls."""
    times = []
    for _ in range(rounds):
        began = time.process_time()
        decode(data)  # type: ignore[operator]
        times.append(time.process_time() - began)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=BATCH_GROUPS)
    p.add_argument("--partitions", type=int, default=100, help="committed partitions per group (default 100)")
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args(argv)
    data = answer(args.groups, args.partitions)
    theirs: list[float] = []
    ours: list[float] = []
    # Three turns each, alternating in one process, so a busy host weighs on both alike.
    for _ in range(3):
        theirs += cpu_per_call(lambda d: RESPONSE.decode(io.BytesIO(d)), data, args.rounds)
        ours += cpu_per_call(decode_groups, data, args.rounds)
    read = sum(len(g.read) for g in decode_groups(data))
    assert read == args.groups * args.partitions, f"the reader read {read} committed partitions"
    committed = args.groups * args.partitions
    print(f"{args.groups} groups x {args.partitions} partitions ({len(data):,} bytes), {len(ours)} rounds each")
    print("| decoder | CPU p50 per answer | per partition |")
    print("| --- | ---: | ---: |")
    for name, times in (("kafka-python (OffsetFetchResponse[8].decode)", theirs), ("kdiag (decode_groups)", ours)):
        p50 = statistics.median(times)
        print(f"| {name} | {p50 * 1000:.1f} ms | {p50 / committed * 1e6:.2f} us |")
    print(f"kdiag takes {statistics.median(ours) / statistics.median(theirs):.2f} of kafka-python's CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
