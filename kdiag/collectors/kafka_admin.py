"""Cluster, topic, config and consumer-lag facts from the Kafka AdminClient (confluent-kafka).

`fetch_admin_state` asks the cluster (a few batched requests per cycle) and returns a versioned,
JSON-serialisable dict; `samples_from_admin_state` turns that dict into samples. Recordings store the
dict through `Root.kafka("admin", ...)`, so a replay derives exactly the samples the live run did.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter
from concurrent.futures import Future
from typing import Any

from kdiag.kafka_client import ClientSettings, ErrorLog
from kdiag.root import Root
from kdiag.sample import COUNTER, GAUGE, Sample, sample

VERSION = 1
SOURCE = "admin"
TOPIC_CONFIGS = (
    "flush.messages",
    "flush.ms",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
)
BROKER_CONFIGS = (
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    # flush.ms and log.flush.interval.ms are only enforced by the flush scheduler, which never runs by default.
    "log.flush.scheduler.interval.ms",
    "num.io.threads",
    "num.network.threads",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.request.max.bytes",
    "log.dirs",
    "auto.leader.rebalance.enable",
    "num.partitions",
    "default.replication.factor",
    "min.insync.replicas",
)

HELP = {
    "kdiag_kafka_cluster_info": "Kafka cluster id seen by the AdminClient (always 1).",
    "kdiag_kafka_controller_id": "Node id of the active controller.",
    "kdiag_kafka_brokers": "Number of brokers in the cluster.",
    "kdiag_kafka_broker_info": "Broker address and rack (always 1).",
    "kdiag_kafka_broker_expected": "A broker kafka.expected_brokers says should be live (always 1).",
    "kdiag_kafka_broker_leaders": "Partitions of non-internal topics led by the broker.",
    "kdiag_kafka_broker_replicas": "Replicas of non-internal topics hosted by the broker.",
    "kdiag_kafka_broker_config": "Numeric broker config value (booleans as 0/1; Long.MAX_VALUE means not set).",
    "kdiag_kafka_broker_log_dirs_info": "Broker log.dirs setting (always 1).",
    "kdiag_kafka_topic_partitions": "Partitions of the topic.",
    "kdiag_kafka_topic_replication_factor": "Replication factor of the topic (largest replica list).",
    "kdiag_kafka_topic_under_replicated_partitions": "Partitions whose ISR is smaller than their replica list.",
    "kdiag_kafka_topic_offline_partitions": "Partitions without a leader.",
    "kdiag_kafka_topic_under_min_isr_partitions": "Partitions whose ISR is smaller than min.insync.replicas.",
    "kdiag_kafka_topic_config": "Numeric topic config value (booleans as 0/1; Long.MAX_VALUE means not set).",
    "kdiag_kafka_topic_config_override": "1 for each config the topic sets itself (kafka-configs --entity-type topics), "
                                         "not inherited from the brokers.",
    "kdiag_kafka_broker_config_source_info": "Where a broker config that is not at its default is set (describe_configs "
                                             "source: DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG, STATIC_BROKER_CONFIG).",
    "kdiag_kafka_topic_broker_leaders": "Partitions of the topic led by the broker.",
    "kdiag_kafka_topic_broker_preferred_leaders": "Partitions of the topic whose first replica is the broker.",
    "kdiag_kafka_topic_log_end_offset_total": "Sum of the log end offsets of the topic's partitions.",
    "kdiag_kafka_partition_log_end_offset_total": "Log end offset of the partition (only while partitions are few).",
    "kdiag_kafka_partition_leader": "Leader broker id of the partition, -1 when offline (only while partitions are few).",
    "kdiag_kafka_consumergroup_members": "Members of the consumer group.",
    "kdiag_kafka_consumergroup_idle_members": "Members of the consumer group with no partition assigned.",
    "kdiag_kafka_consumergroup_stable": "1 while the consumer group is Stable, 0 while it rebalances or is empty or dead.",
    "kdiag_kafka_consumergroup_lag": "Sum over partitions of log end offset minus committed offset.",
    "kdiag_kafka_consumergroup_lag_max": "Largest partition lag of the consumer group on the topic.",
}


class KafkaAdminError(Exception):
    """The cluster did not answer an admin request in time, or refused it."""


def _left(deadline: float) -> float:
    """Seconds until the deadline, never below a small positive floor (librdkafka rejects 0)."""
    return max(deadline - time.monotonic(), 0.05)


def _results(futures: dict[Any, Future], deadline: float) -> dict[Any, Any]:
    """Each future's result, leaving out items that failed; the deadline passing fails the whole fetch."""
    from confluent_kafka import KafkaException

    out = {}
    for key, future in futures.items():
        # One refused or unanswered item (a topic deleted meanwhile, an offline partition) only loses that item.
        with contextlib.suppress(KafkaException):
            out[key] = future.result(timeout=_left(deadline))
    return out


