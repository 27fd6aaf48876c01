"""The drills' watcher: one kdiag pipeline over the target, stepped every CYCLE_SECONDS in a thread."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.app.wiring import kafka_collectors, load_rules
from kdiag.collectors import Collector
from kdiag.collectors.host.brokerpids import BrokerPids
from kdiag.collectors.host.cgroup_cpu import CgroupCpuCollector
from kdiag.collectors.host.cgroup_memory import CgroupMemoryCollector
from kdiag.collectors.host.meminfo import MeminfoCollector
from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.collectors.host.schedstat import SchedstatCollector
from kdiag.collectors.host.stat import StatCollector
from kdiag.collectors.kafka.probe_samples import ProbeSamplesCollector
from kdiag.config.settings import Config, load_config
from kdiag.core.outfile import check_output_dir
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.probe.probe import ProbeService
from kdiag.recording.recording import Recorder
from kdiag.report.html import frozen
from kdiag.runtime.discovery import discover
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.tools.drill.faults import Target

log = logging.getLogger(__name__)

CYCLE_SECONDS = 1.0
SIGNAL_WINDOW_SECONDS = 10.0
JMX_POLL_SECONDS = 2.0
ALERT_INSTANCE = "kdiag-drill"  # the instance label of the drills' alerts


def monitor_config(target: Target) -> Config:
    """The drills' kdiag config: the target's brokers; with target.discover_procfs, the brokers discovery finds over
    that procfs with no config at all, as `kdiag run` finds them (the target only injects the faults)."""
    tuning = {"kafka.timeout": "8s",
              "kafka.configs_interval": "0s",  # the config drills need each change seen at once
              # The daemon's JMX poll (30 s) leaves no row in a 10 s window: rates read 0 and restart `for`.
              "kafka.jmx_interval": f"{JMX_POLL_SECONDS}s"}
    if target.discover_procfs:
        config = discover(load_config(None, {"procfs": target.discover_procfs, **tuning}), Root(target.discover_procfs))
        if not config.kafka.bootstrap_servers:
            raise SystemExit("kdiag: --discover found no brokers to watch (see the broker discovery lines)")
        return config
    return load_config(None, {"kafka.bootstrap_servers": target.bootstrap, "kafka.jmx": target.jmx or None,
                              "processes.log_dirs": target.log_dirs, **tuning,
                              **({"kafka.broker_user": target.broker_user} if target.broker_user else {})})


class Monitor:
    """A kdiag pipeline over the target stepped every CYCLE_SECONDS in a thread; it keeps every state."""

    def __init__(self, target: Target, alertmanager: str = "", record: Path | None = None, thread_waits: bool = False):
        config = monitor_config(target)
        self.root = Root(config.procfs)
        self.rules = load_rules(config)
        # Only the host sources the process rules need: the drills judge the cluster, not this busy machine.
        processes = ProcessesCollector(config.processes.top_n, config.processes.log_dirs,
                                       broker_user=config.kafka.broker_user)
        # The lab brokers' CPU quota and memory limit (broker-throttled, container-memory), their pids from the
        # processes collector's table.
        brokers = BrokerPids(table=processes.table)
        host: list[Collector] = [processes, MeminfoCollector(), StatCollector(), CgroupCpuCollector(brokers),
                                 CgroupMemoryCollector(brokers)]
        if thread_waits:  # the brokers' run-queue wait (broker_threads_waiting), for a benchmark on a loaded host
            host.append(SchedstatCollector(brokers))
        probe = ProbeSamplesCollector(self._probe_samples)
        collectors = CollectorSet(host + list(kafka_collectors(config).values()) + [probe])
        self.pipeline = Pipeline(collectors, self.rules, "drill", window=SIGNAL_WINDOW_SECONDS, collector_timeout=20.0)
        self.states: list[State] = []
        self.probe: ProbeService | None = None  # a drill's synthetic probe, whose samples join each step
        # A short backoff: one slow answer must not hold back an alert that lives only for the signal window.
        self.pusher = AlertPusher(alertmanager, ALERT_INSTANCE, resend_interval=10.0,
                                  backoff_max=2.0) if alertmanager else None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="drill-monitor", daemon=True)
        self.recorder: Recorder | None = None
        if record is not None:
            check_output_dir(record)
            record.mkdir(parents=True)
            # The cluster's and the probe's states only: the host files of this busy machine would make it huge.
            self.recorder = Recorder(record, CYCLE_SECONDS, "drill", files=False)

    def _probe_samples(self) -> list[Sample]:
        probe = self.probe
        return probe.samples() if probe else []

    def _step(self, root: Root) -> State:
        return self.recorder.snapshot(root, self.pipeline.step) if self.recorder else self.pipeline.step(root)

    def _run(self) -> None:
        root = self.root
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                state = self._step(root)
            except Exception as e:  # one failed step must not end the watch
                log.warning("drill monitor step failed: %s", e)
            else:
                with self._lock:
                    self.states.append(frozen(state))
                if self.pusher:
                    self.pusher.offer(state)
            self._stop.wait(max(0.0, CYCLE_SECONDS - (time.monotonic() - start)))

    def use_probe(self, probe: ProbeService | None) -> None:
        """Collect this probe's samples at each step from the next on (None: no probe's)."""
        self.probe = probe

    def start(self) -> None:
        if self.pusher:
            self.pusher.start()
        self._thread.start()

    def stop(self) -> None:
        """End the watch and the collectors' own processes (JmxTool readers)."""
        self._stop.set()
        self._thread.join(30)
        if self.pusher:
            self.pusher.stop()
        self.pipeline.collectors.close()

    def since(self, t: float) -> list[State]:
        with self._lock:
            return [s for s in self.states if s.time >= t]

    def latest(self) -> State | None:
        with self._lock:
            return self.states[-1] if self.states else None
