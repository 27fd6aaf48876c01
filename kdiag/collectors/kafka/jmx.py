"""Broker JMX: one long-running Kafka JmxTool JVM per endpoint streams the MBeans kdiag needs.

A JmxTool per endpoint polls every `poll_interval` seconds and prints one CSV row per poll; a reader
thread keeps the latest row. A cycle only reads those rows: no JVM start per cycle (one
`java -jar JMXQuery.jar` per endpoint and cycle costs ~0.5 s of CPU, a resident JmxTool ~0.03 s a poll).
`ready()` says whether a row came since the last fetch, so the daemon hands each row over at the cycle after it
came, whatever the phase between JmxTool's polls and kdiag's cycles.
JmxTool resolves its object names once at start, so readers are restarted every `refresh` seconds
to see MBeans registered later (RequestsPerSec per request version, FetchConsumer after the first
consumer).
"""

from __future__ import annotations

import glob
import logging
import threading
import time
from collections import defaultdict

from kdiag.kafka.jars import classpath
from kdiag.kafka.jmx_auth import JmxAuth
from kdiag.kafka.jmx_reader import JmxReader
from kdiag.kafka.state import JMX, JmxEndpoint, JmxState, read_jmx_state
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, Sample, SampleKind, sample
from kdiag.core.trust import trusted_program
from kdiag.collectors import Collector
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config

log = logging.getLogger(__name__)

