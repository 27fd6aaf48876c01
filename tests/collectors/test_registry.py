"""The collectors' registry: every collector module registers its class, config and flags switch one by name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from tests.collectors.golden import fixture_root

from kdiag.app.wiring import host_collectors, kafka_collectors
from kdiag.cli.main import _config, build_parser, main
from kdiag.collectors import Collector
from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.collectors.registry import PACKAGES, discover, in_order, switches
from kdiag.config.settings import Config, ConfigError, load_config
from kdiag.core.sample import Sample
from kdiag.report.host import host_section
from kdiag.runtime.pipeline import Health, State
from kdiag.serve.exporter import StateCollector


def collector_classes() -> set[str]:
    """The names of the collector classes defined in the collector packages' modules."""
    names = set()
    for package in PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            loaded = importlib.import_module(f"{package}.{module.name}")
            names |= {cls.name for _, cls in inspect.getmembers(loaded, inspect.isclass)
                      if cls.__module__ == loaded.__name__ and Collector in cls.__mro__[1:]}
    return names


def test_every_collector_class_is_registered_under_its_name():
    registered = discover()
    assert set(registered) == collector_classes()
    assert {"diskstats", "processes", "cgroup_cpu", "kafka_admin", "kafka_jmx"} <= set(registered)
    assert {n for n, r in registered.items() if r.kafka_source} == {"kafka_admin", "kafka_jmx", "probe"}


def test_the_cycle_runs_collectors_by_name_and_the_broker_readers_after_processes():
    names = [c.name for c in host_collectors(Config())]
    assert names == in_order(names)
    assert names.index("processes") < min(names.index("cgroup_cpu"), names.index("schedstat"))
    rest = [n for n in names if n not in ("processes", "cgroup_cpu", "schedstat")]
    assert rest == sorted(rest)
    assert in_order(["schedstat", "stat"]) == ["schedstat", "stat"]  # processes off: no order to keep


def brokers_of(collectors: list[Collector]) -> list[BrokerPids]:
    return [c.brokers for c in collectors if isinstance(getattr(c, "brokers", None), BrokerPids)]


def test_the_broker_readers_share_one_lookup_over_the_processes_table_or_their_own_scan_without_it():
    collectors = host_collectors(Config())
    processes = next(c for c in collectors if c.name == "processes")
    lookups = brokers_of(collectors)
    assert len(lookups) >= 2 and all(b is lookups[0] for b in lookups)
    assert lookups[0].table is processes.table
    without = brokers_of(host_collectors(Config(collectors={"processes": False})))
    assert len(without) >= 2 and all(b is without[0] for b in without)
    assert without[0].table is None and without[0].trust is not None  # only the brokers the trust rule trusts


def test_switches_are_defaults_unless_the_config_names_them():
    assert switches(Config())["diskstats"] and not switches(Config())["kafka_admin"]
    on = switches(Config(collectors={"diskstats": False, "kafka_admin": True}))
    assert (on["diskstats"], on["kafka_admin"], on["block"]) == (False, True, True)
    assert switches(load_config(overrides={"kafka.bootstrap_servers": "k:9092", "kafka.jmx": ["k:9999"]}))["kafka_jmx"]


def test_an_unknown_collector_in_the_config_is_refused_with_its_key_path_and_the_known_names():
    with pytest.raises(ConfigError, match=r"collectors\.diskstat: unknown collector \(expected one of block, .*diskstats"):
        host_collectors(Config(collectors={"diskstat": False}))


def test_a_switch_must_be_true_or_false(tmp_path):
    path = tmp_path / "kdiag.yaml"
    path.write_text("collectors:\n  diskstats: off-ish\n")
    with pytest.raises(ConfigError, match=r"collectors\.diskstats: expected true or false"):
        load_config(path)


def test_a_switched_off_collector_is_not_built_and_its_series_are_gone():
    root = fixture_root("host-vm2")
    every = [s for c in host_collectors(Config()) for s in c.collect(root)]
    assert any(s.name.startswith("kdiag_disk_read") for s in every)
    collectors = host_collectors(Config(collectors={"diskstats": False}))
    assert "diskstats" not in {c.name for c in collectors}
    assert not any(s.name.startswith("kdiag_disk_read") for c in collectors for s in c.collect(root))


def test_a_replay_runs_the_recorded_kafka_sources_the_config_does_not_switch_off():
    assert set(kafka_collectors(Config(), {"admin", "jmx"})) == {"admin", "jmx"}
    assert set(kafka_collectors(Config(collectors={"kafka_jmx": False}), {"admin", "jmx"})) == {"admin"}
    assert set(kafka_collectors(Config(collectors={"kafka_jmx": True}), {"admin"})) == {"admin"}


def test_flags_override_the_config_file_and_the_last_flag_wins(tmp_path):
    path = tmp_path / "kdiag.yaml"
    path.write_text("collectors:\n  diskstats: false\n  vmstat: false\n")
    args = build_parser().parse_args(["record", "-o", "out", "--config", str(path), "--collector", "diskstats",
                                      "--no-collector", "stat", "--collector", "stat"])
    assert _config(args).collectors == {"diskstats": True, "vmstat": False, "stat": True}


def test_an_unknown_collector_in_the_config_file_stops_any_command_with_the_file_and_key(tmp_path, capsys):
    path = tmp_path / "kdiag.yaml"
    path.write_text("collectors:\n  diskstat: false\n")
    assert main(["rules", "check", "--config", str(path)]) == 2
    assert f"kdiag: {path}: collectors.diskstat: unknown collector (expected one of block, " in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run"], ["record", "-o", "out"], ["diagnose"]])
def test_an_unknown_collector_on_the_command_line_exits_2_naming_the_known_ones(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--no-collector", "diskstat"])
    assert e.value.code == 2
    assert "unknown collector 'diskstat' (expected one of block, " in capsys.readouterr().err


def test_metrics_and_the_page_show_which_collectors_are_off():
    state = State("h", 1.0, [Sample("kdiag_load1", (), 0.5)], {"stat": Health(True)}, {}, [])
    families = StateCollector(state, collectors_enabled={"stat": True, "diskstats": False}).collect()
    enabled = next(f for f in families if f.name == "kdiag_collector_enabled")
    assert {s.labels["collector"]: s.value for s in enabled.samples} == {"diskstats": 0.0, "stat": 1.0}
    assert "<td>diskstats</td><td>off</td>" in host_section(state, off=["diskstats"])
    assert "<td>diskstats</td>" not in host_section(state)
