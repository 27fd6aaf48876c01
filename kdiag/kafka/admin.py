"""Cluster, topic, config and consumer-lag facts fetched through the Kafka AdminClient (confluent-kafka).

`fetch_admin_state` asks the cluster (a few batched requests per cycle) and returns an AdminState (kafka/state.py:
the JSON shape recordings keep); `samples_from_admin_state` (collectors/kafka/admin_samples.py) turns it into samples.
Recordings store it through `Root.kafka("admin", ...)`, so a replay derives exactly the samples the
live run did. Its cost stays flat with the partition count: log end offsets come in a few ListOffsets requests
per leader (kafka/end_offsets.py, or a Consumer's offsets_for_times), configs are re-read every
configs_interval (new topics' at once), and Empty groups are not described.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kdiag.kafka.committed import CommittedCache
from kdiag.kafka.configs import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigCache, Configs, pick
from kdiag.kafka.end_offsets import EndOffsets
from kdiag.kafka.group_offsets import BatchedReads
from kdiag.kafka.metadata_answer import shared_ids
from kdiag.kafka.offsets_topic import OffsetsView
from kdiag.kafka.partition_lag import TopPartitions
from kdiag.kafka.state import AdminState, Broker, Group, Partition, Topic

# AdminClient.list_offsets makes a Python future per partition (0.63 s of CPU at 10k partitions), and one
# offsets_for_times call over all of them costs 0.45 s (librdkafka matches each answer by a linear search);
# batches of 500 cost 0.03 s (measured on the lab, see benchmarks/scale.py). Metadata has no "changed since" form
# (nor has DescribeTopicPartitions, KIP-966: it pages): every fetch asks it once for every topic.
OFFSETS_BATCH = 500
# Groups whose offsets OffsetFetch reads per fetch while the __consumer_offsets reader catches up: about what one
# fetch of the offset_fetch mode reads in a few seconds (1,000 groups at 1.3% of a core).
FALLBACK_GROUPS = 500
FALLBACK_SECONDS = 1.0  # time a fetch must have left for a request a group after a batched read was cut short
log = logging.getLogger(__name__)
_said: set[str] = set()


def _say_once(message: str) -> None:
    """Log what kdiag cannot see on these brokers, once per AdminClient process."""
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)


class KafkaAdminError(Exception):
    """The cluster did not answer an admin request in time, or refused it."""


def _left(deadline: float) -> float:
    """Seconds until the deadline, never below a small positive floor (librdkafka rejects 0)."""
    return max(deadline - time.monotonic(), 0.05)


def _results(futures: dict[Any, Future[Any]], deadline: float) -> dict[Any, Any]:
    """Each future's result, leaving out items that failed; the deadline passing fails the whole fetch."""
    from confluent_kafka import KafkaException

    out = {}
    for key, future in futures.items():
        # One refused or unanswered item (a topic deleted meanwhile, an offline partition) only loses that item. Its
        # error is looked at, not raised: a raised one's traceback would tie this frame, and the AdminClient, into a
        # cycle that the garbage collector may free on a librdkafka thread, which aborts the process.
        error = future.exception(timeout=_left(deadline))
        if error is None:
            out[key] = future.result()
        elif not isinstance(error, KafkaException):
            raise error
    return out


def _cluster(admin: Any, deadline: float) -> tuple[str | None, int, list[Broker]]:
    """Cluster id, controller and brokers from describe_cluster (librdkafka asks Metadata, which every 2.x answers)."""
    desc = admin.describe_cluster(request_timeout=_left(deadline)).result(timeout=_left(deadline))
    brokers: list[Broker] = [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in desc.nodes]
    return desc.cluster_id, desc.controller.id if desc.controller else -1, sorted(brokers, key=lambda b: b["id"])


def _topics(admin: Any, deadline: float, batch: BatchedReads | None = None) -> dict[str, Topic]:
    """Partitions (leader, replicas, isr) of every non-internal topic, from one metadata request: kdiag decodes its
    answer where `batch` can be had (kafka/metadata_answer.py), else librdkafka."""
    if batch is not None and (decoded := batch.topics(deadline)) is not None:
        return decoded
    metadata = admin.list_topics(timeout=_left(deadline))
    # Partitions share a few replica sets: one list per set, which the answer's marshal frame keeps shared (100,000
    # partitions on 6 brokers: 120 lists, not 200,000), so the daemon reads and holds them once. Nothing changes them.
    lists: dict[tuple[int, ...], list[int]] = {}
    topics: dict[str, Topic] = {}
    for name, topic in sorted(metadata.topics.items()):
        if name.startswith("__"):
            continue
        partitions: list[Partition] = [
            {"partition": p.id, "leader": p.leader, "replicas": shared_ids(lists, tuple(p.replicas)),
             "isr": shared_ids(lists, tuple(p.isrs)),
             "log_end_offset": None}
            for p in topic.partitions.values()
        ]
        topics[name] = {"partitions": sorted(partitions, key=lambda p: p["partition"]), "configs": {}, "config_sources": {}}
    return topics


