"""Typed configuration: defaults, YAML overrides, and errors that name the key path."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from kdiag.config.settings import LIMITS, Config, ConfigError, Duration, KafkaConfig, ProcessesConfig, load_config


def write(tmp_path, text: str):
    f = tmp_path / "kdiag.yaml"
    f.write_text(text)
    return f


def test_defaults_without_a_file():
    c = load_config()
    assert c == Config()
    assert (c.listen, c.procfs, c.sysfs) == ("0.0.0.0:9745", "/proc", "/sys")
    assert (c.interval, c.history, c.signal_window) == (5.0, 900.0, 30.0)
    assert c.rules_dirs == []
    assert c.processes == ProcessesConfig(top_n=5, log_dirs=[])
    assert c.kafka == KafkaConfig()
    assert c.kafka.bootstrap_servers == ""


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, "# nothing set\n")) == Config()


def test_file_overrides(tmp_path):
    f = write(tmp_path, """
listen: 127.0.0.1:9999
interval: 10s
history: 30m
signal_window: 1m
rules_dirs: [/etc/kdiag/rules]
processes:
  top_n: 3
  log_dirs: [/data/kafka-logs]
kafka:
  bootstrap_servers: b1:9092,b2:9092
  jmx: [b1:9999]
  timeout: 500ms
