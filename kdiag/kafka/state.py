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


def _checked(value: object, kind: Any, key: str) -> object:
    """value when it is of the type `kind` (TypedDicts keep only their own keys); StateError naming key when not."""
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:
        for option in get_args(kind):
            try:
                return _checked(value, option, key)
            except StateError:
                continue
        raise StateError(key, f"expected {_name(kind)}, got {quote(value)}")
    if origin is Literal:
        if value in get_args(kind) and type(value) is type(get_args(kind)[0]):
            return value
        raise StateError(key, f"expected {_name(kind)}, got {quote(value)}")
    if origin is list:
        (item,) = get_args(kind)
        return [_checked(v, item, f"{key}[{i}]") for i, v in enumerate(_of_type(value, list, kind, key))]
    if origin is dict:
        _, item = get_args(kind)
        checked = _of_type(value, dict, kind, key)
        return {k: _checked(v, item, f"{key}[{quote(k)}]") for k, v in checked.items()}
    if isinstance(kind, type) and issubclass(kind, dict):  # a TypedDict
        return _checked_typeddict(_of_type(value, dict, kind, key), kind, key)
    if kind is float:
        return _of_type(value, (int, float), kind, key)
    return _of_type(value, kind, kind, key)


def _checked_typeddict(value: dict[str, Any], kind: type, key: str) -> dict[str, object]:
    """The keys of a TypedDict that value has, each checked; StateError naming a required key it lacks."""
    out = {}
    for name, field in _fields(kind).items():
        where = f"{key}.{name}" if key else name
        if name in value:
            out[name] = _checked(value[name], field, where)
        elif name in kind.__required_keys__:  # type: ignore[attr-defined]
            raise StateError(where, "missing")
    return out


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