def _configs(admin: Any, deadline: float, batch: BatchedReads | None) -> Callable[[list[str], list[int]], Configs]:
    """A reader of the wanted configs of topics and brokers (brokers in id order): asked by name where `batch` can,
    else every entry through librdkafka's describe_configs, one request per broker (topics ride on the first)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    def described(topics: list[str], brokers: list[int]) -> Configs:
        topic_res = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        broker_res = [ConfigResource(ResourceType.BROKER, str(b)) for b in brokers]
        # librdkafka allows only one BROKER resource per DescribeConfigs call.
        batches = [topic_res + broker_res[:1]] + [[r] for r in broker_res[1:]] if broker_res else [topic_res]
        futures = {}
        for resources in batches:
            if resources:
                futures.update(admin.describe_configs(resources, request_timeout=_left(deadline)))
        out: Configs = ({}, {})
        for res, got in _results(futures, deadline).items():
            topic = res.restype == ResourceType.TOPIC
            names = TOPIC_CONFIGS if topic else BROKER_CONFIGS
            out[0 if topic else 1][res.name] = pick(
                {n: (e.value, e.source, e.is_sensitive) for n in names if (e := got.get(n)) is not None}, names)
        return out

    def read(topics: list[str], brokers: list[int]) -> Configs:
        got = batch.configs(topics, brokers, deadline) if batch is not None else None
        topic_configs, broker_configs = got if got is not None else described(topics, brokers)
        return topic_configs, dict(sorted(broker_configs.items(), key=lambda kv: int(kv[0])))

    return read


def _log_end_offsets(consumer: Any, topics: dict[str, Topic], deadline: float,
                     batch: BatchedReads | None) -> EndOffsets:
    """Latest offset of every partition with a leader: per leader, in ListOffsets of many partitions through `batch`
    where it can be had, else OFFSETS_BATCH partitions per offsets_for_times call, so that each call is one ListOffsets
    (librdkafka splits a call by leader: mixed batches made one request per broker per call, about 1,200 a fetch at
    100,000 partitions on 6 brokers instead of 200)."""
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, d in topics.items():
        for p in d["partitions"]:
            if p["leader"] >= 0:
                by_leader.setdefault(p["leader"], []).append((t, p["partition"]))
    # At most half the time left: a leader that does not answer (frozen, just died) must leave the rest of the fetch,
    # and librdkafka's try after a failed read, their time.
    if batch is not None and (read := batch.end_offsets(by_leader, (time.monotonic() + deadline) / 2)) is not None:
        return read
    out = {}
    for partitions in by_leader.values():
        for start in range(0, len(partitions), OFFSETS_BATCH):
            # A batch that fails (its leader just died) only loses its partitions' offsets.
            with contextlib.suppress(KafkaException):
                got = consumer.offsets_for_times([TopicPartition(t, p, OFFSET_END)
                                                  for t, p in partitions[start:start + OFFSETS_BATCH]],
                                                 timeout=_left(deadline))
                out.update({(tp.topic, tp.partition): tp.offset for tp in got if not tp.error and tp.offset >= 0})
    return out


def _groups(admin: Any, topics: dict[str, Topic], deadline: float, committed: CommittedCache,
            view: OffsetsView | None, top: TopPartitions, batch: BatchedReads | None) -> dict[str, Group]:
    """State, member count and lag (per topic: sum and largest partition) of every consumer group; committed offsets
    from the view of __consumer_offsets when given (with each group's last commit time), else OffsetFetch (batched per
    coordinator through `batch` where it can be, a group a request for the rest). While the
    reader has not read the topic up to where it was when it began, OffsetFetch for FALLBACK_GROUPS groups only,
    those with members first: the others are listed without lag until the view has them."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    listed = admin.list_consumer_groups(request_timeout=_left(deadline)).result(timeout=_left(deadline))
    states = {g.group_id: getattr(g.state, "name", str(g.state)) for g in listed.valid}
    if "UNKNOWN" in states.values():
        _say_once("the brokers list consumer groups without their state (ListGroups v4, KIP-518, came with Kafka 2.6): "
                  "every group is described and its offsets read at each fetch, Empty ones too")
    ids = sorted(states)
    committed.keep(ids)
    if not ids:
        return {}
    # An Empty group has no members to describe: at 1,000 mostly idle groups that saves most describe calls.
    active = [g for g in ids if states[g] != "EMPTY"]
    described = admin.describe_consumer_groups(active, request_timeout=_left(deadline)) if active else {}
    # The API takes one group per call, so the calls are issued together and awaited after.
    offsets: dict[str, Future[Any]] = {}
    if view is None:
        fetched = ids
    elif view.caught_up:
        fetched = []
    else:
        # 10,000 OffsetFetch requests do not fit in one fetch: the same few each time (their lag stays fresh and
        # continuous), the groups whose consumers run first.
        fetched = sorted(ids, key=lambda g: (states[g] == "EMPTY", g))[:FALLBACK_GROUPS]
        committed.keep(fetched)
    due = [g for g in fetched if committed.due(g, states[g])]
    batched = batch.read(due, deadline, lambda g, read: committed.put(g, states[g], read)) if batch is not None else set()
    rest = [g for g in due if g not in batched]
    if batch is not None and batch.usable and rest:
        # A batched read cut short (the deadline, a coordinator gone) leaves its groups to the next fetch but a few:
        # a request each for thousands would not fit either (a first fetch at 10,000 groups), and librdkafka's
        # per-group calls crashed the process on the answers of a cluster that busy.
        rest = sorted(rest, key=lambda g: (states[g] == "EMPTY", g))[:FALLBACK_GROUPS] \
            if deadline - time.monotonic() > FALLBACK_SECONDS else []
    for g in rest:
        offsets.update(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                         request_timeout=_left(deadline)))
    descriptions = _results(described, deadline)
    for g, answer in _results(offsets, deadline).items():
        # A partition the group never committed reports offset -1001 (OFFSET_INVALID).
        committed.put(g, states[g], [(tp.topic, tp.partition, tp.offset) for tp in answer.topic_partitions
                                     if tp.offset >= 0 and not tp.error])
    ends = {t: {p["partition"]: p["log_end_offset"] for p in d["partitions"]} for t, d in topics.items()}
    read = view if view is not None and view.caught_up else None
    groups: dict[str, Group] = {}
    for g in ids:
        if states[g] == "EMPTY":
            state, members = "EMPTY", []
        elif g in descriptions:
            state, members = getattr(descriptions[g].state, "name", str(descriptions[g].state)), descriptions[g].members
        else:
            continue
        read_offsets, last = read.offsets(g) if read is not None else (committed.get(g), None)
        groups[g] = {"state": state, "members": len(members), "lag": top.add(g, read_offsets, ends)}
        if last is not None:
            groups[g]["last_commit"] = last
        if state == "STABLE":  # while a group rebalances, every member's assignment may be empty
            # A member beyond the partition count gets an empty assignment and reads nothing.
            groups[g]["idle_members"] = sum(1 for m in members if not (m.assignment and m.assignment.topic_partitions))
    return groups


