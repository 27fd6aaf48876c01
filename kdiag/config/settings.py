"""Typed configuration with defaults: a YAML file, then flags; unknown keys and bad values fail with their path."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kdiag.core import yamlsafe
from kdiag.core.errors import KdiagError
from kdiag.core.cardinality import SeriesFilter
from kdiag.core.units import parse_duration
from kdiag.core.http import Authorization, BasicAuth, TLSConfig, check_settings
from kdiag.kafka.client import ClientConfigError, ClientSettings
from kdiag.kafka.fleet_key import FleetKeyError, read_key
from kdiag.config.probe import ProbeConfig
from kdiag.core.quote import cut, quote
from kdiag.core.redact import CMDLINE_MODES, MASKED

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class ConfigError(KdiagError):
    """A configuration value that cannot be used, named by its key path."""


Duration = typing.NewType("Duration", float)
MAX_TEXT = 4096  # PATH_MAX: no config string (path, address, URL, name) needs more

# The range of every number in the config, by key path (a list's items share the list's range); durations in seconds.
# A new numeric key needs an entry here: tests/config/test_settings.py fails for one without.
LIMITS: dict[str, tuple[float, float]] = {
    "interval": (0.1, 3600),
    "history": (10, 86400),
    "signal_window": (1, 3600),
    "collector_timeout": (0.5, 600),
    "processes.top_n": (0, 1000),
    "kafka.interval": (0.5, 3600),
    "kafka.jmx_interval": (0.5, 3600),
    "kafka.timeout": (0.1, 300),
    "kafka.max_partition_series": (0, 1_000_000),
    "kafka.max_series": (0, 10_000_000),
    "kafka.top_groups": (0, 10_000_000),
    "kafka.top_partitions": (0, 1_000_000),
    "kafka.configs_interval": (0, 86400),
    "kafka.quiet_groups_interval": (0, 86400),
    "kafka.expected_brokers": (0, 2**31 - 1),
    "kafka.local_broker_id": (0, 2**31 - 1),
    "nics.*.speed_mbps": (0, 10_000_000),
    "probe.interval": (0.01, 3600),
    "probe.replication_factor": (0, 32767),
    "probe.partitions_per_broker": (1, 1000),
    "probe.sla": (0.1, 3600),
    "probe.availability_window": (1, 86400),
    "probe.reconcile_interval": (1, 86400),
    "probe.latency_buckets": (0.0001, 86400),
    "probe.slo_seconds": (0.001, 3600),
    "diagnosis.max_subjects_per_rule": (0, 1_000_000),
    "alertmanager.resend_interval": (1, 86400),
    "alertmanager.timeout": (0.1, 300),
}


@dataclass
class ProcessesConfig:
    """Which processes get per-process series."""

    top_n: int = 5
    log_dirs: list[str] = field(default_factory=list)
    cmdline: str = MASKED  # the kdiag_process_info cmdline label: masked | full | off

    def validate(self) -> None:
        """Take `redacted`, the name of `masked`'s predecessor in configs written before it, as masked; ValueError on
        another mode."""
        if self.cmdline == "redacted":
            self.cmdline = MASKED
        if self.cmdline not in CMDLINE_MODES:
            raise ValueError(f"cmdline: {quote(self.cmdline)} is not {', '.join(CMDLINE_MODES)}")


@dataclass
class NicConfig:
    """What kdiag cannot read from a NIC itself."""

    # Link speed for NICs that report none (virtio, some bonds: /sys/class/net/IF/speed is -1); 0: as reported.
    speed_mbps: int = 0


@dataclass
class KafkaConfig:
    """How to reach the cluster; empty bootstrap_servers turns the Kafka collectors off."""

    bootstrap_servers: str = ""
    jmx: list[str] = field(default_factory=list)
    interval: Duration = Duration(15.0)
    jmx_interval: Duration = Duration(30.0)
    timeout: Duration = Duration(10.0)
    max_partition_series: int = 2000
    # Per-partition series only for topics matching (regexes matching the whole name); the others: topic series only.
    # None by default: at 100,000 partitions they are most of /metrics; the rules read per-topic values made from every
    # partition's offsets (kdiag_kafka_topic_broker_messages_per_second, kdiag_kafka_topic_partition_top_share).
    partition_series: SeriesFilter = field(default_factory=lambda: SeriesFilter(allow=[]))
    # Per-topic lag series only for groups matching; the others: one lag series per group, without a topic label.
    group_series: SeriesFilter = field(default_factory=SeriesFilter)
    # Consumer group series in /metrics only for the N groups that lag most (seconds, then messages); 0: every group.
    # The rules see every group.
    top_groups: int = 500
    # kdiag_consumer_partition_lag_seconds for the N (group, topic, partition) that lag most in messages; 0: none.
    top_partitions: int = 100
    # At most this many kdiag_kafka_* series in /metrics (the finest dropped first, counted by kdiag_series_dropped_total).
    max_series: int = 100_000
    # How often topic and broker configs are re-read (a new topic's at once); 0: every fetch.
    configs_interval: Duration = Duration(60.0)
    # How often an Empty group whose committed offsets did not move is read again (others: every fetch); 0: every fetch.
    quiet_groups_interval: Duration = Duration(300.0)
    # Where committed offsets come from: offset_fetch (OffsetFetch each fetch, 500 groups a request per coordinator on
    # Kafka 3.0+) or offsets_topic (the __consumer_offsets records: a cost that grows with commits, not groups; needs
    # Read on that topic).
    committed_offsets: str = "offset_fetch"
    # Node ids that should be live; empty: every broker seen in the last 15 minutes (broker_down).
    expected_brokers: list[int] = field(default_factory=list)
    # This host's broker (its node.id); null: found from the broker process on this host, else none (a load host).
    local_broker_id: int | None = None
    # Kafka's jars (JmxTool reads the brokers' MBeans), e.g. /opt/kafka/libs/*; empty: the local broker's, else the lab's.
    jmx_classpath: str = ""
    # A user (name or uid) whose kafka.Kafka processes are brokers wherever they run; root's service manager's and
    # container runtimes' are brokers whoever runs them (kdiag/core/brokertrust.py).
    broker_user: str = "kafka"
    # librdkafka properties for every Kafka client kdiag makes; secrets as `<prop>_file: PATH` or `${VAR}`.
    client: dict[str, Any] = field(default_factory=dict, repr=False)
    jmx_username: str = ""
    jmx_password_file: str = ""
    jmx_ssl: bool = False
    jmx_truststore: str = ""
    jmx_truststore_password_file: str = ""
    # The `cluster` label of Kafka series and diagnoses; empty: the cluster id describe_cluster reports.
    cluster_name: str = ""
    # Who exports cluster-scope diagnoses: auto (the daemon elected through coordination_group), always, never.
    cluster_scope: str = "auto"
    coordination_topic: str = "__kdiag_coordination"
    coordination_group: str = "kdiag-coordination"
    # The fleet key (`kdiag fleet key -o FILE`, the same file on every daemon of the cluster, readable by kdiag only):
    # coordination records and memberships are signed; empty: unsigned, and the page says "unauthenticated".
    coordination_key_file: str = ""

    @functools.cached_property
    def coordination_key(self) -> bytes | None:
        """The fleet key read from coordination_key_file, None without one; FleetKeyError when it is refused."""
        return read_key(self.coordination_key_file) if self.coordination_key_file else None

    @functools.cached_property
    def client_settings(self) -> ClientSettings:
        """kafka.client with its files read and ${VAR}s expanded; ClientConfigError names a bad key."""
        return ClientSettings.resolve(self.client)

    def validate(self) -> None:
        """Client settings librdkafka accepts, and JMX credential files that can be read."""
        try:
            self.client_settings.check()
        except ClientConfigError as e:
            raise ConfigError(str(e)) from None
        if self.committed_offsets not in ("offset_fetch", "offsets_topic"):
            raise ConfigError(f"kafka.committed_offsets: {quote(self.committed_offsets)} is not offset_fetch or "
                              "offsets_topic")
        if self.cluster_scope not in ("auto", "always", "never"):
            raise ConfigError(f"kafka.cluster_scope: {quote(self.cluster_scope)} is not auto, always or never")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", self.coordination_topic):
            raise ConfigError(f"kafka.coordination_topic: {quote(self.coordination_topic)} is not a Kafka topic name")
        if not self.coordination_group:
            raise ConfigError("kafka.coordination_group: must not be empty")
        try:
            self.coordination_key  # noqa: B018 (read now: a refused key stops the start-up, not the election)
        except FleetKeyError as e:
            raise ConfigError(str(e)) from None
        for name in ("partition_series", "group_series"):
            try:
                getattr(self, name).check(f"kafka.{name}")
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if not re.fullmatch(r"[0-9]{1,10}|[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?", self.broker_user):
            raise ConfigError(f"kafka.broker_user: {quote(self.broker_user)} is not a user name or uid")
        if self.jmx_username and not self.jmx_password_file:
            raise ConfigError("kafka.jmx_username: set kafka.jmx_password_file too")
        for name in ("jmx_password_file", "jmx_truststore", "jmx_truststore_password_file"):
            path = getattr(self, name)
            if path and not os.access(path, os.R_OK):
                raise ConfigError(f"kafka.{name}: cannot read {path}")


@dataclass
class LoadgenConfig:
    """Where `kdiag bench produce` leaves its live stats files for the loadgen collector."""

    stats_dir: str = "/run/kdiag/loadgen"


@dataclass
class DiagnosisConfig:
    """What /metrics and the page show of the diagnoses (/api/diagnoses and `kdiag diagnose` list every one)."""

    # kdiag_diagnosis_active and _evidence (each series an alert) and the page for at most N subjects of each rule, the
    # worst (firing first, then by the rule's rank_by); kdiag_diagnosis_subjects{,_omitted} count them. 0: all.
    max_subjects_per_rule: int = 50


@dataclass
class AlertmanagerConfig:
    """Optional direct push of diagnoses to Alertmanager; empty url turns it off."""

    url: str = ""
    resend_interval: Duration = Duration(60.0)
    timeout: Duration = Duration(5.0)
    # As in Prometheus's alertmanager_config; credentials in the url (http://user:pass@host) count as basic_auth.
    basic_auth: BasicAuth = field(default_factory=BasicAuth)
    authorization: Authorization = field(default_factory=Authorization)
    tls_config: TLSConfig = field(default_factory=TLSConfig)


@dataclass
class Config:
    """Everything kdiag run needs; every field has a default, so no file is required."""

    listen: str = "0.0.0.0:9745"
    # An exporter-toolkit web config file (TLS, basic auth) for the endpoint; empty: plain HTTP, no auth.
    web_config: str = ""
    procfs: str = "/proc"
    sysfs: str = "/sys"
    interval: Duration = Duration(5.0)
    history: Duration = Duration(900.0)
    signal_window: Duration = Duration(30.0)
    # A collector still running after this counts as failed; its thread is abandoned.
    collector_timeout: Duration = Duration(15.0)
    # Where diagnoses' state survives restarts: "auto" is /var/lib/kdiag for live runs when writable, "" is off.
    state_dir: str = "auto"
    rules_dirs: list[str] = field(default_factory=list)
    processes: ProcessesConfig = field(default_factory=ProcessesConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    loadgen: LoadgenConfig = field(default_factory=LoadgenConfig)
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    nics: dict[str, NicConfig] = field(default_factory=dict)
    # Collectors switched on or off by name (kdiag.collectors.registry); one left out: its default.
    collectors: dict[str, bool] = field(default_factory=dict)

    def validate(self) -> None:
        """Cross-field checks that types alone cannot express."""
        _host, _, port = self.listen.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"listen: {quote(self.listen)} is not host:port")
        if self.history < 10 * self.interval:
            raise ConfigError("history: must hold at least 10 intervals")
        for name, part in (("processes", self.processes), ("probe", self.probe)):
            try:
                part.validate()
            except ValueError as e:
                raise ConfigError(f"{name}.{e}") from None
        if self.kafka.jmx and not self.kafka.bootstrap_servers:
            raise ConfigError("kafka.jmx: set kafka.bootstrap_servers too")
        self.kafka.validate()
        am = self.alertmanager
        if am.url:
            try:
                check_settings(am.url, am.basic_auth, am.authorization, am.tls_config, "alertmanager")
            except ValueError as e:
                raise ConfigError(str(e)) from None


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is types.UnionType and type(None) in typing.get_args(tp):
        if value is None:
            return None
        (inner,) = (a for a in typing.get_args(tp) if a is not type(None))
        return _convert(inner, value, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if tp is Duration:
        try:
            return _in_range(Duration(parse_duration(value)), path, "s")
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from None
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        for key in value:
            if not isinstance(key, str) or not 0 < len(key) <= 200:
                raise ConfigError(f"{path}: key {quote(key, 40)} is not a property name")
        item = typing.get_args(tp)[1]
        if item is Any:
            return dict(value)
        return {k: _convert(item, v, f"{path}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {quote(value)}")
        return _in_range(value, path)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {quote(value)}")
        if len(value) > MAX_TEXT:
            raise ConfigError(f"{path}: {quote(value, 40)} is {len(value)} characters long (at most {MAX_TEXT})")
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{path}: expected true or false, got {quote(value)}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {quote(value)}")
        return _in_range(float(value), path)
    return value


def _in_range(value: float, path: str, unit: str = "") -> Any:
    """value, if inside the key's LIMITS (NaN never is), or at least finite for a key without limits."""
    key = re.sub(r"\[\d+\]$", "", path)
    # A mapping's own keys (nics.eth0.speed_mbps) share one range (nics.*.speed_mbps).
    limits = LIMITS.get(key) or LIMITS.get(re.sub(r"\.[^.]+\.([^.]+)$", r".*.\1", key))
    low, high = limits or (-sys.float_info.max, sys.float_info.max)
    if not low <= value <= high:
        expected = f"from {low:g}{unit} to {high:g}{unit}" if limits else "a finite number"
        raise ConfigError(f"{path}: {quote(value)} is out of range (expected {expected})")
    return value


_Built = TypeVar("_Built", bound="DataclassInstance")


def _build(cls: type[_Built], data: Any, path: str) -> _Built:
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            where = f"{path}.{key}" if path else str(key)
            raise ConfigError(f"{cut(where)}: unknown key (expected one of {', '.join(sorted(names))})")
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}
    return cls(**kwargs)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults, then the YAML file at path (if any), then dotted-key overrides from flags."""
    data: dict[str, Any] = {}
    if path:
        try:
            data = yamlsafe.load(path) or {}
        except yamlsafe.YamlError as e:
            raise ConfigError(str(e)) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the config file is a YAML mapping")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    try:
        config = _build(Config, data, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None
    try:
        config.validate()
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path else str(e)) from None
    return config