# Kafka's RequestMetrics names (org.apache.kafka.network.metrics.RequestMetrics): FetchFollower and FetchConsumer
# split the Fetch API by who asks, so a slow follower fetch reads apart from a slow consumer or a slow disk.
REQUESTS = ("Produce", "FetchFollower", "FetchConsumer")
PHASES = {
    "TotalTimeMs": "total",
    "RequestQueueTimeMs": "queue",
    "LocalTimeMs": "local",
    "RemoteTimeMs": "remote",
    "ResponseQueueTimeMs": "response_queue",
    "ResponseSendTimeMs": "response_send",
}
QUANTILES = {"Mean": "mean", "50thPercentile": "0.5", "99thPercentile": "0.99"}
TOPIC_METERS = {
    "BytesInPerSec": "kdiag_kafka_bytes_in_total",
    "BytesOutPerSec": "kdiag_kafka_bytes_out_total",
    "MessagesInPerSec": "kdiag_kafka_messages_in_total",
    "TotalProduceRequestsPerSec": "kdiag_kafka_produce_requests_total",
    "TotalFetchRequestsPerSec": "kdiag_kafka_fetch_requests_total",
}
# (metric, mbean, attribute, kind) read as they are.
PLAIN = (
    (
        "kdiag_kafka_request_handler_idle_ratio",
        "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent",
        "OneMinuteRate",
        GAUGE,
    ),
    (
        "kdiag_kafka_network_processor_idle_ratio",
        "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
        "Value",
        GAUGE,
    ),
    ("kdiag_kafka_request_queue_size", "kafka.network:type=RequestChannel,name=RequestQueueSize", "Value", GAUGE),
    ("kdiag_kafka_log_flushes_total", "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "Count", COUNTER),
    ("kdiag_kafka_under_replicated_partitions", "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "Value", GAUGE),
    ("kdiag_kafka_under_min_isr_partitions", "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount", "Value", GAUGE),
    ("kdiag_kafka_isr_shrinks_total", "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", "Count", COUNTER),
    ("kdiag_kafka_isr_expands_total", "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec", "Count", COUNTER),
    ("kdiag_kafka_replica_fetch_max_lag", "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica",
     "Value", GAUGE),
    ("kdiag_kafka_produce_purgatory_size",
     "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Produce", "Value", GAUGE),
    ("kdiag_kafka_partitions", "kafka.server:type=ReplicaManager,name=PartitionCount", "Value", GAUGE),
    ("kdiag_kafka_leaders", "kafka.server:type=ReplicaManager,name=LeaderCount", "Value", GAUGE),
    ("kdiag_kafka_offline_partitions", "kafka.controller:type=KafkaController,name=OfflinePartitionsCount", "Value", GAUGE),
    ("kdiag_kafka_active_controller", "kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value", GAUGE),
    *((metric, f"kafka.server:type=BrokerTopicMetrics,name={name}", "Count", COUNTER) for name, metric in TOPIC_METERS.items()),
)
FLUSH = "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs"
LATE_REFRESH = 60.0  # seconds between restarts of an old JmxTool while the broker has not flushed yet

# Object names given to JmxTool. Patterns (",*" / "=*") match versions and collectors; once one
# query is a pattern JmxTool tolerates absent exact names (a broker-only node has no KafkaController).
QUERIES = (
    tuple(sorted({mbean for _, mbean, _, _ in PLAIN}))
    + tuple(
        f"kafka.network:type=RequestMetrics,name={name},request={request}"
        for request in REQUESTS
        for name in (*PHASES, "RequestBytes")
    )
    + tuple(f"kafka.network:type=RequestMetrics,name=RequestsPerSec,request={r},*" for r in REQUESTS)
    + (
        "java.lang:type=GarbageCollector,*",
        "kafka.server:type=app-info,id=*",
    )
)
ATTRIBUTES = (
    "Value",
    "Count",
    "OneMinuteRate",
    "Mean",
    "50thPercentile",
    "99thPercentile",
    "CollectionCount",
    "CollectionTime",
    "StartTimeMs",
)

HELP = {
    "kdiag_kafka_jmx_up": "1 when the broker's JMX endpoint answered this cycle, else 0.",
    "kdiag_kafka_request_handler_idle_ratio": "Request handler threads' idle fraction, one-minute rate (0-1).",
    "kdiag_kafka_network_processor_idle_ratio": "Network processor threads' average idle fraction (0-1).",
    "kdiag_kafka_request_queue_size": "Requests waiting in the request channel for a handler thread.",
    "kdiag_kafka_log_flushes_total": "Log flushes to disk since broker start.",
    "kdiag_kafka_log_flush_seconds": "Log flush time in seconds: mean and 0.99 quantile of the broker's histogram.",
    "kdiag_kafka_under_replicated_partitions": "Partitions led by this broker whose ISR is smaller than the replica set.",
    "kdiag_kafka_under_min_isr_partitions": "Partitions led by this broker whose ISR is below min.insync.replicas.",
    "kdiag_kafka_isr_shrinks_total": "ISR shrinks on this broker since start.",
    "kdiag_kafka_isr_expands_total": "ISR expansions on this broker since start.",
    "kdiag_kafka_replica_fetch_max_lag": "Messages the furthest-behind partition this broker follows lags its "
                                         "leader by (ReplicaFetcherManager MaxLag).",
    "kdiag_kafka_produce_purgatory_size": "Produce requests waiting in this broker's purgatory for followers to "
                                          "replicate them (acks=all).",
    "kdiag_kafka_partitions": "Partition replicas hosted by this broker.",
    "kdiag_kafka_leaders": "Partitions led by this broker.",
    "kdiag_kafka_offline_partitions": "Partitions without a leader, as seen by this node's controller.",
    "kdiag_kafka_active_controller": "1 when this node is the active KRaft controller.",
    "kdiag_kafka_bytes_in_total": "Bytes produced to this broker by clients, all topics.",
    "kdiag_kafka_bytes_out_total": "Bytes fetched from this broker by clients, all topics.",
    "kdiag_kafka_messages_in_total": "Messages produced to this broker, all topics.",
    "kdiag_kafka_produce_requests_total": "Produce requests received, all topics.",
    "kdiag_kafka_fetch_requests_total": "Fetch requests received, all topics.",
    "kdiag_kafka_request_time_seconds": "Request time per phase in seconds (mean, 0.5, 0.99 of the broker's histogram).",
    "kdiag_kafka_requests_total": "Requests of this type received, summed over request versions.",
    "kdiag_kafka_request_bytes": "Request size in bytes (mean and 0.99 of the broker's histogram).",
    "kdiag_jvm_gc_collections_total": "Garbage collections of the broker JVM per collector.",
    "kdiag_jvm_gc_collection_seconds_total": "Time spent in garbage collection by the broker JVM per collector.",
}


def jmx_url(endpoint: str) -> str:
    """A JMX service URL from a URL or a host:port shorthand."""
    return endpoint if endpoint.startswith("service:jmx:") else f"service:jmx:rmi:///jndi/rmi://{endpoint}/jmxrmi"


def parse_object_name(name: str) -> tuple[str, dict[str, str]]:
    """Domain and key properties of a JMX object name (unquoted values)."""
    domain, _, props = name.partition(":")
    return domain, dict(p.split("=", 1) for p in props.split(",") if "=" in p)


def canonical(name: str) -> str:
    """An object name with its keys sorted, so lookups do not depend on the order a JVM prints."""
    domain, props = parse_object_name(name)
    return domain + ":" + ",".join(f"{k}={v}" for k, v in sorted(props.items()))


def _index(values: dict[str, float]) -> dict[tuple[str, str], float]:
    """The values of one endpoint keyed by (canonical object name, attribute)."""
    out = {}
    for key, value in values.items():
        mbean, _, attribute = key.rpartition("|")
        out[canonical(mbean), attribute] = value
    return out


def _endpoint_samples(broker: str, values: dict[str, float]) -> list[Sample]:
    """Samples of one endpoint's values; absent MBeans leave their series out."""
    index = _index(values)
    out: list[Sample] = []

    def add(metric: str, mbean: str, attribute: str, kind: SampleKind = GAUGE, scale: float = 1.0, **labels: str) -> None:
        value = index.get((canonical(mbean), attribute))
        if value is not None:
            out.append(sample(metric, value * scale, kind, broker_id=broker, **labels))

    for metric, mbean, attribute, kind in PLAIN:
        add(metric, mbean, attribute, kind)
    # The idle meter's one-minute rate overshoots 1.0 slightly on an idle broker (seen: 1.0001).
    out[:] = [s._replace(value=min(s.value, 1.0)) if s.name.endswith("_idle_ratio") else s for s in out]
    add("kdiag_kafka_log_flush_seconds", FLUSH, "Mean", scale=1e-3, quantile="mean")
    add("kdiag_kafka_log_flush_seconds", FLUSH, "99thPercentile", scale=1e-3, quantile="0.99")
    for request in REQUESTS:
        for name, phase in PHASES.items():
            for attribute, quantile in QUANTILES.items():
                add(
                    "kdiag_kafka_request_time_seconds",
                    f"kafka.network:type=RequestMetrics,name={name},request={request}",
                    attribute,
                    scale=1e-3,
                    request=request,
                    phase=phase,
                    quantile=quantile,
                )
        for attribute in ("Mean", "99thPercentile"):
            add(
                "kdiag_kafka_request_bytes",
                f"kafka.network:type=RequestMetrics,name=RequestBytes,request={request}",
                attribute,
                request=request,
                quantile=QUANTILES[attribute],
            )
    out.extend(_requests_and_gc(broker, index))
    return out


def _requests_and_gc(broker: str, index: dict[tuple[str, str], float]) -> list[Sample]:
    """Request counts summed over the `version` tag, and GC counters per collector."""
    requests: dict[str, float] = dict.fromkeys(REQUESTS, 0.0)
    gc: dict[str, dict[str, float]] = defaultdict(dict)
    for (mbean, attribute), value in index.items():
        domain, props = parse_object_name(mbean)
        if props.get("name") == "RequestsPerSec" and props.get("request") in requests and attribute == "Count":
            requests[props["request"]] += value
        elif domain == "java.lang" and props.get("type") == "GarbageCollector":
            gc[props.get("name", "")][attribute] = value
    out = [sample("kdiag_kafka_requests_total", n, COUNTER, broker_id=broker, request=r) for r, n in requests.items()]
    for name, attrs in gc.items():
        if "CollectionCount" in attrs:
            out.append(sample("kdiag_jvm_gc_collections_total", attrs["CollectionCount"], COUNTER, broker_id=broker, gc=name))
        if "CollectionTime" in attrs:
            out.append(
                sample("kdiag_jvm_gc_collection_seconds_total", attrs["CollectionTime"] / 1e3, COUNTER, broker_id=broker, gc=name)
            )
    return out


def samples_from_jmx_state(state: JmxState) -> list[Sample]:
    """Samples of every endpoint in a JMX state; raises when no endpoint answered."""
    out: list[Sample] = []
    errors = []
    for url, endpoint in sorted(state["endpoints"].items()):
        up = "values" in endpoint
        out.append(sample("kdiag_kafka_jmx_up", int(up), GAUGE, endpoint=url))
        if up:
            out.extend(_endpoint_samples(str(endpoint.get("broker_id") or url), endpoint["values"]))
        else:
            errors.append(f"{url}: {endpoint.get('error', 'no values')}")
    if errors and len(errors) == len(state["endpoints"]):
        raise RuntimeError("no JMX endpoint answered: " + "; ".join(errors))
    return out


def broker_id(values: dict[str, float]) -> str | None:
    """The broker id from the kafka.server:type=app-info,id=N object name."""
    for key in values:
        domain, props = parse_object_name(key.rpartition("|")[0])
        if domain == "kafka.server" and props.get("type") == "app-info" and "id" in props:
            return props["id"]
    return None


NO_JARS = ("no Kafka jars to run JmxTool: set kafka.jmx_classpath to your Kafka's libs/* (none came from a broker "
           "process on this host, nor from a `kdiag lab`)")


def default_classpath() -> str:
    """The `kdiag lab` jars when there are any, else "" (a broker host's jars come from its process: broker_discovery)."""
    return classpath() if glob.glob(classpath()) else ""


@registered(default=lambda config: bool(config.kafka.jmx), kafka_source="jmx")
class KafkaJmxCollector(Collector):
    """Broker metrics from JMX, one resident JmxTool per endpoint; failing endpoints only report jmx_up 0."""

    name = "kafka_jmx"
    help = HELP

    def __init__(
        self,
        endpoints: list[str],
        timeout: float = 10.0,
        poll_interval: float = 10.0,
        classpath: str | None = None,
        refresh: float = 600.0,
        restart_after: float = 60.0,
        auth: JmxAuth | None = None,
    ):
        self.auth = auth or JmxAuth()
        self.urls = [jmx_url(e) for e in endpoints]
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.classpath = classpath or default_classpath()
        self.refresh = refresh
        self.restart_after = restart_after
        self.readers: dict[str, JmxReader] = {}
        self._handed: dict[str, tuple[float, dict[str, float]] | None] = {}  # per endpoint, the row fetch last saw
        self._carried: dict[str, tuple[float, dict[str, float]] | None] = {}  # a replaced old JmxTool's last row
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> KafkaJmxCollector:
        """Reading the brokers at kafka.jmx."""
        kafka = config.kafka
        return cls(kafka.jmx, kafka.timeout, kafka.jmx_interval, classpath=kafka.jmx_classpath or None,
                   auth=JmxAuth.from_config(kafka))

    @property
    def max_age(self) -> float:
        """How old a reader's last row may be before the endpoint counts as down."""
        return 2 * self.poll_interval + self.timeout

    def _due(self, reader: JmxReader, now: float) -> bool:
        """Whether a reader must be replaced: stale or older than `refresh` while alive; dead (at most once a minute)."""
        if reader.alive():
            last = reader.latest[0] if reader.latest else reader.started
            # Before 3.0 LogFlushStats registers at the first flush, and the old JmxTool takes exact names only.
            late = reader.legacy and reader.latest is not None and not any(k.startswith(FLUSH) for k in reader.latest[1])
            return now - last > self.max_age or now - reader.started > (min(self.refresh, LATE_REFRESH) if late else self.refresh)
        # A dead endpoint is retried once a minute, not every cycle: each try costs a JVM start.
        return now - reader.started > self.restart_after

    def _reader(self, url: str) -> JmxReader:
        """The endpoint's reader, restarted when due."""
        reader = self.readers.get(url)
        if reader is not None and self._due(reader, time.monotonic()):
            # The old JmxTool's first row comes a poll after its start: its predecessor's last row bridges the gap.
            self._carried[url] = reader.latest if reader.legacy else None
            reader.close()
            reader = None
        if reader is None:
            reader = self.readers[url] = JmxReader(url, self.classpath, self.poll_interval, QUERIES, ATTRIBUTES,
                                                    java=trusted_program("java"), auth=self.auth)
        return reader

    def ready(self) -> bool:
        """Whether fetch has news: a row not handed over yet, or a reader to start or replace."""
        with self._lock:
            now = time.monotonic()
            return any(url not in self.readers or self._due(self.readers[url], now)
                       or self._handed.get(url) is not self.readers[url].latest for url in self.urls)

    def fetch(self) -> JmxState:
        """The JMX state of every endpoint."""
        if not self.classpath:
            raise RuntimeError(NO_JARS)
        with self._lock:
            readers = {url: self._reader(url) for url in self.urls}
            deadline = time.monotonic() + self.timeout
            endpoints: dict[str, JmxEndpoint] = {}
            for url, reader in readers.items():
                carried = self._carried.get(url)
                if reader.latest is None and carried and time.monotonic() - carried[0] <= self.max_age:
                    endpoints[url] = {"broker_id": broker_id(carried[1]), "values": carried[1]}
                    self._handed[url] = reader.latest
                    continue
                values = reader.wait_row(deadline, self.max_age)
                self._handed[url] = reader.latest
                if values:
                    endpoints[url] = {"broker_id": broker_id(values), "values": values}
                else:
                    endpoints[url] = {"error": reader.error or f"no JmxTool row in the last {self.max_age:.0f}s"}
            return {"endpoints": endpoints}

    def collect(self, root: Root) -> list[Sample]:
        """Samples of the latest rows; raises when no endpoint answered."""
        return samples_from_jmx_state(root.kafka(JMX, self.fetch, read_jmx_state))

    def close(self) -> None:
        """Stop every reader JVM."""
        with self._lock:
            for reader in self.readers.values():
                reader.close()
            self.readers.clear()
