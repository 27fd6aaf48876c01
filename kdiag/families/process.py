"""Process families: brokers and top readers, their cgroups' limits, and `kdiag bench` load generators."""

from __future__ import annotations

from kdiag.families.family import counter, gauge

# processes
PROCESS_BROKER_REFUSED = gauge(
    "kdiag_process_broker_refused", "A kafka.Kafka process the trust rule does not take for a broker, and why, value 1.",
    "pid", "comm", "reason")
PROCESS_BROKER_STARTED_BY = gauge(
    "kdiag_process_broker_started_by", "Who started a broker (the trust rule's reason) and the service, container and "
    "Kubernetes pod its cgroup names, value 1.", "pid", "comm", "reason", "service", "container", "pod")
KAFKA_LOG_DIR_INFO = gauge(
    "kdiag_kafka_log_dir_info",
    "A Kafka log dir and the block device and mountpoint holding it, value 1.",
    "device",
    "mountpoint",
    "path",
)
PROCESS_CPU_SECONDS_TOTAL = counter("kdiag_process_cpu_seconds_total", "User and system CPU seconds of the process.", "comm", "pid")
PROCESS_GC_CPU_SECONDS_TOTAL = counter(
    "kdiag_process_gc_cpu_seconds_total", "CPU seconds of a load generator JVM's garbage collector threads.", "pid", "comm"
)
PROCESS_INFO = gauge(
    "kdiag_process_info",
    "Command line (secrets masked; see processes.cmdline: off leaves the label out) and cwd of the process, value 1.",
    "comm",
    "cwd",
    "pid",
    optional=("cmdline",),
)
PROCESS_IS_BROKER = gauge("kdiag_process_is_broker", "Whether the process is a Kafka broker (1) or not (0).", "comm", "pid")
PROCESS_IS_LOAD_GENERATOR = gauge(
    "kdiag_process_is_load_generator", "Whether the process runs a Kafka perf-test tool (1) or not (0).", "comm", "pid"
)
PROCESS_JVM_MAX_HEAP_BYTES = gauge(
    "kdiag_process_jvm_max_heap_bytes", "The JVM's heap ceiling (-Xmx) from its command line.", "comm", "pid"
)
PROCESS_MAX_FDS = gauge("kdiag_process_max_fds", "Soft limit on open file descriptors of the process.", "comm", "pid")
PROCESS_OPEN_FDS = gauge("kdiag_process_open_fds", "Open file descriptors of the process.", "comm", "pid")
PROCESS_RCHAR_BYTES_TOTAL = counter(
    "kdiag_process_rchar_bytes_total", "Bytes the process read through read syscalls, page cache hits included.", "comm", "pid"
)
PROCESS_READ_BYTES_TOTAL = counter(
    "kdiag_process_read_bytes_total", "Bytes the process caused to be read from storage.", "comm", "pid"
)
PROCESS_TOUCHES_LOG_DIR = gauge(
    "kdiag_process_touches_log_dir", "Whether the process's cwd, path arguments or open files touch a Kafka log dir.", "comm", "pid"
)
PROCESS_WRITTEN_BYTES_TOTAL = counter(
    "kdiag_process_written_bytes_total", "Bytes the process caused to be written to storage.", "comm", "pid"
)