def _cluster(admin: Any, deadline: float) -> dict[str, Any]:
    """Cluster id, controller and brokers from describe_cluster."""
    desc = admin.describe_cluster(request_timeout=_left(deadline)).result(timeout=_left(deadline))
    brokers = [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in desc.nodes]
    return {
        "cluster_id": desc.cluster_id,
        "controller_id": desc.controller.id if desc.controller else -1,
        "brokers": sorted(brokers, key=lambda b: b["id"]),
    }


def _topics(admin: Any, deadline: float) -> dict[str, dict[str, Any]]:
    """Partitions (leader, replicas, isr) of every non-internal topic, from one metadata request."""
    metadata = admin.list_topics(timeout=_left(deadline))
    topics = {}
    for name, topic in sorted(metadata.topics.items()):
        if name.startswith("__"):
            continue
        partitions = [
            {"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs), "log_end_offset": None}
            for p in topic.partitions.values()
        ]
        topics[name] = {"partitions": sorted(partitions, key=lambda p: p["partition"]), "configs": {}}
    return topics


def _configs(admin: Any, topics: list[str], brokers: list[int], deadline: float) -> tuple[dict, dict]:
    """Wanted topic and broker configs as raw strings; one request per broker, topics ride on the first."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic_res = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    broker_res = [ConfigResource(ResourceType.BROKER, str(b)) for b in brokers]
    # librdkafka allows only one BROKER resource per DescribeConfigs call.
    batches = [topic_res + broker_res[:1]] + [[r] for r in broker_res[1:]] if broker_res else [topic_res]
    futures = {}
    for batch in batches:
        if batch:
            futures.update(admin.describe_configs(batch, request_timeout=_left(deadline)))
    got = _results(futures, deadline)
    topic_configs, broker_configs = {}, {}
    for res, entries in got.items():
        if res.restype == ResourceType.TOPIC:
            topic_configs[res.name] = _pick(entries, TOPIC_CONFIGS)
        else:
            broker_configs[res.name] = _pick(entries, BROKER_CONFIGS)
    return topic_configs, dict(sorted(broker_configs.items(), key=lambda kv: int(kv[0])))


def _pick(entries: dict[str, Any], names: tuple[str, ...]) -> dict[str, dict[str, str | None]]:
    """The named config entries' raw values (None where Kafka reports null) and where the set ones come from."""
    from confluent_kafka.admin import ConfigSource

    # A sensitive entry's value is never stored (recordings travel); Kafka reports it as null anyway.
    picked = [entries[n] for n in names if n in entries and not entries[n].is_sensitive]
    # A topic inheriting a broker value reports the broker's source (e.g. DYNAMIC_DEFAULT_BROKER_CONFIG), not its own.
    sources = {e.name: ConfigSource(e.source).name for e in picked if e.source != ConfigSource.DEFAULT_CONFIG.value}
    return {"values": {e.name: e.value for e in picked}, "sources": sources}


def _log_end_offsets(admin: Any, topics: dict[str, dict], deadline: float) -> dict[tuple[str, int], int]:
    """Latest offset of every partition, all in one list_offsets call."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    wanted = {TopicPartition(t, p["partition"]): OffsetSpec.latest() for t, d in topics.items() for p in d["partitions"]}
    if not wanted:
        return {}
    got = _results(admin.list_offsets(wanted, request_timeout=_left(deadline)), deadline)
    return {(tp.topic, tp.partition): info.offset for tp, info in got.items()}


def _groups(admin: Any, topics: dict[str, dict], deadline: float) -> dict[str, dict[str, Any]]:
    """State, member count and lag per partition of every consumer group."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    listed = admin.list_consumer_groups(request_timeout=_left(deadline)).result(timeout=_left(deadline))
    ids = sorted(g.group_id for g in listed.valid)
    if not ids:
        return {}
    described = admin.describe_consumer_groups(ids, request_timeout=_left(deadline))
    # The API takes one group per call, so the calls are issued together and awaited after.
    offsets: dict[str, Future] = {}
    for g in ids:
        offsets.update(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=_left(deadline)))
    descriptions = _results(described, deadline)
    committed = _results(offsets, deadline)
    ends = {(t, p["partition"]): p["log_end_offset"] for t, d in topics.items() for p in d["partitions"]}
    groups = {}
    for g in ids:
        if g not in descriptions:
            continue
        desc = descriptions[g]
        state = getattr(desc.state, "name", str(desc.state))
        tps = committed[g].topic_partitions if g in committed else []
        groups[g] = {"state": state, "members": len(desc.members), "lag": _lag(tps, ends)}
        if state == "STABLE":  # while a group rebalances, every member's assignment may be empty
            # A member beyond the partition count gets an empty assignment and reads nothing.
            groups[g]["idle_members"] = sum(1 for m in desc.members if not (m.assignment and m.assignment.topic_partitions))
    return groups


