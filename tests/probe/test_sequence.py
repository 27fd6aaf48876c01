"""The probe's pure bookkeeping: lost only when the log no longer holds an acked message, late is not lost."""

from __future__ import annotations

from kdiag.probe.sequence import DUPLICATE, OUT_OF_ORDER, RECEIVED, REREAD, SequenceTracker


def test_in_order_messages_are_received_and_nothing_stays_pending():
    t = SequenceTracker(sla=10)
    for seq in range(5):
        assert t.acked(0, seq, offset=100 + seq, now=seq) == []
        assert t.consumed(0, 100 + seq, seq) == (RECEIVED, [])
    assert t.pending() == 0
    assert t.expire(now=1000) == []


def test_slow_message_is_never_lost_however_late():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=7, now=0, tag=2)
    assert t.expire(now=10_000) == []  # a partition without a leader for hours: still only pending
    assert t.pending() == 1
    assert t.consumed(0, 7, 0) == (RECEIVED, [])
    assert t.pending() == 0


def test_truncated_message_is_lost_when_the_consumer_reads_another_at_its_offset():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=10, now=0, tag="old-leader")
    t.acked(0, 1, offset=11, now=0, tag="old-leader")
    t.acked(0, 2, offset=12, now=0, tag="old-leader")
    assert t.consumed(0, 10, 0) == (RECEIVED, [])
    # the new leader's log ends at 11: sequences 1 and 2 are gone; the next sends land at 11 and 12
    t.acked(0, 3, offset=11, now=1, tag="new-leader")
    assert t.consumed(0, 11, 3) == (RECEIVED, ["old-leader"])
    assert t.pending() == 1
    assert t.consumed(0, 12, None) == (None, ["old-leader"])  # another writer's message at 12
    assert t.pending() == 0


def test_ack_arriving_after_the_consumer_passed_its_offset_is_lost_at_once():
    t = SequenceTracker(sla=10)
    t.consumed(0, 20, None)
    assert t.acked(0, 0, offset=19, now=0, tag=1) == [1]
    assert t.acked(0, 1, offset=21, now=0, tag=1) == []


def test_seek_back_after_truncation_does_not_condemn_acks_the_consumer_will_reach_again():
    t = SequenceTracker(sla=10)
    t.consumed(0, 100, None)
    t.consumed(0, 90, None)  # librdkafka found the log truncated and sought back to 90
    assert t.acked(0, 5, offset=95, now=0) == []
    assert t.consumed(0, 95, 5) == (RECEIVED, [])


def test_message_read_before_its_ack_is_not_awaited():
    t = SequenceTracker(sla=10)
    assert t.consumed(0, 3, 0) == (RECEIVED, [])
    assert t.acked(0, 0, offset=3, now=0) == []
    assert t.pending() == 0


def test_reread_of_the_same_offset_is_not_a_duplicate_but_another_offset_is():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=5, now=0)
    assert t.consumed(0, 4, 0) == (RECEIVED, [])  # a first attempt the broker wrote before the retry was acked
    assert t.consumed(0, 5, 0) == (DUPLICATE, [])
    assert t.consumed(0, 4, 0) == (REREAD, [])  # an offset reset to the log start reads it again


def test_out_of_order_and_failed_sends():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=0, now=0)
    t.failed(0, 1)
    t.acked(0, 2, offset=2, now=0)
    assert t.consumed(0, 0, 0) == (RECEIVED, [])
    assert t.consumed(0, 1, 2) == (RECEIVED, [])  # offsets as written: 2 was retried before 1
    assert t.consumed(0, 2, 1) == (OUT_OF_ORDER, [])  # the failed send was written anyway: welcome, not lost
    assert t.pending() == 0


def test_offset_less_acks_fall_back_to_the_sla():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=-1, now=0, tag=1)
    t.acked(0, 1, offset=-1, now=5, tag=1)
    assert t.consumed(0, 40, 1) == (RECEIVED, [])
    assert t.expire(now=9.9) == []
    assert t.expire(now=10) == [1]
    assert t.pending() == 0


def test_partitions_are_independent():
    t = SequenceTracker(sla=10)
    t.acked(0, 0, offset=0, now=0, tag=1)
    t.acked(1, 0, offset=0, now=0, tag=2)
    assert t.consumed(1, 0, 1) == (RECEIVED, [2])
    assert t.pending() == 1


def test_memory_stays_bounded_when_the_consumer_is_stuck_or_rereads():
    t = SequenceTracker(sla=10, memory=100)
    for seq in range(1000):
        t.acked(0, seq, offset=seq, now=seq)
    p = t.partitions[0]
    assert len(p.waiting) == 100 and len(p.by_offset) <= 200
    assert t.consumed(0, 999, 999) == (RECEIVED, [None] * 99)  # the remembered ones it read past
    for seq in range(1000, 2000):
        t.consumed(0, seq + 1, seq)
    assert len(p.received) == 100 and not p.by_offset
    assert t.consumed(0, 1001, 1000) == (REREAD, [])  # forgotten: re-read from the log start, not counted