# cgroup_cpu
PROCESS_CGROUP_CPU_PERIODS_TOTAL = counter(
    "kdiag_process_cgroup_cpu_periods_total",
    "Enforcement periods of that cgroup's CPU quota with runnable tasks.",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_CPU_QUOTA_CORES = gauge(
    "kdiag_process_cgroup_cpu_quota_cores",
    "CPU quota of a cgroup holding the process, in cores (quota / period).",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL = counter(
    "kdiag_process_cgroup_cpu_throttled_periods_total",
    "Periods in which that cgroup used up its quota and was stopped.",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL = counter(
    "kdiag_process_cgroup_cpu_throttled_seconds_total",
    "Seconds that cgroup's tasks were stopped for want of quota.",
    "pid",
    "comm",
    "cgroup",
)

# cgroup_memory
PROCESS_CGROUP_MEMORY_BYTES = gauge(
    "kdiag_process_cgroup_memory_bytes",
    "That cgroup's memory by type: anon (heap, stacks) or file (page cache).",
    "pid",
    "comm",
    "cgroup",
    "type",
)
PROCESS_CGROUP_MEMORY_LIMIT_BYTES = gauge(
    "kdiag_process_cgroup_memory_limit_bytes",
    "Memory limit of a cgroup holding the process (v2 memory.max, v1 memory.limit_in_bytes).",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL = counter(
    "kdiag_process_cgroup_memory_limit_hits_total",
    "Times that cgroup's use reached its limit and it reclaimed (memory.events max, v1 memory.failcnt).",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL = counter(
    "kdiag_process_cgroup_memory_oom_kills_total",
    "Processes the OOM killer killed in that cgroup (memory.events or v1 memory.oom_control oom_kill).",
    "pid",
    "comm",
    "cgroup",
)
PROCESS_CGROUP_MEMORY_USAGE_BYTES = gauge(
    "kdiag_process_cgroup_memory_usage_bytes",
    "Memory that cgroup uses now, page cache included (memory.current, v1 memory.usage_in_bytes).",
    "pid",
    "comm",
    "cgroup",
)

# loadgen
LOADGEN_BATCH_RECORDS = gauge("kdiag_loadgen_batch_records", "Average records per produced batch over the last stats interval.", "pid")
LOADGEN_BATCH_SIZE_BYTES = gauge(
    "kdiag_loadgen_batch_size_bytes", "Average bytes per produced batch over the last stats interval.", "pid"
)
LOADGEN_BATCH_SIZE_LIMIT_BYTES = gauge("kdiag_loadgen_batch_size_limit_bytes", "The producer's batch.size.", "pid")
LOADGEN_BROKER_INTERNAL_LATENCY_SECONDS = gauge(
    "kdiag_loadgen_broker_internal_latency_seconds",
    "Time records waited in the producer before being sent (mean, 0.99).",
    "pid",
    "broker_id",
    "quantile",
)
LOADGEN_BROKER_PRODUCE_REQUESTS_TOTAL = counter(
    "kdiag_loadgen_broker_produce_requests_total", "Produce requests the producer sent to the broker.", "pid", "broker_id"
)
LOADGEN_BROKER_REQUEST_BYTES_TOTAL = counter(
    "kdiag_loadgen_broker_request_bytes_total", "Bytes of requests the producer sent to the broker.", "pid", "broker_id"
)
LOADGEN_BROKER_REQUESTS_TOTAL = counter(
    "kdiag_loadgen_broker_requests_total", "Requests the producer sent to the broker.", "pid", "broker_id"
)
LOADGEN_BROKER_RTT_SECONDS = gauge(
    "kdiag_loadgen_broker_rtt_seconds",
    "Produce request round trip to the broker over the last stats interval (mean, 0.99).",
    "pid",
    "broker_id",
    "quantile",
)
LOADGEN_BYTES_TOTAL = counter("kdiag_loadgen_bytes_total", "Record bytes the brokers acknowledged.", "pid")
LOADGEN_CPU_SECONDS_TOTAL = counter(
    "kdiag_loadgen_cpu_seconds_total", "User and system CPU seconds of the load generator process.", "pid"
)
LOADGEN_INFO = gauge(
    "kdiag_loadgen_info",
    "A running `kdiag bench produce` process: its topic, acks and compression, value 1.",
    "pid",
    "topic",
    "acks",
    "compression",
)
LOADGEN_LATENCY_SECONDS = gauge(
    "kdiag_loadgen_latency_seconds",
    "Send-to-acknowledgement latency over the last stats interval (mean, 0.99, max).",
    "pid",
    "quantile",
)
LOADGEN_LINGER_SECONDS = gauge("kdiag_loadgen_linger_seconds", "The producer's linger.ms, in seconds.", "pid")
LOADGEN_QUEUE_FILL_RATIO = gauge(
    "kdiag_loadgen_queue_fill_ratio", "Fill of the producer's local queue: the larger of records/max and bytes/max (0-1).", "pid"
)
LOADGEN_RECORD_SIZE_BYTES = gauge(
    "kdiag_loadgen_record_size_bytes", "Size of the records produced (absent with a payload file).", "pid"
)
LOADGEN_RECORDS_ACKED_TOTAL = counter("kdiag_loadgen_records_acked_total", "Records the brokers acknowledged.", "pid")
LOADGEN_RECORDS_FAILED_TOTAL = counter("kdiag_loadgen_records_failed_total", "Records whose delivery failed.", "pid")
LOADGEN_RECORDS_SENT_TOTAL = counter("kdiag_loadgen_records_sent_total", "Records the load generator handed to its producer.", "pid")
LOADGEN_THREADS = gauge("kdiag_loadgen_threads", "Producer processes of this bench run.", "pid")