def _lag(committed: list[Any], ends: dict[tuple[str, int], int | None]) -> dict[str, dict[str, int]]:
    """Lag per topic and partition (string keys, as JSON keeps them), for partitions with a commit."""
    lag: dict[str, dict[str, int]] = {}
    for tp in sorted(committed, key=lambda tp: (tp.topic, tp.partition)):
        end = ends.get((tp.topic, tp.partition))
        # A partition the group never committed reports offset -1001 (OFFSET_INVALID).
        if end is None or tp.offset < 0 or tp.error:
            continue
        lag.setdefault(tp.topic, {})[str(tp.partition)] = max(end - tp.offset, 0)
    return lag


def fetch_admin_state(admin: Any, timeout: float) -> dict[str, Any]:
    """Cluster, topics, configs and consumer groups (every partition: totals and lag need them) within timeout."""
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {"version": VERSION, **_cluster(admin, deadline)}
    topics = _topics(admin, deadline)
    topic_configs, broker_configs = _configs(admin, list(topics), [b["id"] for b in state["brokers"]], deadline)
    state["broker_configs"] = {b: picked["values"] for b, picked in broker_configs.items()}
    state["broker_config_sources"] = {b: picked["sources"] for b, picked in broker_configs.items()}
    ends = _log_end_offsets(admin, topics, deadline)
    for name, topic in topics.items():
        picked = topic_configs.get(name, {})
        topic["configs"], topic["config_sources"] = picked.get("values", {}), picked.get("sources", {})
        for p in topic["partitions"]:
            p["log_end_offset"] = ends.get((name, p["partition"]))
    state["topics"] = topics
    state["consumer_groups"] = _groups(admin, topics, deadline)
    return state


def config_number(value: str | None) -> float | None:
    """A config's raw string as a number (true/false as 1/0); None when null or not numeric."""
    if value is None:
        return None
    if value.lower() in ("true", "false"):
        return float(value.lower() == "true")
    try:
        return float(int(value))
    except ValueError:
        return None


def _cluster_samples(state: dict[str, Any]) -> list[Sample]:
    """Cluster id, controller, broker count and broker addresses."""
    out = [
        sample("kdiag_kafka_cluster_info", 1, GAUGE, cluster_id=state["cluster_id"]),
        sample("kdiag_kafka_controller_id", state["controller_id"]),
        sample("kdiag_kafka_brokers", len(state["brokers"])),
    ]
    for b in state["brokers"]:
        out.append(
            sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=b["id"], host=b["host"], port=b["port"], rack=b["rack"] or "")
        )
    return out


