"""The synthetic probe's families."""

from __future__ import annotations

from kdiag.families.family import counter, gauge, histogram, keyed

# probe
PROBE_REPLICA_LATENCY_SECONDS = histogram(
    "kdiag_probe_replica_latency_seconds", "Probe produce-to-ack latency on the replica pairs topic (2 replicas: "
    "broker_id follows, leader_id leads), at the probe's acks; a failed send counts the time it took.",
    "broker_id", "leader_id")
PROBE_REPLICA_FAILED_TOTAL = counter(
    "kdiag_probe_replica_failed_total", "Probe sends to the replica pairs topic whose delivery failed or timed out.",
    "broker_id", "leader_id")
PROBE_AVAILABILITY_RATIO = gauge(
    "kdiag_probe_availability_ratio",
    "Acked / sent probe messages over the availability window; a replica broker that leads no probe partition "
    "counts as unavailable.",
    "broker_id",
)
PROBE_END_TO_END_LATENCY_SECONDS = histogram(
    "kdiag_probe_end_to_end_latency_seconds", "Probe produce-to-consume latency, by leader at send time.", "broker_id"
)
PROBE_MESSAGES_ACKED_TOTAL = counter("kdiag_probe_messages_acked_total", "Probe messages acknowledged by the broker.", "broker_id")
PROBE_MESSAGES_DUPLICATED_TOTAL = counter(
    "kdiag_probe_messages_duplicated_total", "Probe messages consumed again at another offset.", "broker_id"
)
PROBE_MESSAGES_FAILED_TOTAL = counter(
    "kdiag_probe_messages_failed_total", "Probe messages whose delivery failed or timed out (never acked, so not lost).", "broker_id"
)
PROBE_MESSAGES_LATE_TOTAL = counter(
    "kdiag_probe_messages_late_total", "Probe messages consumed more than the SLA after they were sent (late, not lost).", "broker_id"
)
PROBE_MESSAGES_LOST_TOTAL = counter(
    "kdiag_probe_messages_lost_total",
    "Probe messages acked at an offset the consumer then read without them there (the log lost them; acks=0: "
    "not consumed within the SLA).",
    "broker_id",
)
PROBE_MESSAGES_OUT_OF_ORDER_TOTAL = counter(
    "kdiag_probe_messages_out_of_order_total", "Probe messages consumed after a later sequence of the same partition.", "broker_id"
)
PROBE_MESSAGES_RECEIVED_TOTAL = counter(
    "kdiag_probe_messages_received_total", "Probe messages consumed for the first time.", "broker_id"
)
PROBE_MESSAGES_SENT_TOTAL = counter("kdiag_probe_messages_sent_total", "Probe messages sent, by leader at send time.", "broker_id")
PROBE_PARTITIONS = gauge("kdiag_probe_partitions", "Probe topic partitions the broker leads.", "broker_id")
PROBE_PENDING_MESSAGES = gauge(
    "kdiag_probe_pending_messages",
    "Acked probe messages not consumed yet and not known lost (a partition the consumer cannot read keeps them "
    "here, not in lost).",
)
PROBE_PRODUCE_LATENCY_SECONDS = histogram(
    "kdiag_probe_produce_latency_seconds", "Probe produce-to-ack latency, by leader at send time.", "broker_id"
)
PROBE_SLO_SECONDS = gauge("kdiag_probe_slo_seconds", "Configured probe latency objective: p99 above it is high.")
PROBE_UP = gauge("kdiag_probe_up", "1 when the probe's producer and consumer run and its topic exists.")
MESSAGES = keyed(
    "kdiag_probe_messages_", "_total", PROBE_MESSAGES_SENT_TOTAL, PROBE_MESSAGES_ACKED_TOTAL, PROBE_MESSAGES_FAILED_TOTAL,
    PROBE_MESSAGES_RECEIVED_TOTAL, PROBE_MESSAGES_LATE_TOTAL, PROBE_MESSAGES_LOST_TOTAL, PROBE_MESSAGES_DUPLICATED_TOTAL,
    PROBE_MESSAGES_OUT_OF_ORDER_TOTAL,
)
# Every series the probe makes (kdiag's own: no collector reads a source for them, a drill's recording keeps them).
FAMILIES = (
    PROBE_PRODUCE_LATENCY_SECONDS, PROBE_END_TO_END_LATENCY_SECONDS, PROBE_MESSAGES_SENT_TOTAL,
    PROBE_MESSAGES_ACKED_TOTAL, PROBE_MESSAGES_FAILED_TOTAL, PROBE_MESSAGES_RECEIVED_TOTAL,
    PROBE_MESSAGES_LATE_TOTAL, PROBE_MESSAGES_LOST_TOTAL, PROBE_MESSAGES_DUPLICATED_TOTAL,
    PROBE_MESSAGES_OUT_OF_ORDER_TOTAL, PROBE_AVAILABILITY_RATIO, PROBE_PARTITIONS, PROBE_PENDING_MESSAGES, PROBE_UP,
    PROBE_SLO_SECONDS, PROBE_REPLICA_LATENCY_SECONDS, PROBE_REPLICA_FAILED_TOTAL,
)
