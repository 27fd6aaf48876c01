"""The admin collector: the cluster's admin state, fetched in the AdminClient's own process, as samples."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, cast

from kdiag.collectors import Collector
from kdiag.collectors.kafka.admin_samples import FAMILIES as STATE_FAMILIES
from kdiag.collectors.kafka.admin_samples import samples_from_admin_state
from kdiag.collectors.kafka.lag import FAMILIES as LAG_FAMILIES
from kdiag.collectors.kafka.lag import LagClock
from kdiag.collectors.kafka.partition_lag import PartitionLagClock
from kdiag.collectors.kafka.partition_rates import FAMILIES as RATE_FAMILIES
from kdiag.collectors.kafka.partition_rates import PartitionRates
from kdiag.collectors.registry import Shared, registered
from kdiag.config.probe import PROBE_GROUP_PREFIX, REPLICAS_TOPIC_SUFFIX
from kdiag.config.settings import Config
from kdiag.core.cardinality import SeriesFilter
from kdiag.core.root import Root
from kdiag.core.sample import LabelPool, Sample
from kdiag.core.worker_process import WorkerError, WorkerProcess
from kdiag.families.kafka import CONSUMER_PARTITION_LAG_SECONDS, KAFKA_BROKER_EXPECTED, KAFKA_OFFSETS_TOPIC_READ, \
    KAFKA_TOPIC_KDIAG_OWN
from kdiag.kafka.admin import KafkaAdminError
from kdiag.kafka.coordination import STATE_SUFFIX
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.state import ADMIN, AdminState, read_admin_state

log = logging.getLogger(__name__)
# Seconds the __consumer_offsets reader has to answer (it answers with what it has, at once): taken from the margin
# the AdminClient process has past kafka.timeout, so a fetch stays within kafka.timeout + 4 s.
READER_TIMEOUT = 2.0


def own_groups(config: Config) -> tuple[str, ...]:
    """kdiag's own consumer groups: the election's and the probes' (every daemon's probe group, by its prefix)."""
    return (config.kafka.coordination_group, config.probe.group_id or f"{PROBE_GROUP_PREFIX}*")


def own_topics(config: Config) -> tuple[str, ...]:
    """kdiag's own topics, shaped on purpose (the replica pairs topic has min.insync.replicas equal to its 2 replicas)."""
    coordination = config.kafka.coordination_topic
    return (config.probe.topic, config.probe.topic + REPLICAS_TOPIC_SUFFIX, coordination, coordination + STATE_SUFFIX)


