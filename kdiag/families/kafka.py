"""Kafka families: the admin state (brokers, topics, partitions, groups, lag) and the brokers' JMX metrics."""

from __future__ import annotations

from kdiag.families.family import counter, gauge

# kafka_admin
CONSUMER_CATCH_UP_SECONDS = gauge(
    "kdiag_consumer_catch_up_seconds",
    "Seconds until the group's lag is gone at its consume and write rates of the last 120 s; +Inf (never) while"
    " it reads slower than the topic is written (per topic as kdiag_consumer_lag_seconds).",
    "group",
    optional=("topic",),
)
CONSUMER_LAG_SECONDS = gauge(
    "kdiag_consumer_lag_seconds",
    "How long ago the topic's log end was where the group's committed offset is now (per topic for "
    "kafka.group_series groups, the largest over its topics for the others).",
    "group",
    optional=("topic",),
)
CONSUMER_PARTITION_LAG_SECONDS = gauge(
    "kdiag_consumer_partition_lag_seconds",
    "How long ago the partition's log end was where the group's committed offset is now, for the kafka.top_partitions "
    "partitions lagging most in messages (0 when caught up; absent until kdiag has seen the log end pass that offset, "
    "or, with kafka.committed_offsets: offsets_topic, the group commit at the log end).",
    "group", "topic", "partition"
)
CONSUMER_LAST_COMMIT_AGE_SECONDS = gauge(
    "kdiag_consumer_last_commit_age_seconds", "Seconds since the group's newest committed offset was committed (only "
    "with kafka.committed_offsets: offsets_topic, which reads the commit times).", "group")
KAFKA_BROKER_CONFIG = gauge(
    "kdiag_kafka_broker_config", "Numeric broker config value (booleans as 0/1; Long.MAX_VALUE means not set).", "broker_id", "name"
)
KAFKA_BROKER_CONFIG_SOURCE_INFO = gauge(
    "kdiag_kafka_broker_config_source_info",
    "Where a broker config that is not at its default is set (describe_configs source: "
    "DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG, STATIC_BROKER_CONFIG).",
    "broker_id",
    "name",
    "source",
)
KAFKA_BROKER_EXPECTED = gauge(
    "kdiag_kafka_broker_expected", "A broker kafka.expected_brokers says should be live (always 1).", "broker_id"
)
KAFKA_BROKER_INFO = gauge("kdiag_kafka_broker_info", "Broker address and rack (always 1).", "broker_id", "host", "port", "rack")
KAFKA_BROKER_LEADERS = gauge("kdiag_kafka_broker_leaders", "Partitions of non-internal topics led by the broker.", "broker_id")
KAFKA_BROKER_LOG_DIRS_INFO = gauge("kdiag_kafka_broker_log_dirs_info", "Broker log.dirs setting (always 1).", "broker_id", "log_dirs")
KAFKA_BROKER_REPLICAS = gauge("kdiag_kafka_broker_replicas", "Replicas of non-internal topics hosted by the broker.", "broker_id")
KAFKA_BROKERS = gauge("kdiag_kafka_brokers", "Number of brokers in the cluster.")
KAFKA_CLUSTER_INFO = gauge("kdiag_kafka_cluster_info", "Kafka cluster id seen by the AdminClient (always 1).", "cluster_id")
KAFKA_CONSUMERGROUP_IDLE_MEMBERS = gauge(
    "kdiag_kafka_consumergroup_idle_members", "Members of the consumer group with no partition assigned.", "group"
)
KAFKA_CONSUMERGROUP_LAG = gauge(
    "kdiag_kafka_consumergroup_lag",
    "Sum over partitions of log end offset minus committed offset (per topic for kafka.group_series groups, "
    "without a topic label for the others).",
    "group",
    optional=("topic",),
)
KAFKA_CONSUMERGROUP_LAG_MAX = gauge(
    "kdiag_kafka_consumergroup_lag_max", "Largest partition lag of the consumer group (on the topic, for kafka.group_series "
    "groups).", "group", optional=("topic",)
)
KAFKA_CONSUMERGROUP_MEMBERS = gauge("kdiag_kafka_consumergroup_members", "Members of the consumer group.", "group")
KAFKA_CONSUMERGROUP_STABLE = gauge(
    "kdiag_kafka_consumergroup_stable", "1 while the consumer group is Stable, 0 while it rebalances or is empty or dead.", "group"
)
KAFKA_CONTROLLER_ID = gauge("kdiag_kafka_controller_id", "Node id of the active controller.")
KAFKA_PARTITION_LEADER = gauge(
    "kdiag_kafka_partition_leader",
    "Leader broker id of the partition, -1 when offline (kafka.partition_series topics, while few).",
    "partition",
    "topic",
)
KAFKA_PARTITION_LOG_END_OFFSET_TOTAL = counter(
    "kdiag_kafka_partition_log_end_offset_total",
    "Log end offset of the partition (kafka.partition_series topics, while few).",
    "partition",
    "topic",
)
KAFKA_TOPIC_BROKER_MESSAGES_PER_SECOND = gauge(
    "kdiag_kafka_topic_broker_messages_per_second",
    "Messages per second appended to the topic's partitions the broker leads, between the last two admin fetches "
    "(from every partition's log end offset, whatever kafka.partition_series says; only topics written meanwhile).",
    "broker_id", "topic"
)
KAFKA_TOPIC_PARTITION_TOP_SHARE = gauge(
    "kdiag_kafka_topic_partition_top_share",
    "Share (0-1) of the messages appended to the topic between the last two admin fetches that went to its busiest "
    "partition (only topics written meanwhile).",
    "topic"
)
KAFKA_TOPIC_BROKER_LEADERS = gauge(
    "kdiag_kafka_topic_broker_leaders", "Partitions of the topic led by the broker.", "broker_id", "topic"
)
KAFKA_TOPIC_BROKER_PREFERRED_LEADERS = gauge(
    "kdiag_kafka_topic_broker_preferred_leaders", "Partitions of the topic whose first replica is the broker.", "broker_id", "topic"
)
KAFKA_TOPIC_CONFIG = gauge(
    "kdiag_kafka_topic_config", "Numeric topic config value (booleans as 0/1; Long.MAX_VALUE means not set).", "name", "topic"
)
KAFKA_TOPIC_CONFIG_OVERRIDE = gauge(
    "kdiag_kafka_topic_config_override",
    "1 for each config the topic sets itself (kafka-configs --entity-type topics), not inherited from the brokers.",
    "name",
    "topic",
)
KAFKA_TOPIC_LOG_END_OFFSET_TOTAL = counter(
    "kdiag_kafka_topic_log_end_offset_total", "Sum of the log end offsets of the topic's partitions.", "topic"
)
KAFKA_TOPIC_OFFLINE_PARTITIONS = gauge("kdiag_kafka_topic_offline_partitions", "Partitions without a leader.", "topic")
KAFKA_OFFSETS_TOPIC_READ = gauge(
    "kdiag_kafka_offsets_topic_read_ratio",
    "Share of __consumer_offsets (up to its end when kdiag began reading it) read so far, with kafka.committed_offsets: "
    "offsets_topic; 1 once caught up. Below 1, committed offsets come from OffsetFetch for a few groups only.")
