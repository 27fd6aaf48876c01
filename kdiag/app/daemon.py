"""Wires collectors, pipeline, rules and exporter together for `kdiag run`, live or from a recording."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from kdiag.collectors import Collector
from kdiag.collectors.host.block import BlockCollector
from kdiag.collectors.host.diskstats import DiskstatsCollector
from kdiag.collectors.host.interrupts import InterruptsCollector
from kdiag.collectors.host.loadavg import LoadavgCollector
from kdiag.collectors.host.loadgen import LoadgenCollector
from kdiag.collectors.host.meminfo import MeminfoCollector
from kdiag.collectors.host.mounts import MountsCollector
from kdiag.collectors.host.netclass import NetclassCollector
from kdiag.collectors.host.netdev import NetdevCollector
from kdiag.collectors.host.netstat import NetstatCollector
from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.collectors.host.softirqs import SoftirqsCollector
from kdiag.collectors.host.softnet import SoftnetCollector
from kdiag.collectors.host.stat import StatCollector
from kdiag.collectors.host.statvfs import StatvfsCollector
from kdiag.collectors.host.sysctl import SysctlCollector
from kdiag.collectors.host.vmstat import VmstatCollector
from kdiag.config.settings import Config, ConfigError, Duration
from kdiag.analysis.catalog import CatalogError, Rule, default_rules_dir, load_catalog
from kdiag.serve.exporter import Published
from kdiag.runtime.pipeline import CollectorSet, Health, Pipeline, State
from kdiag.probe.metrics import HELP as PROBE_HELP
from kdiag.probe.process import ProbeProcess
from kdiag.recording.recording import Recording
from kdiag.core.root import Root, SnapshotRoot
from kdiag.core.sample import Sample
from kdiag.kafka.coordination import Member
from kdiag.analysis.statefile import StateFile, state_path
from kdiag.serve.webserver import Exporter

log = logging.getLogger(__name__)

# After SIGTERM/SIGINT, whatever still hangs (a collector thread, a Kafka client) gets this long before os._exit.
SHUTDOWN_GRACE_SECONDS = 5.0
# An adaptive background run taking t seconds waits at least STRETCH * t (at most MAX_STRETCH intervals) for the next,
# and one costing c CPU seconds (its child process's included) at least c / CPU_BUDGET: a quarter percent of one core.
STRETCH = 20.0
CPU_BUDGET = 0.0025
# 4 x 15 s keeps two fetches inside the 120 s over which lag growth is measured.
MAX_STRETCH = 4.0
# Config keys a reload applies; the others need a restart.
RELOADABLE = ("rules_dirs", "interval", "signal_window", "collector_timeout")


def host_collectors(config: Config) -> list[Collector]:
    """One collector per /proc or /sys source."""
    return [
        StatCollector(), InterruptsCollector(), SoftirqsCollector(), SoftnetCollector(), NetdevCollector(),
        NetstatCollector(), NetclassCollector({n: c.speed_mbps for n, c in config.nics.items() if c.speed_mbps}),
        DiskstatsCollector(), BlockCollector(), VmstatCollector(),
        MeminfoCollector(), LoadavgCollector(), SysctlCollector(), MountsCollector(), StatvfsCollector(),
        ProcessesCollector(config.processes.top_n, config.processes.log_dirs, cmdline=config.processes.cmdline),
        LoadgenCollector(config.loadgen.stats_dir),
    ]


def admin_collector(config: Config) -> Collector:
    """The AdminClient collector; with no bootstrap servers it can only replay recordings."""
    from kdiag.collectors.kafka.admin import KafkaAdminCollector

    kafka = config.kafka
    return KafkaAdminCollector(kafka.bootstrap_servers, kafka.timeout, kafka.max_partition_series,
                               kafka.client_settings, kafka.expected_brokers, partition_series=kafka.partition_series,
                               group_series=kafka.group_series, configs_interval=kafka.configs_interval,
                               quiet_groups_interval=kafka.quiet_groups_interval)


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


class Background:
    """Collectors on their own schedule (AdminClient, JMX): each cycle merges their last good samples."""

    def __init__(self, collectors: list[Collector], root: Root, every: float, timeout: float, adaptive: bool = False):
        self.collectors = CollectorSet(collectors, timeout)
        self.timeout = timeout
        self.root = root
        self.every = every
        self.adaptive = adaptive
        self.period = every  # every, or longer (adaptive) while runs take long
        self._next = 0.0
        self._runs = 0
        self._samples: list[Sample] = []
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def run(self) -> None:
        """Collect now unless a slow last run stretched the period; a failed collector's samples are dropped, not kept."""
        start = time.monotonic()
        if self.adaptive and start < self._next:
            return
        if not any(c.ready() for c in self.collectors.collectors):
            with self._lock:  # nothing new to collect (no JmxTool row since): the job is alive, its samples stay
                self._at = start
            return
        samples = self.collectors.run(self.root)
        self._runs += 1
        # A fetch that takes long or costs much (tens of thousands of partitions, a thousand groups) spaces out the
        # next ones so Kafka work stays a small share of the host; the job still fires every `every` and skips until
        # then. The first run is left out: it pays for connecting and reading every config. A failed run is retried
        # at the pace.
        if self.adaptive and self._runs > 1:
            took = time.monotonic() - start
            health = self.collectors.health.values()
            cost = sum(h.cpu for h in health)
            stretched = min(max(self.every, took * STRETCH, cost / CPU_BUDGET), MAX_STRETCH * self.every)
            self.period = stretched if all(h.success for h in health) else self.every
        self._next = start + self.period - min(1.0, self.every / 2)
        with self._lock:
            self._samples, self._at = samples, time.monotonic()

    def latest(self) -> tuple[list[Sample], dict[str, Health]]:
        """The last samples and the health of each collector; none, and failed, when the job has not run for long."""
        with self._lock:
            samples, health = self._samples, {k: dataclasses.replace(h) for k, h in self.collectors.health.items()}
            age = time.monotonic() - self._at
        if age <= 2 * self.period + self.timeout:
            return samples, health
        for h in health.values():
            h.success, h.error = False, f"stale: its job last completed {age:.0f}s ago"
        return [], health