@registered(default=lambda config: bool(config.kafka.bootstrap_servers), kafka_source=ADMIN)
class KafkaAdminCollector(Collector):
    """Cluster, topic, config and consumer lag facts through one AdminClient in a child process (`admin_worker`)."""

    name = "kafka_admin"
    families = (*STATE_FAMILIES, *LAG_FAMILIES, *RATE_FAMILIES, CONSUMER_PARTITION_LAG_SECONDS, KAFKA_TOPIC_KDIAG_OWN,
                KAFKA_OFFSETS_TOPIC_READ)

    def __init__(self, bootstrap_servers: str, timeout: float = 10.0, max_partition_series: int = 2000,
                 settings: ClientSettings | None = None, expected_brokers: list[int] | None = None,
                 partition_series: SeriesFilter | None = None, group_series: SeriesFilter | None = None,
                 configs_interval: float = 0.0, quiet_groups_interval: float = 0.0, local_broker: int | None = None,
                 own_groups: tuple[str, ...] = (), own_topics: tuple[str, ...] = (), committed_offsets: str = "offset_fetch",
                 top_partitions: int = 0):
        self.bootstrap_servers = bootstrap_servers
        self.expected_brokers = expected_brokers or []
        self.timeout = timeout
        self.max_partition_series = max_partition_series
        self.partition_series = partition_series or SeriesFilter()
        self.group_series = group_series or SeriesFilter()
        settings = settings or ClientSettings()
        # Created now, started on the first live fetch, so replays never start it.
        client = dataclasses.asdict(settings)
        self.worker = WorkerProcess("kdiag.kafka.admin_worker", {
            "bootstrap_servers": bootstrap_servers, "timeout": timeout, "configs_interval": configs_interval,
            "quiet_groups_interval": quiet_groups_interval, "top_partitions": top_partitions, "client": client},
            "the AdminClient process")
        # Its own process: it keeps what it read when the AdminClient process is restarted.
        self.reader = WorkerProcess("kdiag.kafka.offsets_worker", {
            "bootstrap_servers": bootstrap_servers, "timeout": timeout, "client": client},
            "the __consumer_offsets reader process") if committed_offsets == "offsets_topic" else None
        self.offsets_read: float | None = None  # the share of the reader's first read done, at the last fetch
        # (reader pid, AdminClient pid) when the AdminClient process last took in the reader's groups: while the same
        # two run, the reader sends only the groups that changed since.
        self._view_base: tuple[int | None, int | None] | None = None
        self.child_cpu_seconds = 0.0  # what the last fetch cost the AdminClient process
        self.lag_clock = LagClock()
        self.partition_rates = PartitionRates()
        self.partition_lag = PartitionLagClock()
        self.labels = LabelPool()
        # Whether fetches read cluster-wide state (groups, end offsets): only while this daemon reports cluster scope
        # (set_full, each cycle); otherwise metadata and the configs of local_broker and its topics.
        self._full = True
        self.local_broker = local_broker
        self.full_fetches = 0  # full fetches answered so far: how a new reporter knows its rates are warm
        # kdiag's own groups (the election's, the probes'; a name ending in "*" is a prefix): no consumer-group rule
        # judges them (the election's standbys hold no partition by design).
        self.own_groups = own_groups
        self.own_topics = own_topics

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> KafkaAdminCollector:
        """With `kafka:`; with no bootstrap servers it can only replay recordings."""
        kafka = config.kafka
        return cls(kafka.bootstrap_servers, kafka.timeout, kafka.max_partition_series, kafka.client_settings,
                   kafka.expected_brokers, partition_series=kafka.partition_series, group_series=kafka.group_series,
                   configs_interval=kafka.configs_interval, quiet_groups_interval=kafka.quiet_groups_interval,
                   local_broker=kafka.local_broker_id, own_groups=own_groups(config),
                   own_topics=own_topics(config), committed_offsets=kafka.committed_offsets,
                   top_partitions=kafka.top_partitions)

    @property
    def full(self) -> bool:
        """Whether the next fetch reads cluster-wide state."""
        return self._full

    def set_full(self, full: bool) -> None:
        """Read cluster-wide state from the next fetch on (this daemon reports cluster scope), or only local state."""
        self._full = full

    def fetch(self) -> AdminState:
        """Live admin state from the child; KafkaAdminError when the cluster fails to answer or the child dies."""
        try:
            # Past kafka.timeout the child gives up by itself; the margin covers its start and a TLS check.
            full = self._full
            began = time.monotonic()
            view, reader_cpu = self._view(full)
            self._view_base = None
            answer = self.worker.request({"fetch": True, "full": full, "local_broker": self.local_broker,
                                          "record_times": self.lag_clock.unanswered, "committed": view},
                                         self.timeout + 4.0 - (time.monotonic() - began))
        except WorkerError as e:
            raise KafkaAdminError(f"Kafka at {self.bootstrap_servers}: {e}") from None
        if view is not None and "groups" in view and self.reader is not None:
            self._view_base = (self.reader.pid(), self.worker.pid())
        self.child_cpu_seconds = self.worker.last_cpu_seconds + reader_cpu
        if "error" in answer:
            raise KafkaAdminError(answer["error"])
        self.full_fetches += full
        # The child runs this same code: its answer is an AdminState by construction, not input to check.
        return cast(AdminState, answer["state"])

    def _view(self, full: bool) -> tuple[dict[str, Any] | None, float]:
        """What the __consumer_offsets reader has now (None without one, or on a standby, which stops it) and the CPU
        seconds its process used since it last answered."""
        if self.reader is None or not full:
            if self.reader is not None:
                self.reader.close()  # a standby reads no cluster-wide state, __consumer_offsets included
            self.offsets_read = None
            return None, 0.0
        base = (self.reader.pid(), self.worker.pid())
        try:
            answer = self.reader.request({"view": True, "full": None in base or base != self._view_base},
                                         READER_TIMEOUT)
        except WorkerError as e:
            log.warning("committed offsets from OffsetFetch for a few groups only: %s", e)
            self.offsets_read = 0.0
            return {"read": 0.0}, 0.0
        cpu = answer.pop("cpu")  # all its threads since its last answer: the reader's, between requests, too
        if answer["read"] < 1.0:
            log.info("catching up, %.0f%% of __consumer_offsets read: committed offsets from OffsetFetch for a few "
                     "groups meanwhile%s", 100 * answer["read"], f" ({answer['error']})" if answer["error"] else "")
        elif self.offsets_read is not None and self.offsets_read < 1.0:
            log.info("caught up: committed offsets of every group from __consumer_offsets")
        self.offsets_read = answer["read"]
        return answer, cpu

    def collect(self, root: Root) -> list[Sample]:
        """Samples of the admin state, fetched live or read from the recording, and the brokers configured as expected."""
        self.child_cpu_seconds = 0.0
        state = self._without_own_groups(root.kafka(ADMIN, self.fetch, read_admin_state))
        canonical = self.labels.canonical
        samples = samples_from_admin_state(state, self.max_partition_series, self.partition_series, self.group_series,
                                           canonical)
        samples += self.lag_clock.samples(root.now(), state, self.group_series, canonical)
        samples += self.partition_rates.samples(root.now(), state["topics"])
        samples += self.partition_lag.samples(root.now(), state)
        samples += [KAFKA_TOPIC_KDIAG_OWN.sample(1, topic=t) for t in self.own_topics if t in state["topics"]]
        if self.offsets_read is not None:
            samples.append(KAFKA_OFFSETS_TOPIC_READ.sample(self.offsets_read))
        return self.labels.shared(samples + [KAFKA_BROKER_EXPECTED.sample(1, broker_id=b) for b in self.expected_brokers])

    def _own(self, group: str) -> bool:
        return any(group.startswith(g[:-1]) if g.endswith("*") else group == g for g in self.own_groups)

    def _without_own_groups(self, state: AdminState) -> AdminState:
        groups = state["consumer_groups"]
        if not any(self._own(g) for g in groups):
            return state
        return {**state, "consumer_groups": {g: v for g, v in groups.items() if not self._own(g)}}

    def close(self) -> None:
        """Stop the AdminClient process and the reader's."""
        self.worker.close()
        if self.reader is not None:
            self.reader.close()