KAFKA_TOPIC_KDIAG_OWN = gauge(
    "kdiag_kafka_topic_kdiag_own",
    "A topic kdiag creates and configures itself (its probe's, its coordination's; always 1): no topic rule judges it.",
    "topic",
)
KAFKA_TOPIC_PARTITIONS = gauge("kdiag_kafka_topic_partitions", "Partitions of the topic.", "topic")
KAFKA_TOPIC_REPLICATION_FACTOR = gauge(
    "kdiag_kafka_topic_replication_factor", "Replication factor of the topic (largest replica list).", "topic"
)
KAFKA_TOPIC_UNDER_MIN_ISR_PARTITIONS = gauge(
    "kdiag_kafka_topic_under_min_isr_partitions", "Partitions whose ISR is smaller than min.insync.replicas.", "topic"
)
KAFKA_TOPIC_UNDER_REPLICATED_PARTITIONS = gauge(
    "kdiag_kafka_topic_under_replicated_partitions", "Partitions whose ISR is smaller than their replica list.", "topic"
)

# kafka_jmx
JVM_GC_COLLECTION_SECONDS_TOTAL = counter(
    "kdiag_jvm_gc_collection_seconds_total", "Time spent in garbage collection by the broker JVM per collector.", "broker_id", "gc"
)
JVM_GC_COLLECTIONS_TOTAL = counter(
    "kdiag_jvm_gc_collections_total", "Garbage collections of the broker JVM per collector.", "broker_id", "gc"
)
KAFKA_ACTIVE_CONTROLLER = gauge("kdiag_kafka_active_controller", "1 when this node is the active KRaft controller.", "broker_id")
KAFKA_BYTES_IN_TOTAL = counter("kdiag_kafka_bytes_in_total", "Bytes produced to this broker by clients, all topics.", "broker_id")
KAFKA_BYTES_OUT_TOTAL = counter("kdiag_kafka_bytes_out_total", "Bytes fetched from this broker by clients, all topics.", "broker_id")
KAFKA_FETCH_REQUESTS_TOTAL = counter("kdiag_kafka_fetch_requests_total", "Fetch requests received, all topics.", "broker_id")
KAFKA_ISR_EXPANDS_TOTAL = counter("kdiag_kafka_isr_expands_total", "ISR expansions on this broker since start.", "broker_id")
KAFKA_ISR_SHRINKS_TOTAL = counter("kdiag_kafka_isr_shrinks_total", "ISR shrinks on this broker since start.", "broker_id")
KAFKA_JMX_UP = gauge("kdiag_kafka_jmx_up", "1 when the broker's JMX endpoint answered this cycle, else 0.", "endpoint")
KAFKA_LEADERS = gauge("kdiag_kafka_leaders", "Partitions led by this broker.", "broker_id")
KAFKA_LOG_FLUSH_SECONDS = gauge(
    "kdiag_kafka_log_flush_seconds",
    "Log flush time in seconds: mean and 0.99 quantile of the broker's histogram.",
    "broker_id",
    "quantile",
)
KAFKA_LOG_FLUSHES_TOTAL = counter("kdiag_kafka_log_flushes_total", "Log flushes to disk since broker start.", "broker_id")
KAFKA_MESSAGES_IN_TOTAL = counter("kdiag_kafka_messages_in_total", "Messages produced to this broker, all topics.", "broker_id")
KAFKA_NETWORK_PROCESSOR_IDLE_RATIO = gauge(
    "kdiag_kafka_network_processor_idle_ratio", "Network processor threads' average idle fraction (0-1).", "broker_id"
)
KAFKA_OFFLINE_PARTITIONS = gauge(
    "kdiag_kafka_offline_partitions", "Partitions without a leader, as seen by this node's controller.", "broker_id"
)
KAFKA_PARTITIONS = gauge("kdiag_kafka_partitions", "Partition replicas hosted by this broker.", "broker_id")
KAFKA_PRODUCE_REQUESTS_TOTAL = counter("kdiag_kafka_produce_requests_total", "Produce requests received, all topics.", "broker_id")
KAFKA_REQUEST_BYTES = gauge(
    "kdiag_kafka_request_bytes", "Request size in bytes (mean and 0.99 of the broker's histogram).", "broker_id", "quantile", "request"
)
KAFKA_REQUEST_HANDLER_IDLE_RATIO = gauge(
    "kdiag_kafka_request_handler_idle_ratio", "Request handler threads' idle fraction, one-minute rate (0-1).", "broker_id"
)
KAFKA_REPLICA_FETCH_MAX_LAG = gauge(
    "kdiag_kafka_replica_fetch_max_lag", "Messages the furthest-behind partition this broker follows lags its leader by "
    "(ReplicaFetcherManager MaxLag).", "broker_id")
