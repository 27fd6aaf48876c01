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

from kdiag.collectors import Collector
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.core.trust import trusted_program
from kdiag.families.family import Family
from kdiag.families.kafka import (
    JVM_GC_COLLECTIONS_TOTAL, JVM_GC_COLLECTION_SECONDS_TOTAL, KAFKA_ACTIVE_CONTROLLER, KAFKA_BYTES_IN_TOTAL,
    KAFKA_BYTES_OUT_TOTAL, KAFKA_FETCH_REQUESTS_TOTAL, KAFKA_ISR_EXPANDS_TOTAL, KAFKA_ISR_SHRINKS_TOTAL,
    KAFKA_JMX_UP, KAFKA_LEADERS, KAFKA_LOG_FLUSHES_TOTAL, KAFKA_LOG_FLUSH_SECONDS, KAFKA_MESSAGES_IN_TOTAL,
    KAFKA_NETWORK_PROCESSOR_IDLE_RATIO, KAFKA_OFFLINE_PARTITIONS, KAFKA_PARTITIONS, KAFKA_PRODUCE_PURGATORY_SIZE,
    KAFKA_PRODUCE_REQUESTS_TOTAL, KAFKA_REPLICA_FETCH_MAX_LAG, KAFKA_REQUESTS_TOTAL, KAFKA_REQUEST_BYTES,
    KAFKA_REQUEST_HANDLER_IDLE_RATIO, KAFKA_REQUEST_QUEUE_SIZE, KAFKA_REQUEST_TIME_SECONDS,
    KAFKA_UNDER_MIN_ISR_PARTITIONS, KAFKA_UNDER_REPLICATED_PARTITIONS,
)
from kdiag.kafka.jars import classpath
from kdiag.kafka.jmx_auth import JmxAuth
from kdiag.kafka.jmx_exporter import ExporterReader
from kdiag.kafka.jmx_reader import JmxReader, split_netns
from kdiag.kafka.state import JMX, JmxEndpoint, JmxState, read_jmx_state

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
    "BytesInPerSec": KAFKA_BYTES_IN_TOTAL,
    "BytesOutPerSec": KAFKA_BYTES_OUT_TOTAL,
    "MessagesInPerSec": KAFKA_MESSAGES_IN_TOTAL,
    "TotalProduceRequestsPerSec": KAFKA_PRODUCE_REQUESTS_TOTAL,
    "TotalFetchRequestsPerSec": KAFKA_FETCH_REQUESTS_TOTAL,
}
# (family, mbean, attribute) read as they are.
PLAIN = (
    (
        KAFKA_REQUEST_HANDLER_IDLE_RATIO,
        "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent",
        "OneMinuteRate"
    ),
    (
        KAFKA_NETWORK_PROCESSOR_IDLE_RATIO,
        "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
        "Value"
    ),
    (KAFKA_REQUEST_QUEUE_SIZE, "kafka.network:type=RequestChannel,name=RequestQueueSize", "Value"),
    (KAFKA_LOG_FLUSHES_TOTAL, "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "Count"),
    (KAFKA_UNDER_REPLICATED_PARTITIONS, "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "Value"),
    (KAFKA_UNDER_MIN_ISR_PARTITIONS, "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount", "Value"),
    (KAFKA_ISR_SHRINKS_TOTAL, "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", "Count"),
    (KAFKA_ISR_EXPANDS_TOTAL, "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec", "Count"),
    (KAFKA_REPLICA_FETCH_MAX_LAG, "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica", "Value"),
    (KAFKA_PRODUCE_PURGATORY_SIZE,
     "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Produce", "Value"),
    (KAFKA_PARTITIONS, "kafka.server:type=ReplicaManager,name=PartitionCount", "Value"),
    (KAFKA_LEADERS, "kafka.server:type=ReplicaManager,name=LeaderCount", "Value"),
    (KAFKA_OFFLINE_PARTITIONS, "kafka.controller:type=KafkaController,name=OfflinePartitionsCount", "Value"),
    (KAFKA_ACTIVE_CONTROLLER, "kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value"),
    *((metric, f"kafka.server:type=BrokerTopicMetrics,name={name}", "Count") for name, metric in TOPIC_METERS.items()),
)
FLUSH = "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs"
LATE_REFRESH = 60.0  # seconds between restarts of an old JmxTool while the broker has not flushed yet

# Object names given to JmxTool. Patterns (",*" / "=*") match versions and collectors; once one
# query is a pattern JmxTool tolerates absent exact names (a broker-only node has no KafkaController).
QUERIES = (
    tuple(sorted({mbean for _, mbean, _ in PLAIN}))
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


def jmx_url(endpoint: str) -> str:
    """A JMX service URL from a URL or a host:port shorthand, an "@netns:PID" suffix kept; a jmx_exporter agent's
    http(s) URL as it is."""
    if exporter(endpoint):
        return endpoint
    address, netns = split_netns(endpoint)
    url = address if address.startswith("service:jmx:") else f"service:jmx:rmi:///jndi/rmi://{address}/jmxrmi"
    return f"{url}@netns:{netns}" if netns else url


def exporter(url: str) -> bool:
    """Whether an endpoint is a jmx_exporter agent's HTTP endpoint (read without a JVM)."""
    return url.startswith(("http://", "https://"))


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

    def add(family: Family, mbean: str, attribute: str, scale: float = 1.0, **labels: str) -> None:
        value = index.get((canonical(mbean), attribute))
        if value is not None:
            out.append(family.sample(value * scale, broker_id=broker, **labels))

    for family, mbean, attribute in PLAIN:
        add(family, mbean, attribute)
    # The idle meter's one-minute rate overshoots 1.0 slightly on an idle broker (seen: 1.0001).
    out[:] = [s._replace(value=min(s.value, 1.0)) if s.name.endswith("_idle_ratio") else s for s in out]
    add(KAFKA_LOG_FLUSH_SECONDS, FLUSH, "Mean", scale=1e-3, quantile="mean")
    add(KAFKA_LOG_FLUSH_SECONDS, FLUSH, "99thPercentile", scale=1e-3, quantile="0.99")
    for request in REQUESTS:
        for name, phase in PHASES.items():
            for attribute, quantile in QUANTILES.items():
                add(
                    KAFKA_REQUEST_TIME_SECONDS,
                    f"kafka.network:type=RequestMetrics,name={name},request={request}",
                    attribute,
                    scale=1e-3,
                    request=request,
                    phase=phase,
                    quantile=quantile,
                )
        for attribute in ("Mean", "99thPercentile"):
            add(
                KAFKA_REQUEST_BYTES,
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
    out = [KAFKA_REQUESTS_TOTAL.sample(n, broker_id=broker, request=r) for r, n in requests.items()]
    for name, attrs in gc.items():
        if "CollectionCount" in attrs:
            out.append(JVM_GC_COLLECTIONS_TOTAL.sample(attrs["CollectionCount"], broker_id=broker, gc=name))
        if "CollectionTime" in attrs:
            out.append(
                JVM_GC_COLLECTION_SECONDS_TOTAL.sample(attrs["CollectionTime"] / 1e3, broker_id=broker, gc=name)
            )
    return out


def samples_from_jmx_state(state: JmxState) -> list[Sample]:
    """Samples of every endpoint in a JMX state; raises when no endpoint answered."""
    out: list[Sample] = []
    errors = []
    for url, endpoint in sorted(state["endpoints"].items()):
        up = "values" in endpoint
        out.append(KAFKA_JMX_UP.sample(int(up), endpoint=url))
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
    """Broker metrics from JMX, one resident JmxTool per endpoint (or a poller of a jmx_exporter agent's http(s)
    endpoint); failing endpoints only report jmx_up 0."""

    name = "kafka_jmx"
    families = (
        KAFKA_JMX_UP, KAFKA_REQUEST_HANDLER_IDLE_RATIO, KAFKA_NETWORK_PROCESSOR_IDLE_RATIO,
        KAFKA_REQUEST_QUEUE_SIZE, KAFKA_LOG_FLUSHES_TOTAL, KAFKA_LOG_FLUSH_SECONDS,
        KAFKA_UNDER_REPLICATED_PARTITIONS, KAFKA_UNDER_MIN_ISR_PARTITIONS, KAFKA_ISR_SHRINKS_TOTAL,
        KAFKA_ISR_EXPANDS_TOTAL, KAFKA_PARTITIONS, KAFKA_LEADERS, KAFKA_OFFLINE_PARTITIONS, KAFKA_ACTIVE_CONTROLLER,
        KAFKA_BYTES_IN_TOTAL, KAFKA_BYTES_OUT_TOTAL, KAFKA_MESSAGES_IN_TOTAL, KAFKA_PRODUCE_REQUESTS_TOTAL,
        KAFKA_FETCH_REQUESTS_TOTAL, KAFKA_REQUEST_TIME_SECONDS, KAFKA_REQUESTS_TOTAL, KAFKA_REQUEST_BYTES,
        JVM_GC_COLLECTIONS_TOTAL, JVM_GC_COLLECTION_SECONDS_TOTAL, KAFKA_REPLICA_FETCH_MAX_LAG, KAFKA_PRODUCE_PURGATORY_SIZE,
    )

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
        self.readers: dict[str, JmxReader | ExporterReader] = {}
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

    def _due(self, reader: JmxReader | ExporterReader, now: float) -> bool:
        """Whether a reader must be replaced: stale or older than `refresh` while alive; dead (at most once a minute)."""
        if reader.alive():
            last = reader.latest[0] if reader.latest else reader.started
            # Before 3.0 LogFlushStats registers at the first flush, and the old JmxTool takes exact names only.
            late = reader.legacy and reader.latest is not None and not any(k.startswith(FLUSH) for k in reader.latest[1])
            return now - last > self.max_age or now - reader.started > (min(self.refresh, LATE_REFRESH) if late else self.refresh)
        # A dead endpoint is retried once a minute, not every cycle: each try costs a JVM start.
        return now - reader.started > self.restart_after

    def _reader(self, url: str) -> JmxReader | ExporterReader:
        """The endpoint's reader, restarted when due."""
        reader = self.readers.get(url)
        if reader is not None and self._due(reader, time.monotonic()):
            # The old JmxTool's first row comes a poll after its start: its predecessor's last row bridges the gap.
            self._carried[url] = reader.latest if reader.legacy else None
            reader.close()
            reader = None
        if reader is None and exporter(url):
            reader = self.readers[url] = ExporterReader(url, self.poll_interval, QUERIES, ATTRIBUTES, self.timeout)
        if reader is None:
            nsenter = trusted_program("nsenter") if split_netns(url)[1] else ""
            reader = self.readers[url] = JmxReader(url, self.classpath, self.poll_interval, QUERIES, ATTRIBUTES,
                                                    java=trusted_program("java"), auth=self.auth, nsenter=nsenter)
        return reader

    def ready(self) -> bool:
        """Whether fetch has news: a row not handed over yet, or a reader to start or replace."""
        with self._lock:
            now = time.monotonic()
            return any(url not in self.readers or self._due(self.readers[url], now)
                       or self._handed.get(url) is not self.readers[url].latest for url in self.urls)

    def fetch(self) -> JmxState:
        """The JMX state of every endpoint."""
        if not self.classpath and not all(exporter(url) for url in self.urls):
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