""")
    c = load_config(f)
    assert c.listen == "127.0.0.1:9999"
    assert (c.interval, c.history, c.signal_window) == (10.0, 1800.0, 60.0)
    assert c.rules_dirs == ["/etc/kdiag/rules"]
    assert c.processes == ProcessesConfig(top_n=3, log_dirs=["/data/kafka-logs"])
    assert c.kafka.bootstrap_servers == "b1:9092,b2:9092"
    assert c.kafka.jmx == ["b1:9999"]
    assert c.kafka.timeout == 0.5
    # Keys not in the file keep their defaults, also inside a nested section.
    assert c.kafka.interval == KafkaConfig().interval
    assert c.procfs == "/proc"


def test_numbers_are_seconds(tmp_path):
    c = load_config(write(tmp_path, "interval: 2\nhistory: 60.5\n"))
    assert (c.interval, c.history) == (2.0, 60.5)


def test_dotted_overrides_beat_the_file(tmp_path):
    f = write(tmp_path, "kafka:\n  bootstrap_servers: file:9092\n  jmx: [x:1]\n")
    c = load_config(f, {"kafka.bootstrap_servers": "flag:9092", "listen": None, "interval": 7.0})
    assert c.kafka.bootstrap_servers == "flag:9092"
    assert c.kafka.jmx == ["x:1"]
    assert c.listen == Config().listen  # None means "flag not given"
    assert c.interval == 7.0


@pytest.mark.parametrize(("text", "path"), [
    ("intervall: 5s\n", "intervall"),
    ("kafka:\n  bootstrap_server: b1:9092\n", "kafka.bootstrap_server"),
    ("processes:\n  top: 3\n", "processes.top"),
])
def test_unknown_keys_fail_with_the_path(tmp_path, text, path):
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    message = str(info.value)
    assert message.startswith(f"{f}: {path}: unknown key")
    assert "expected one of" in message


def test_unknown_nested_key_lists_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap_server: unknown key \(expected one of .*bootstrap_servers"):
        load_config(write(tmp_path, "kafka:\n  bootstrap_server: b1:9092\n"))


def test_unknown_key_from_an_override():
    with pytest.raises(ConfigError, match=r"^kafka\.nope: unknown key"):
        load_config(None, {"kafka.nope": 1})


@pytest.mark.parametrize(("text", "fragment"), [
    ("interval: 5 minutes\n", "interval: '5 minutes' is not a duration"),
    ("kafka:\n  timeout: soon\n", "kafka.timeout: 'soon' is not a duration"),
    ("processes:\n  top_n: five\n", "processes.top_n: expected an integer, got 'five'"),
    ("processes:\n  top_n: true\n", "processes.top_n: expected an integer, got True"),
    ("processes:\n  top_n: 2.5\n", "processes.top_n: expected an integer"),
    ("listen: 9745\n", "listen: expected a string, got 9745"),
    ("rules_dirs: /etc/kdiag\n", "rules_dirs: expected a list, got str"),
    ("kafka:\n  jmx: [b1:9999, 7]\n", "kafka.jmx[1]: expected a string, got 7"),
    ("processes: [1, 2]\n", "processes: expected a mapping, got list"),
    ("kafka: null\n", "kafka: expected a mapping, got NoneType"),
    ("kafka:\n  local_broker_id: two\n", "kafka.local_broker_id: expected an integer, got 'two'"),
    ("kafka:\n  local_broker_id: [1]\n", "kafka.local_broker_id: expected an integer, got [1]"),
    ("kafka:\n  local_broker_id: -1\n", "kafka.local_broker_id: -1 is out of range (expected from 0 to"),
    ("kafka:\n  cluster_scope: sometimes\n", "kafka.cluster_scope: 'sometimes' is not auto, always or never"),
    ("kafka:\n  cluster_scope: true\n", "kafka.cluster_scope: expected a string, got True"),
    ("kafka:\n  coordination_topic: 'a b'\n", "kafka.coordination_topic: 'a b' is not a Kafka topic name"),
    ("kafka:\n  coordination_group: ''\n", "kafka.coordination_group: must not be empty"),
])
def test_bad_values_fail_with_the_path(tmp_path, text, fragment):
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(info.value).startswith(f"{f}: {fragment}")


def test_fleet_keys(tmp_path):
    config = load_config(write(tmp_path, "kafka:\n  local_broker_id: 3\n  cluster_name: prod\n  cluster_scope: never\n"))
    assert (config.kafka.local_broker_id, config.kafka.cluster_name, config.kafka.cluster_scope) == (3, "prod", "never")
    unset = load_config(write(tmp_path, "kafka:\n  local_broker_id: null\n"))
    assert unset.kafka.local_broker_id is None and unset.kafka.cluster_scope == "auto"


def test_bool_is_not_a_duration(tmp_path):
    with pytest.raises(ConfigError, match="interval"):
        load_config(write(tmp_path, "interval: true\n"))


def test_file_that_is_not_a_mapping(tmp_path):
    f = write(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigError, match=r"the config file is a YAML mapping"):
        load_config(f)


def test_yaml_syntax_error_names_the_file(tmp_path):
    f = write(tmp_path, "kafka: [unclosed\n")
    with pytest.raises(ConfigError, match=str(f)):
        load_config(f)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'nope.yaml'}: cannot read: No such file or directory$"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("text", "fragment"), [
    ("listen: localhost\n", "listen: 'localhost' is not host:port"),
    ("listen: 'host:99999'\n", "listen: 'host:99999' is not host:port"),
    ("listen: 'host:0'\n", "listen: 'host:0' is not host:port"),
    ("interval: 1m\nhistory: 5m\n", "history: must hold at least 10 intervals"),
])
def test_validate_cross_checks(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: {fragment}"):
        load_config(path)


def test_validate_accepts_ipv6_listen_and_history_of_exactly_ten_intervals():
    c = dataclasses.replace(Config(), listen="[::1]:9745", interval=6.0, history=60.0)
    c.validate()


# --- every number finite and inside its range (issue 12, #5) --------------------------------------------------------


NUMBERS = (int, float, Duration)


def numeric_keys(cls: type, prefix: str = "") -> dict[str, object]:
    """Key path -> default value of every int, float or duration (or list of them) in a config dataclass."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        tp, default = typing.get_type_hints(cls)[f.name], getattr(cls(), f.name)
        if dataclasses.is_dataclass(tp):
            out.update(numeric_keys(tp, f"{prefix}{f.name}."))
        elif typing.get_origin(tp) is dict and dataclasses.is_dataclass(item := typing.get_args(tp)[1]):
            out.update(numeric_keys(item, f"{prefix}{f.name}.*."))  # every key of the mapping shares the ranges
        elif (typing.get_args(tp) or (tp,))[0] in NUMBERS:  # a number or a list of numbers
            out[prefix + f.name] = default
    return out


def test_every_numeric_key_has_a_range_that_holds_its_default():
    keys = numeric_keys(Config)
    assert set(keys) == set(LIMITS), "add the new key's range to config.LIMITS (and drop stale ones)"
    for key, default in keys.items():
        low, high = LIMITS[key]
        assert all(low <= v <= high for v in (default if isinstance(default, list) else [default] if default is not None else [])), key