def _broker_samples(state: dict[str, Any], broker_ids: list[int]) -> list[Sample]:
    """Leaders, replicas and configs per broker."""
    partitions = [p for t in state["topics"].values() for p in t["partitions"]]
    leaders = Counter(p["leader"] for p in partitions)
    replicas = Counter(r for p in partitions for r in p["replicas"])
    out = []
    for b in broker_ids:
        out.append(sample("kdiag_kafka_broker_leaders", leaders[b], GAUGE, broker_id=b))
        out.append(sample("kdiag_kafka_broker_replicas", replicas[b], GAUGE, broker_id=b))
    for b, configs in state["broker_configs"].items():
        out += _config_samples("kdiag_kafka_broker_config", configs, broker_id=b)
        if "log.dirs" in configs:
            out.append(sample("kdiag_kafka_broker_log_dirs_info", 1, GAUGE, broker_id=b, log_dirs=configs["log.dirs"]))
    for b, sources in state.get("broker_config_sources", {}).items():
        out += [sample("kdiag_kafka_broker_config_source_info", 1, GAUGE, broker_id=b, name=n, source=src)
                for n, src in sources.items()]
    return out


def _config_samples(name: str, configs: dict[str, str | None], **labels: object) -> list[Sample]:
    """One sample per numeric config value."""
    numbers = {k: config_number(v) for k, v in configs.items()}
    return [sample(name, v, GAUGE, **labels, name=k) for k, v in numbers.items() if v is not None]


def _offline(p: dict[str, Any]) -> bool:
    return p["leader"] is None or p["leader"] < 0


def _topic_samples(topic: str, t: dict[str, Any], broker_ids: list[int]) -> list[Sample]:
    """Partition health, configs, leader spread and log end offset total of one topic."""
    parts = t["partitions"]
    out = [
        sample("kdiag_kafka_topic_partitions", len(parts), GAUGE, topic=topic),
        sample("kdiag_kafka_topic_replication_factor", max((len(p["replicas"]) for p in parts), default=0), GAUGE, topic=topic),
        sample(
            "kdiag_kafka_topic_under_replicated_partitions", sum(len(p["isr"]) < len(p["replicas"]) for p in parts), GAUGE, topic=topic
        ),
        sample("kdiag_kafka_topic_offline_partitions", sum(_offline(p) for p in parts), GAUGE, topic=topic),
    ]
    min_isr = config_number(t["configs"].get("min.insync.replicas"))
    if min_isr is not None:
        out.append(
            sample("kdiag_kafka_topic_under_min_isr_partitions", sum(len(p["isr"]) < min_isr for p in parts), GAUGE, topic=topic)
        )
    out += _config_samples("kdiag_kafka_topic_config", t["configs"], topic=topic)
    out += [sample("kdiag_kafka_topic_config_override", 1, GAUGE, topic=topic, name=n)
            for n, src in t.get("config_sources", {}).items() if src == "DYNAMIC_TOPIC_CONFIG"]
    leaders = Counter(p["leader"] for p in parts if not _offline(p))
    preferred = Counter(p["replicas"][0] for p in parts if p["replicas"])
    for b in sorted(set(broker_ids) | set(leaders) | set(preferred)):
        out.append(sample("kdiag_kafka_topic_broker_leaders", leaders[b], GAUGE, topic=topic, broker_id=b))
        out.append(sample("kdiag_kafka_topic_broker_preferred_leaders", preferred[b], GAUGE, topic=topic, broker_id=b))
    ends = [p["log_end_offset"] for p in parts if p["log_end_offset"] is not None]
    if ends:
        out.append(sample("kdiag_kafka_topic_log_end_offset_total", sum(ends), COUNTER, topic=topic))
    return out


def _partition_samples(topic: str, t: dict[str, Any]) -> list[Sample]:
    """Log end offset and leader of each partition of one topic."""
    out = []
    for p in t["partitions"]:
        labels = {"topic": topic, "partition": p["partition"]}
        if p["log_end_offset"] is not None:
            out.append(sample("kdiag_kafka_partition_log_end_offset_total", p["log_end_offset"], COUNTER, **labels))
        out.append(sample("kdiag_kafka_partition_leader", -1 if _offline(p) else p["leader"], GAUGE, **labels))
    return out


