"""The Kafka states kdiag fetches, samples and records in kafka.json: their types, and reading them back checked.

The admin state (kafka/admin.py fetches it) and the JMX state (collectors/kafka/jmx.py) are TypedDicts: the JSON shape
recordings keep, typed for mypy at no cost at runtime. kafka.json's one version (core/archive.py KAFKA_STATE_VERSION)
covers them all; a recorded state is read through `read_admin_state` / `read_jmx_state`, which check every key against
these types (recordings are hostile input) and bring an older version's shape to the current one. docs/RECORDING.md
describes the format.
"""

# No `from __future__ import annotations`: TypedDict sees NotRequired only in evaluated annotations (Python 3.11).
import functools
import types
from typing import Any, Literal, NotRequired, TypedDict, Union, cast, get_args, get_origin, get_type_hints

from kdiag.core.archive import StateError
from kdiag.core.quote import quote

ADMIN = "admin"
JMX = "jmx"
ConfigValues = dict[str, str | None]  # config name -> raw value (None where Kafka reports null)
ConfigSources = dict[str, str]  # config name -> describe_configs source, for the ones not at their default


class Broker(TypedDict):
    """A broker as describe_cluster lists it."""

    id: int
    host: str
    port: int
    rack: str | None


class Partition(TypedDict):
    """A partition of a topic: its leader (-1 offline), replicas and ISR, and its log end offset when read."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_end_offset: int | None


class Topic(TypedDict):
    """A non-internal topic: its partitions, the configs kdiag reads and where the set ones come from."""

    partitions: list[Partition]
    configs: ConfigValues
    config_sources: NotRequired[ConfigSources]  # absent in states recorded before kdiag kept it


class TopicLag(TypedDict):
    """A group's lag on one topic: summed over its committed partitions, the largest partition's."""

    sum: int
    max: int
    record_time: NotRequired[float]  # the oldest record at its committed offsets, when lag.py asked for it


class Group(TypedDict):
    """A consumer group: state, members, lag per topic; idle members only while it is Stable."""

    state: str
    members: int
    lag: dict[str, TopicLag]
    idle_members: NotRequired[int]
    last_commit: NotRequired[float]  # epoch seconds of its newest commit, when read from __consumer_offsets


class PartitionLag(TypedDict):
    """One of the partitions lagging most (kafka.top_partitions): a group's committed offset and lag on it."""

    group: str
    topic: str
    partition: int
    committed: int
    lag: int
    record_time: NotRequired[float]  # when the record at the committed offset was written, once read


class AdminState(TypedDict):
    """One AdminClient fetch: cluster, brokers, broker configs, topics and consumer groups."""

    cluster_id: str | None
    controller_id: int
    brokers: list[Broker]
    broker_configs: dict[str, ConfigValues]  # broker id (a string, as in JSON) -> configs
    broker_config_sources: NotRequired[dict[str, ConfigSources]]  # absent in states recorded before kdiag kept it
    topics: dict[str, Topic]
    consumer_groups: dict[str, Group]
    top_partitions: NotRequired[list[PartitionLag]]  # the kafka.top_partitions lagging most, furthest first
    scope: NotRequired[Literal["local"]]  # a fetch without groups and end offsets (a daemon not reporting the cluster)


class JmxEndpoint(TypedDict, total=False):
    """One JMX endpoint: the broker id and the latest row ("mbean|attribute" -> value), or why there is none."""

    broker_id: str | None
    values: dict[str, float]
    error: str


class JmxState(TypedDict):
    """The latest JmxTool row of every endpoint, by JMX service URL."""

    endpoints: dict[str, JmxEndpoint]


class _LagV1(TypedDict):
    """What version 1 of the admin state kept of a group's lag: per topic, per partition."""

    lag: dict[str, dict[str, int]]


def read_admin_state(recorded: object, version: int) -> AdminState:
    """A recorded admin state as an AdminState; StateError naming the key that is not of its type."""
    if version == 1:
        recorded = _admin_from_v1(recorded)
    return cast(AdminState, _checked(recorded, AdminState, ""))


def read_jmx_state(recorded: object, version: int) -> JmxState:
    """A recorded JMX state as a JmxState; StateError naming the key that is not of its type."""
    if version == 1:
        _own_version(_of_type(recorded, dict, JmxState, ""), (1,))
    return cast(JmxState, _checked(recorded, JmxState, ""))


def _lag_totals(per_partition: dict[str, dict[str, int]]) -> dict[str, TopicLag]:
    """A group's lag per topic and partition as the admin state keeps it: per topic, sum and largest."""
    return {t: {"sum": sum(parts.values()), "max": max(parts.values())} for t, parts in per_partition.items() if parts}


def _own_version(state: dict[str, Any], versions: tuple[int, ...]) -> int:
    """The version a state carried itself in kafka.json version 1, when it is one of `versions`."""
    own = state.get("version")
    if own not in versions or isinstance(own, bool):
        raise StateError("version", f"{quote(own)} is not one of {', '.join(map(str, versions))}")
    return cast(int, own)


