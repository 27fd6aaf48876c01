"""Which collectors a config turns on, the rule catalog it names, and replaying a recording through them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from kdiag.analysis.catalog import Rule, default_rules_dir, load_catalog
from kdiag.collectors import Collector
from kdiag.collectors.registry import build_collectors, discover, switches
from kdiag.config.settings import Config, Duration
from kdiag.recording.recording import Recording
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State


def host_collectors(config: Config) -> list[Collector]:
    """The host collectors config turns on, one per /proc or /sys source."""
    registered = discover()
    return build_collectors(config, [n for n, on in switches(config).items() if on and not registered[n].kafka_source])


def kafka_collectors(config: Config, sources: set[str] | None = None) -> dict[str, Collector]:
    """Kafka collectors by source (as kafka.json names them): those config turns on, or of the given sources those
    config does not switch off."""
    on = switches(config)
    kafka = {r.kafka_source: r.name for r in discover().values() if r.kafka_source}
    names = {source: name for source, name in kafka.items()
             if (on[name] if sources is None else source in sources and config.collectors.get(name, True))}
    built = {c.name: c for c in build_collectors(config, names.values())}
    return {source: built[name] for source, name in names.items()}


def recorded_collectors(config: Config, every: float) -> list[Collector]:
    """What `kdiag record` and live `kdiag diagnose` run: the host collectors, and Kafka's when configured. Each
    snapshot (`every` seconds apart) reads Kafka, so JmxTool polls as often (at most every kafka.jmx_interval)."""
    kafka = dataclasses.replace(config.kafka, jmx_interval=Duration(min(every, config.kafka.jmx_interval)))
    return host_collectors(config) + list(kafka_collectors(dataclasses.replace(config, kafka=kafka)).values())


def replay_collectors(config: Config, recording: Recording) -> list[Collector]:
    """The host collectors and the Kafka ones whose state the recording holds."""
    return host_collectors(config) + list(kafka_collectors(config, recording.kafka_sources()).values())


def kafka_deadline(config: Config) -> float:
    """The Kafka collectors' deadline: they stop themselves after kafka.timeout, so they are hung only well past it."""
    return max(config.collector_timeout, config.kafka.timeout + 5.0)


def load_rules(config: Config) -> list[Rule]:
    """The configured rule dirs, or the catalog shipped with kdiag; CatalogError on any broken rule."""
    return load_catalog([Path(d) for d in config.rules_dirs] or [default_rules_dir()])


def replay(recording: Recording, config: Config, on_step: Callable[[State], None] | None = None) -> State:
    """Run every snapshot of a recording through a fresh pipeline (each state to on_step); the last is the diagnosis."""
    collectors = CollectorSet(replay_collectors(config, recording))
    pipeline = Pipeline(collectors, load_rules(config), recording.host, config.history, config.signal_window,
                        config.kafka.cluster_name, config.kafka.local_broker_id)
    state = None
    for root in recording.roots():
        state = pipeline.step(root)
        if on_step:
            on_step(state)
    assert state is not None  # a Recording always has at least one snapshot
    return state