def _on_broker(topics: dict[str, Topic], broker: int | None) -> list[str]:
    """The topics with a replica on the broker (none when there is no local broker)."""
    return [t for t, d in topics.items() if any(broker in p["replicas"] for p in d["partitions"])]


def fetch_admin_state(admin: Any, consumer: Any, timeout: float, configs: ConfigCache | None = None,
                      committed: CommittedCache | None = None, full: bool = True,
                      local_broker: int | None = None, view: OffsetsView | None = None,
                      top_partitions: int = 0, batch: BatchedReads | None = None) -> AdminState:
    """Cluster, topics, configs and consumer groups (every partition: totals and lag need them) within timeout.
    Not full (a daemon that does not report cluster scope): cluster and metadata, and the configs of the local broker
    (every broker's without one: its host-scope rules look at them all) and its topics; no end offsets, no groups."""
    deadline = time.monotonic() + timeout
    cluster_id, controller_id, cluster_brokers = _cluster(admin, deadline)
    topics = _topics(admin, deadline, batch)
    brokers = [b["id"] for b in cluster_brokers]
    if not full:
        brokers = [b for b in brokers if local_broker is None or b == local_broker]
    topic_configs, broker_configs = (configs or ConfigCache(0)).get(
        list(topics) if full else _on_broker(topics, local_broker), brokers, _configs(admin, deadline, batch))
    ends = _log_end_offsets(consumer, topics, deadline, batch) if full else {}
    for name, topic in topics.items():
        if picked := topic_configs.get(name):
            topic["configs"], topic["config_sources"] = picked["values"], picked["sources"]
        for p in topic["partitions"]:
            p["log_end_offset"] = ends.get((name, p["partition"]))
    state: AdminState = {
        "cluster_id": cluster_id, "controller_id": controller_id, "brokers": cluster_brokers,
        "broker_configs": {b: picked["values"] for b, picked in broker_configs.items()},
        "broker_config_sources": {b: picked["sources"] for b, picked in broker_configs.items()},
        "topics": topics,
        "consumer_groups": {},
    }
    if full:
        top = TopPartitions(top_partitions)
        state["consumer_groups"] = _groups(admin, topics, deadline, committed or CommittedCache(0), view, top, batch)
        if top_partitions:
            state["top_partitions"] = top.result()
    if not full:
        state["scope"] = "local"
    return state