def _admin_from_v1(recorded: object) -> dict[str, Any]:
    """A version 1 admin state in the current shape: its own version 1 kept lag per partition, its version 2 as now."""
    state: dict[str, Any] = _of_type(recorded, dict, AdminState, "")
    if _own_version(state, (1, 2)) == 2:
        return state
    groups = cast(dict[str, _LagV1], _checked(state.get("consumer_groups"), dict[str, _LagV1], "consumer_groups"))
    upgraded = {g: {**state["consumer_groups"][g], "lag": _lag_totals(v["lag"])} for g, v in groups.items()}
    return {**state, "consumer_groups": upgraded}


class _Bad(Exception):
    """A value not of its type: the problem, and the key path from the value up (innermost first) as it unwinds."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def _checked(value: object, kind: Any, key: str) -> object:
    """value when it is of the type `kind` (TypedDicts keep only their own keys); StateError naming key when not."""
    try:
        return _checker(kind)(value)
    except _Bad as e:
        where = key + "".join(reversed(e.path))
        raise StateError(where if key else where.removeprefix("."), e.problem) from None


def _wrong(kind: Any, value: object) -> _Bad:
    return _Bad(f"expected {_name(kind)}, got {quote(value)}")


@functools.cache
def _checker(kind: Any) -> Any:
    """A function checking a value against `kind`, made once per type: a 1,000,000-partition state is checked in a
    few seconds, not by walking the type at every value. Key paths are made only for a value that fails."""
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:
        options = [_checker(option) for option in get_args(kind) if option is not type(None)]
        nullable = type(None) in get_args(kind)

        def union(value: object) -> object:
            if value is None and nullable:
                return None
            for option in options:
                try:
                    return option(value)
                except _Bad:
                    continue
            raise _wrong(kind, value)
        return union
    if origin is Literal:
        allowed = get_args(kind)

        def literal(value: object) -> object:
            if value in allowed and type(value) is type(allowed[0]):
                return value
            raise _wrong(kind, value)
        return literal
    if origin is list:
        item = _checker(get_args(kind)[0])

        def listed(value: object) -> object:
            if not isinstance(value, list):
                raise _wrong(kind, value)
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item(v))
                except _Bad as e:
                    e.path.append(f"[{i}]")
                    raise
            return out
        return listed
    if origin is dict:
        member = _checker(get_args(kind)[1])

        def mapped(value: object) -> object:
            if not isinstance(value, dict):
                raise _wrong(kind, value)
            out = {}
            for k, v in value.items():
                try:
                    out[k] = member(v)
                except _Bad as e:
                    e.path.append(f"[{quote(k)}]")
                    raise
            return out
        return mapped
    if isinstance(kind, type) and issubclass(kind, dict):  # a TypedDict
        return _typeddict_checker(kind)
    python: Any = (int, float) if kind is float else kind

    def scalar(value: object) -> object:
        if isinstance(value, python) and not (isinstance(value, bool) and python is not bool):
            return value
        raise _wrong(kind, value)
    return scalar


def _typeddict_checker(kind: type) -> Any:
    """The checker of a TypedDict: the keys it has, each checked; a required key it lacks is named missing."""
    fields = [(name, _checker(field), name in kind.__required_keys__)  # type: ignore[attr-defined]
              for name, field in _fields(kind).items()]

    def typeddict(value: object) -> object:
        if not isinstance(value, dict):
            raise _wrong(kind, value)
        out = {}
        for name, check, required in fields:
            if name in value:
                try:
                    out[name] = check(value[name])
                except _Bad as e:
                    e.path.append("." + name)
                    raise
            elif required:
                lacking = _Bad("missing")
                lacking.path.append("." + name)
                raise lacking
        return out
    return typeddict


@functools.cache
def _fields(kind: type) -> dict[str, Any]:
    """A TypedDict's keys and their types (NotRequired left out), resolved once."""
    return get_type_hints(kind)


def _of_type(value: object, python: Any, kind: Any, key: str) -> Any:
    """value when it is an instance of `python` (a bool is no number); StateError naming key when not."""
    if isinstance(value, python) and not (isinstance(value, bool) and python is not bool):
        return value
    raise StateError(key, f"expected {_name(kind)}, got {quote(value)}")


def _name(kind: Any) -> str:
    """A type as an error message says it."""
    if kind is type(None):
        return "null"
    if get_origin(kind) in (Union, types.UnionType):
        return " or ".join(map(_name, get_args(kind)))
    if get_origin(kind) is Literal:
        return " or ".join(map(quote, get_args(kind)))
    if get_origin(kind) in (list, dict):
        return "a list" if get_origin(kind) is list else "an object"
    names = {int: "an integer", float: "a number", str: "a string"}
    return names.get(kind, "an object")