KAFKA_PRODUCE_PURGATORY_SIZE = gauge(
    "kdiag_kafka_produce_purgatory_size", "Produce requests waiting in this broker's purgatory for followers to "
    "replicate them (acks=all).", "broker_id")
KAFKA_REQUEST_QUEUE_SIZE = gauge(
    "kdiag_kafka_request_queue_size", "Requests waiting in the request channel for a handler thread.", "broker_id"
)
KAFKA_REQUEST_TIME_SECONDS = gauge(
    "kdiag_kafka_request_time_seconds",
    "Request time per phase in seconds (mean, 0.5, 0.99 of the broker's histogram).",
    "broker_id",
    "phase",
    "quantile",
    "request",
)
KAFKA_REQUESTS_TOTAL = counter(
    "kdiag_kafka_requests_total", "Requests of this type received, summed over request versions.", "broker_id", "request"
)
KAFKA_UNDER_MIN_ISR_PARTITIONS = gauge(
    "kdiag_kafka_under_min_isr_partitions", "Partitions led by this broker whose ISR is below min.insync.replicas.", "broker_id"
)
KAFKA_UNDER_REPLICATED_PARTITIONS = gauge(
    "kdiag_kafka_under_replicated_partitions", "Partitions led by this broker whose ISR is smaller than the replica set.", "broker_id"
)