@pytest.mark.parametrize(("text", "message"), [
    ("interval: .nan\n", "interval: nan is out of range (expected from 0.1s to 3600s)"),
    ("interval: .inf\n", "interval: inf is out of range (expected from 0.1s to 3600s)"),
    ("interval: 0.0001\n", "interval: 0.0001 is out of range (expected from 0.1s to 3600s)"),
    ("interval: -5\n", "interval: -5.0 is out of range (expected from 0.1s to 3600s)"),
    ("interval: 0s\n", "interval: 0.0 is out of range (expected from 0.1s to 3600s)"),
    ("interval: " + "9" * 400 + "\n", "interval: inf is out of range (expected from 0.1s to 3600s)"),
    ("signal_window: 0\n", "signal_window: 0.0 is out of range (expected from 1s to 3600s)"),
    ("nics:\n  eth0:\n    speed_mbps: -1\n", "nics.eth0.speed_mbps: -1 is out of range (expected from 0 to 1e+07)"),
    ("nics:\n  eth0:\n    speed: 1\n", "nics.eth0.speed: unknown key (expected one of speed_mbps)"),
    ("kafka:\n  expected_brokers: [1, -2]\n", "kafka.expected_brokers[1]: -2 is out of range (expected from 0 to 2.14748e+09)"),
    ("probe:\n  latency_buckets: [.nan, 1]\n", "probe.latency_buckets[0]: nan is out of range (expected from 0.0001 to 86400)"),
    ("probe:\n  sla: -.inf\n", "probe.sla: -inf is out of range (expected from 0.1 to 3600)"),
    ("processes:\n  top_n: 1.0e+20\n", "processes.top_n: expected an integer, got 1e+20"),
    ("processes:\n  top_n: 100000000000000000000\n",
     "processes.top_n: 100000000000000000000 is out of range (expected from 0 to 1000)"),
    ("processes:\n  top_n: -1\n", "processes.top_n: -1 is out of range (expected from 0 to 1000)"),
    ("kafka:\n  timeout: 1000000h\n", "kafka.timeout: 3600000000.0 is out of range (expected from 0.1s to 300s)"),
])
def test_numbers_out_of_range_name_the_key_and_the_range(tmp_path, text, message):
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(info.value) == f"{f}: {message}"


def test_flags_get_the_same_ranges():
    with pytest.raises(ConfigError, match=r"^interval: 0\.0001 is out of range \(expected from 0\.1s to 3600s\)$"):
        load_config(None, {"interval": 0.0001})


def test_a_key_without_a_range_must_still_be_finite(monkeypatch):
    monkeypatch.delitem(LIMITS, "probe.sla")
    with pytest.raises(ConfigError, match=r"^probe\.sla: nan is out of range \(expected a finite number\)$"):
        load_config(None, {"probe.sla": float("nan")})
    assert load_config(None, {"probe.sla": 1e9}).probe.sla == 1e9


def test_strings_are_bounded(tmp_path):
    f = write(tmp_path, "kafka:\n  bootstrap_servers: " + "b" * 5000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(f))}: kafka\.bootstrap_servers: 'b{{36}}\.\.\. is 5000 "
                       r"characters long \(at most 4096\)$"):
        load_config(f)


def test_probe_acks_quoted_not_pasted(tmp_path):
    f = write(tmp_path, "probe:\n  acks: " + "a" * 4000 + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(info.value) == f"{f}: probe.acks: '{'a' * 76}... is not all, -1, 0 or 1"


@pytest.mark.parametrize(("text", "message"), [
    ("diagnosis:\n  max_subjects_per_rule: -1\n",
     "diagnosis.max_subjects_per_rule: -1 is out of range (expected from 0 to 1e+06)"),
    ("diagnosis:\n  max_subjects_per_rule: 2000000\n",
     "diagnosis.max_subjects_per_rule: 2000000 is out of range (expected from 0 to 1e+06)"),
    ("diagnosis:\n  max_subjects_per_rule: fifty\n", "diagnosis.max_subjects_per_rule: expected an integer, got 'fifty'"),
    ("diagnosis:\n  max_subject_per_rule: 5\n",
     "diagnosis.max_subject_per_rule: unknown key (expected one of max_subjects_per_rule)"),
])
def test_max_subjects_per_rule_is_checked_at_start_with_its_key(tmp_path, text, message):
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(info.value) == f"{f}: {message}"


def test_max_subjects_per_rule_defaults_to_50_and_takes_0_for_every_subject(tmp_path):
    assert load_config().diagnosis.max_subjects_per_rule == 50
    assert load_config(write(tmp_path, "diagnosis:\n  max_subjects_per_rule: 0\n")).diagnosis.max_subjects_per_rule == 0