class Daemon:
    """`kdiag run`: collection on a schedule, the exporter serving the last published state."""

    def __init__(self, config: Config, recording: Recording | None = None,
                 reload_config: Callable[[], Config] | None = None):
        self.config = config
        self.recording = recording
        self.reload_config = reload_config
        self.rules = load_rules(config)
        live_root = Root(config.procfs, config.sysfs)
        self.collectors = CollectorSet(replay_collectors(config, recording) if recording else host_collectors(config),
                                       config.collector_timeout)
        self.background: list[Background] = []
        if not recording:
            # Kafka answers slower than /proc: its collectors run on their own schedule, merged each cycle. JmxTool
            # polls every kafka.jmx_interval by itself; its job looks each cycle whether a row came (ready()).
            every = {"admin": config.kafka.interval, "jmx": config.interval}
            for source, collector in kafka_collectors(config).items():
                self.background.append(Background([collector], live_root, every[source], kafka_deadline(config),
                                                  adaptive=source == "admin"))
        host = recording.host if recording else socket.gethostname()
        self.pipeline = Pipeline(self.collectors, self.rules, host, config.history, config.signal_window,
                                 config.kafka.cluster_name, config.kafka.local_broker_id)
        path = state_path(config.state_dir, replay=recording is not None)
        self.state_file = StateFile(path, host) if path else None
        if self.state_file:
            self.pipeline.restore(self.state_file.load(self.rules, time.time()))
        self.published = Published(self._stale_after(), config.kafka.max_series, self._interval())
        self.exporter = Exporter(config.listen, self.published, config.web_config)
        self.scheduler = BackgroundScheduler(timezone="UTC")
        # Plain flags, not Events: signal handlers set them, and an Event's lock could deadlock its own thread.
        self._stop = False
        self._reload = False
        self._live_root = live_root
        self._handed: dict[int, list[Sample]] = {}  # per background job, the samples last handed to the pipeline
        # The probe's and the election's librdkafka clients live in child processes: their crash costs that source.
        self.probe = None
        self._last_ok: dict[str, float] = {}  # when the probe and the election last worked
        if config.kafka.bootstrap_servers and config.probe.enabled and not recording:
            self.probe = ProbeProcess(config.kafka.bootstrap_servers, config.probe, host, config.kafka.client_settings)
        self.coordinator = None
        if config.kafka.bootstrap_servers and not recording:
            from kdiag.kafka.coordination import CoordinatorProcess

            k = config.kafka
            self.coordinator = CoordinatorProcess(k.bootstrap_servers, k.client_settings, Member(host, k.local_broker_id),
                                                  k.coordination_topic, k.coordination_group, k.cluster_scope, k.timeout)
        self.pusher = None
        if config.alertmanager.url:
            from kdiag.alerting.alertmanager import AlertPusher

            am = config.alertmanager
            self.pusher = AlertPusher(am.url, host, am.resend_interval, am.timeout, basic_auth=am.basic_auth,
                                      authorization=am.authorization, tls_config=am.tls_config)
        self._replay: Iterator[SnapshotRoot] | None = None

    def start(self) -> None:
        """Start collecting and serving; returns at once."""
        self.exporter.start()
        interval = self._interval()
        step = self._replay_step if self.recording else self._live_step
        for i, background in enumerate(self.background):
            self.scheduler.add_job(background.run, "interval", seconds=background.every, id=f"background-{i}",
                                   max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.add_job(step, "interval", seconds=interval, id="collect", max_instances=1,
                               coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.start()
        threading.Thread(target=self._watchdog, name="shutdown-watchdog", daemon=True).start()
        if self.probe:
            self.probe.start()
        if self.coordinator:
            self.coordinator.start()
        if self.pusher:
            self.pusher.start()
        log.info("kdiag serving on %s (every %.3gs, %d rules)", self.config.listen, interval, len(self.rules))

    def _help(self) -> dict[str, str]:
        # Asked each cycle, not copied at start: meminfo names its fields' HELP only once it has read them.
        sets = [self.collectors, *(b.collectors for b in self.background)]
        return {**{k: v for c in sets for k, v in c.help().items()}, **(PROBE_HELP if self.probe else {})}

    def _publish(self, state: State) -> None:
        if self.coordinator:
            state.reporting = self.coordinator.reporting()
        self.published.publish(state, self._help())
        if self.state_file:
            self.state_file.save(state.diagnoses)
        if self.pusher:
            self.pusher.offer(state)

    def _extra(self) -> tuple[list[list[Sample]], list[list[Sample]], dict[str, Health]]:
        """Samples gathered off the cycle: new lists, batches an earlier cycle already added (carried), and health."""
        samples: list[list[Sample]] = []
        carried: list[list[Sample]] = []
        health: dict[str, Health] = {}
        for background in self.background:
            got, h = background.latest()
            # Each run makes a new list: the same list again means no fetch since the last cycle.
            if got is self._handed.get(id(background)):
                carried.append(got)
            else:
                samples.append(got)
                self._handed[id(background)] = got
            health.update(h)
        if self.probe:
            # The probe runs in its own process; here it only hands over its counters.
            ok, error, got = self.probe.status()
            samples.append(got)
            health["probe"] = self._service_health("probe", ok, error)
        if self.coordinator and self.coordinator.worker:
            health["coordination"] = self._service_health("coordination", *self.coordinator.poll())
        return samples, carried, health

    def _service_health(self, name: str, ok: bool, error: str) -> Health:
        if ok:
            self._last_ok[name] = self._live_root.now()
        return Health(ok, 0.0, self._last_ok.get(name), error)

    def _live_step(self) -> None:
        samples, carried, health = self._extra()
        self._publish(self.pipeline.step(self._live_root, samples, health, carried))

    def _replay_step(self) -> None:
        # Loop over the recording with times shifted so it reads as live, for demos and integration tests.
        assert self.recording is not None  # this job runs only over a recording
        root = next(self._replay, None) if self._replay else None
        if root is None:
            if self._replay is not None:
                # Counters jump back to the recording's start: rates across the loop would be nonsense.
                self.pipeline.restart_history()
            self._replay = self.recording.roots(time.time() - next(self.recording.roots()).now())
            root = next(self._replay)
        self._publish(self.pipeline.step(root))

    def _interval(self) -> float:
        return self.recording.interval if self.recording else self.config.interval

    def _stale_after(self) -> float:
        return 3 * self._interval() + self.config.collector_timeout

    def serve_forever(self) -> None:
        """Start, then reload on request_reload() (SIGHUP) until stop() (SIGTERM/SIGINT)."""
        self.start()
        while not self._stop:
            if self._reload:
                self._reload = False
                self.reload()
            time.sleep(0.5)
        self.scheduler.shutdown(wait=False)
        if self.coordinator:
            self.coordinator.stop()  # leaves the group: another daemon takes the cluster-scope diagnoses over at once
        for background in self.background:
            background.collectors.close()
        if self.probe:
            self.probe.stop()
        if self.pusher:
            self.pusher.stop()
        self.exporter.stop()

    def stop(self) -> None:
        """Ask serve_forever to return (safe in a signal handler)."""
        self._stop = True

    def request_reload(self) -> None:
        """Ask serve_forever to reload the config and rules (safe in a signal handler; a burst reloads once or twice)."""
        self._reload = True

    def _watchdog(self) -> None:
        while not self._stop:
            time.sleep(1.0)
        time.sleep(SHUTDOWN_GRACE_SECONDS)
        # Logging could wait on a lock a hung thread holds: write the line directly.
        os.write(2, f"kdiag: still stopping after {SHUTDOWN_GRACE_SECONDS:g}s (something hangs): exiting now\n".encode())
        os._exit(0)

    def reload(self) -> None:
        """Re-read the config file and the rules; a broken one is refused with one log line and the old one stays."""
        try:
            config = self.reload_config() if self.reload_config else self.config
            rules = load_rules(config)
        except CatalogError as e:
            log.error("reload refused, the running rules stay: %s", "; ".join(map(str, e.errors)))
            return
        except ConfigError as e:
            log.error("reload refused, the running config stays: %s", e)
            return
        except Exception as e:  # a reload never takes the daemon down
            log.error("reload refused (%s: %s)", type(e).__name__, e)
            return
        self.pipeline.replace_rules(rules)
        self.rules = rules
        old, self.config = self.config, config
        self.pipeline.window = config.signal_window
        self.collectors.timeout = config.collector_timeout
        for background in self.background:
            background.collectors.timeout = kafka_deadline(config)
        if not self.recording and config.interval != old.interval:
            self.scheduler.reschedule_job("collect", trigger="interval", seconds=config.interval)
        self.published.stale_after = self._stale_after()
        self.published.interval = self._interval()
        changed = [f.name for f in dataclasses.fields(Config) if getattr(old, f.name) != getattr(config, f.name)]
        later = [name for name in changed if name not in RELOADABLE]
        log.info("reloaded: %d rules%s", len(rules),
                 f"; changed {', '.join(later)}: takes effect at the next restart" if later else "")
