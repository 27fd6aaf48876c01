"""The topic and broker configs kdiag's rules read, the DescribeConfigs that asks them by name (sent by the batched
client where it can be had, kafka/group_offsets.py; else kafka/admin.py asks librdkafka), and their cache, re-read every
configs_interval (a new topic's at once).

librdkafka's describe_configs asks every config of every resource with its synonyms: 1,000 topics cost 0.45-0.54 s
of CPU a read, mostly in Python objects for configs kdiag never looks at. Asking only the wanted names, without
synonyms, costs 0.04 s (measured on the 100,000-partition lab) and less of the brokers' time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

from kdiag.kafka.state import ConfigSources, ConfigValues

TOPIC_CONFIGS = (
    "flush.messages",
    "flush.ms",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
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
TOPIC, BROKER = 2, 4  # DescribeConfigs resource types
DEFAULT_CONFIG = 5  # the config source of a value nobody set
TOPICS_PER_REQUEST = 5_000
# name -> (raw value, config source, whether Kafka calls it sensitive), as a DescribeConfigs answer gives each entry
Entries = dict[str, tuple[str | None, int, bool]]


class PickedConfigs(TypedDict):
    """The wanted config entries of one topic or broker: raw values, and where the set ones come from."""

    values: ConfigValues
    sources: ConfigSources


# (topic configs, broker configs), each resource name -> its picked configs
Configs = tuple[dict[str, PickedConfigs], dict[str, PickedConfigs]]


def source_name(source: int) -> str:
    """A config source's name as Kafka's ConfigSource enum spells it (UNKNOWN_CONFIG for one newer than kdiag)."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return ConfigSource.UNKNOWN_CONFIG.name


def pick(entries: Entries, names: tuple[str, ...]) -> PickedConfigs:
    """The named entries' raw values (None where Kafka reports null) and where the set ones come from."""
    # A sensitive entry's value is never stored (recordings travel); Kafka reports it as null anyway.
    picked = {n: entries[n] for n in names if n in entries and not entries[n][2]}
    # A topic inheriting a broker value reports the broker's source (e.g. DYNAMIC_DEFAULT_BROKER_CONFIG), not its own.
    return {"values": {n: value for n, (value, _, _) in picked.items()},
            "sources": {n: source_name(source) for n, (_, source, _) in picked.items() if source != DEFAULT_CONFIG}}


def requests(topics: list[str], brokers: list[int], any_node: int) -> Iterable[tuple[int, Any]]:
    """(node, DescribeConfigs) asking the wanted names only: the topics' of any node, each broker's of itself."""
    from kafka.protocol.admin.configs import DescribeConfigsRequest

    resource = DescribeConfigsRequest.DescribeConfigsResource
    for start in range(0, len(topics), TOPICS_PER_REQUEST):
        yield any_node, DescribeConfigsRequest(
            resources=[resource(resource_type=TOPIC, resource_name=t, configuration_keys=list(TOPIC_CONFIGS))
                       for t in topics[start:start + TOPICS_PER_REQUEST]],
            include_synonyms=False, include_documentation=False, min_version=1, max_version=4)
    for b in brokers:
        yield b, DescribeConfigsRequest(
            resources=[resource(resource_type=BROKER, resource_name=str(b), configuration_keys=list(BROKER_CONFIGS))],
            include_synonyms=False, include_documentation=False, min_version=1, max_version=4)


def take_answer(answer: Any, into: Configs) -> None:
    """Pick each resource of one DescribeConfigs answer into (topics, brokers); a refused one (deleted meanwhile, not
    authorized) is left out, as librdkafka's path leaves it."""
    for result in answer.results:
        if result.error_code == 0:
            entries = {c.name: (c.value, c.config_source, c.is_sensitive) for c in result.configs}
            topic = result.resource_type == TOPIC
            into[0 if topic else 1][result.resource_name] = pick(entries, TOPIC_CONFIGS if topic else BROKER_CONFIGS)


class ConfigCache:
    """Topic and broker configs, re-read every `interval` seconds; a topic not seen before is read at once."""

    def __init__(self, interval: float):
        self.interval = interval
        self._at = -float("inf")
        self._topics: dict[str, PickedConfigs] = {}
        self._brokers: dict[str, PickedConfigs] = {}

    def get(self, topics: list[str], brokers: list[int], read: Callable[[list[str], list[int]], Configs]) -> Configs:
        """(topic configs, broker configs) of these topics and brokers, read(topics, brokers) when due."""
        if time.monotonic() - self._at >= self.interval or sorted(self._brokers, key=int) != [str(b) for b in brokers]:
            self._topics, self._brokers = read(topics, brokers)
            self._at = time.monotonic()
        elif new := [t for t in topics if t not in self._topics]:
            self._topics.update(read(new, [])[0])
        self._topics = {t: c for t, c in self._topics.items() if t in topics}
        return self._topics, self._brokers