def _group_samples(group: str, g: dict[str, Any]) -> list[Sample]:
    """Members, and total and largest partition lag per topic, of one consumer group."""
    out = [sample("kdiag_kafka_consumergroup_members", g["members"], GAUGE, group=group),
           sample("kdiag_kafka_consumergroup_stable", int(g["state"] == "STABLE"), GAUGE, group=group)]
    if "idle_members" in g:  # only known while the group is stable
        out.append(sample("kdiag_kafka_consumergroup_idle_members", g["idle_members"], GAUGE, group=group))
    for topic, lags in g["lag"].items():
        values = list(lags.values())
        out.append(sample("kdiag_kafka_consumergroup_lag", sum(values), GAUGE, group=group, topic=topic))
        out.append(sample("kdiag_kafka_consumergroup_lag_max", max(values), GAUGE, group=group, topic=topic))
    return out


def samples_from_admin_state(state: dict[str, Any], max_partition_series: int = 2000) -> list[Sample]:
    """Samples of one admin state; per-partition series only while partitions number at most max_partition_series."""
    if state.get("version") != VERSION:
        raise ValueError(f"kafka admin state version {state.get('version')!r}, expected {VERSION}")
    broker_ids = [b["id"] for b in state["brokers"]]
    out = _cluster_samples(state) + _broker_samples(state, broker_ids)
    topics = state["topics"]
    per_partition = sum(len(t["partitions"]) for t in topics.values()) <= max_partition_series
    for name, t in topics.items():
        out += _topic_samples(name, t, broker_ids)
        if per_partition:
            out += _partition_samples(name, t)
    for group, g in state["consumer_groups"].items():
        out += _group_samples(group, g)
    return out


class KafkaAdminCollector:
    """Cluster, topic, config and consumer lag facts through one reused AdminClient."""

    name = "kafka_admin"
    help = HELP

    def __init__(self, bootstrap_servers: str, timeout: float = 10.0, max_partition_series: int = 2000,
                 settings: ClientSettings | None = None, expected_brokers: list[int] | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.expected_brokers = expected_brokers or []
        self.timeout = timeout
        self.max_partition_series = max_partition_series
        self.settings = settings or ClientSettings()
        self.errors = ErrorLog(self.settings, bootstrap_servers)
        self._admin: Any = None

    def admin(self) -> Any:
        """The AdminClient, created on first use so replays never open a connection."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            ms = int(self.timeout * 1000)
            self._admin = AdminClient(
                self.settings.conf(
                    {
                        "bootstrap.servers": self.bootstrap_servers,
                        "client.id": "kdiag",
                        "socket.timeout.ms": ms,
                        "request.timeout.ms": ms,
                    },
                    self.errors,
                )
            )
        return self._admin

    def fetch(self) -> dict[str, Any]:
        """Live admin state; KafkaAdminError naming the bootstrap servers when the cluster fails to answer."""
        from confluent_kafka import KafkaException

        try:
            state = fetch_admin_state(self.admin(), self.timeout)
        except (KafkaException, TimeoutError) as e:
            failure = self.settings.redact(f"{type(e).__name__}: {e}")
        else:
            self._admin.poll(0)  # drains the librdkafka log lines queued for `errors`
            self.errors.clear()
            return state
        # librdkafka keeps waiting for a controller it learnt before that broker died (until its next metadata
        # refresh, minutes away): a fresh client asks the live brokers again. The old one is released here, on this
        # Python thread, and no exception chain keeps it: left to the garbage collector it could be destroyed on
        # whichever thread collects, a librdkafka one included, and rd_kafka_destroy() there aborts the process.
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.poll(0)  # serves error_cb: an authentication or TLS failure says more than the timeout
        gc.collect()  # frees the failure's cycles (a future holding its exception, whose frames hold the client)
        del admin
        raise KafkaAdminError(f"Kafka at {self.bootstrap_servers}: {self.errors.reason() or failure}")

    def collect(self, root: Root) -> list[Sample]:
        """Samples of the admin state, fetched live or read from the recording, and the brokers configured as expected."""
        samples = samples_from_admin_state(root.kafka(SOURCE, self.fetch), self.max_partition_series)
        return samples + [sample("kdiag_kafka_broker_expected", 1, GAUGE, broker_id=b) for b in self.expected_brokers]
