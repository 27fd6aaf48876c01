"""Which collectors a config turns on, the rule catalog it names, and replaying a recording through them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from kdiag.analysis.catalog import Rule, default_rules_dir, load_catalog
from kdiag.collectors import Collector
from kdiag.collectors.host.block import BlockCollector
from kdiag.collectors.host.blockerrors import BlockErrorsCollector
from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.collectors.host.cgroup_cpu import CgroupCpuCollector
from kdiag.collectors.host.diskstats import DiskstatsCollector
from kdiag.collectors.host.interrupts import InterruptsCollector
from kdiag.collectors.host.jbd2 import Jbd2Collector
from kdiag.collectors.host.loadavg import LoadavgCollector
from kdiag.collectors.host.loadgen import LoadgenCollector
from kdiag.collectors.host.meminfo import MeminfoCollector
from kdiag.collectors.host.mounts import MountsCollector
from kdiag.collectors.host.netclass import NetclassCollector
from kdiag.collectors.host.netdev import NetdevCollector
from kdiag.collectors.host.netstat import NetstatCollector
from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.collectors.host.schedstat import SchedstatCollector
from kdiag.collectors.host.softirqs import SoftirqsCollector
from kdiag.collectors.host.softnet import SoftnetCollector
from kdiag.collectors.host.stat import StatCollector
from kdiag.collectors.host.statvfs import StatvfsCollector
from kdiag.collectors.host.sysctl import SysctlCollector
from kdiag.collectors.host.vmstat import VmstatCollector
from kdiag.config.probe import PROBE_GROUP_PREFIX
from kdiag.config.settings import Config, Duration
from kdiag.recording.recording import Recording
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State


def host_collectors(config: Config) -> list[Collector]:
    """One collector per /proc or /sys source; the broker processes' own files through the processes collector's
    table, which reads the brokers every cycle."""
    processes = ProcessesCollector(config.processes.top_n, config.processes.log_dirs, cmdline=config.processes.cmdline,
                                   broker_user=config.kafka.broker_user)
    brokers = BrokerPids(table=processes.table)
    return [
        StatCollector(), InterruptsCollector(), SoftirqsCollector(), SoftnetCollector(), NetdevCollector(),
        NetstatCollector(), NetclassCollector({n: c.speed_mbps for n, c in config.nics.items() if c.speed_mbps}),
        DiskstatsCollector(), BlockCollector(), VmstatCollector(),
        MeminfoCollector(), LoadavgCollector(), SysctlCollector(), MountsCollector(), StatvfsCollector(), processes,
        LoadgenCollector(config.loadgen.stats_dir), BlockErrorsCollector(), Jbd2Collector(),
        CgroupCpuCollector(brokers), SchedstatCollector(brokers),
    ]


def admin_collector(config: Config) -> Collector:
    """The AdminClient collector; with no bootstrap servers it can only replay recordings."""
    from kdiag.collectors.kafka.admin import KafkaAdminCollector

    kafka = config.kafka
    return KafkaAdminCollector(kafka.bootstrap_servers, kafka.timeout, kafka.max_partition_series,
                               kafka.client_settings, kafka.expected_brokers, partition_series=kafka.partition_series,
                               group_series=kafka.group_series, configs_interval=kafka.configs_interval,
                               quiet_groups_interval=kafka.quiet_groups_interval, local_broker=kafka.local_broker_id,
                               own_groups=own_groups(config))


def own_groups(config: Config) -> tuple[str, ...]:
    """kdiag's own consumer groups: the election's and the probes' (every daemon's probe group, by its prefix)."""
    return (config.kafka.coordination_group, config.probe.group_id or f"{PROBE_GROUP_PREFIX}*")


def jmx_collector(config: Config) -> Collector:
    """The broker JMX collector (imported only when used: it drives a JVM)."""
    from kdiag.kafka.jmx_auth import JmxAuth
    from kdiag.collectors.kafka.jmx import KafkaJmxCollector

    return KafkaJmxCollector(config.kafka.jmx, config.kafka.timeout, config.kafka.jmx_interval,
                             classpath=config.kafka.jmx_classpath or None, auth=JmxAuth.from_config(config.kafka))


KAFKA_SOURCES = {"admin": admin_collector, "jmx": jmx_collector}


def kafka_collectors(config: Config, sources: set[str] | None = None) -> dict[str, Collector]:
    """Kafka collectors by source (as kafka.json names them), for the given sources or what the config turns on."""
    if sources is None:
        sources = ({"admin"} if config.kafka.bootstrap_servers else set()) | ({"jmx"} if config.kafka.jmx else set())
    return {source: make(config) for source, make in KAFKA_SOURCES.items() if source in sources}


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
