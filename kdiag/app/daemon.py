"""`kdiag run`: runs the services build() wired, live or over a recording, until stopped; reloads on request."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from kdiag.analysis.catalog import CatalogError
from kdiag.app.background import Asked
from kdiag.app.build import Services, stale_after
from kdiag.app.wiring import kafka_deadline, load_rules
from kdiag.config.settings import Config, ConfigError
from kdiag.core.root import SnapshotRoot
from kdiag.core.sample import Sample, sample
from kdiag.kafka import coordination
from kdiag.kafka.coordination import Reporting
from kdiag.kafka.coordination_process import HELP as COORDINATION_HELP
from kdiag.probe import process as probe_process
from kdiag.probe.metrics import HELP as PROBE_HELP
from kdiag.runtime.pipeline import Health, State

log = logging.getLogger(__name__)

# After SIGTERM/SIGINT, whatever still hangs (a collector thread, a Kafka client) gets this long before os._exit.
SHUTDOWN_GRACE_SECONDS = 5.0
# Config keys a reload applies; the others need a restart.
RELOADABLE = ("rules_dirs", "interval", "signal_window", "collector_timeout")
# The longest a child's asking may take before it counts as not answering.
ANSWER_TIMEOUT = max(probe_process.ANSWER_TIMEOUT, coordination.ANSWER_TIMEOUT)


class Daemon:
    """`kdiag run`: collection on a schedule, the exporter serving the last published state."""

    def __init__(self, services: Services, reload_config: Callable[[], Config] | None = None):
        self.services = services
        self.config = services.config
        self.recording = services.recording
        self.reload_config = reload_config
        self.rules = services.rules
        self.collectors = services.collectors
        self.background = services.background
        self.pipeline = services.pipeline
        self.state_file = services.state_file
        self.published = services.published
        self.exporter = services.exporter
        self.probe = services.probe
        self.coordinator = services.coordinator
        self.pusher = services.pusher
        # The children's answers are asked for on jobs of their own: a hung or restarting child never holds a cycle.
        self.probe_status = Asked(self.probe.status) if self.probe else None
        self.coordination_poll = (Asked(self.coordinator.poll) if self.coordinator and self.coordinator.worker
                                  else None)
        self.page = services.page
        self._live_root = services.root
        self.scheduler = BackgroundScheduler(timezone="UTC")
        # Plain flags, not Events: signal handlers set them, and an Event's lock could deadlock its own thread.
        self._stop = False
        self._reload = False
        self._handed: dict[int, list[Sample]] = {}  # per background job, the samples last handed to the pipeline
        self._last_ok: dict[str, float] = {}  # when the probe and the election last worked
        self._replay: Iterator[SnapshotRoot] | None = None
        self._replayed_until = 0.0  # the time of the last snapshot replayed

    def start(self) -> None:
        """Start collecting and serving; returns at once."""
        self.exporter.start()
        interval = self._interval()
        for i, background in enumerate(self.background):
            self.scheduler.add_job(background.run, "interval", seconds=background.every, id=f"background-{i}",
                                   max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        for name, asked in (("probe-status", self.probe_status), ("coordination-poll", self.coordination_poll)):
            if asked:
                self.scheduler.add_job(asked.run, "interval", seconds=interval, id=name, max_instances=1,
                                       coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.add_job(self.step, "interval", seconds=interval, id="collect", max_instances=1,
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
        return {**{k: v for c in sets for k, v in c.help().items()}, **(PROBE_HELP if self.probe else {}),
                **(COORDINATION_HELP if self.coordination_poll else {})}

    def _publish(self, state: State) -> None:
        if self.coordinator:
            answered = self.coordination_poll.fresh(self._answer_within())[0] if self.coordination_poll else True
            # A coordination process that stopped answering may have lost the group: never report on its word.
            state.reporting = self.coordinator.reporting() if answered is not None else Reporting(False, None)
            if self.services.handover:
                self.services.handover.step(state, self.pipeline.engine, self.coordinator)
        self.published.publish(state, self._help())
        if drawn := self.page.update(state, self._interval()):
            self.published.publish_page(*drawn)
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
            self._hand(background, got, samples, carried)
            health.update(h)
        if self.probe_status:
            # The probe runs in its own process; its job hands over its counters.
            status, age = self.probe_status.fresh(self._answer_within())
            ok, error, got = status or (False, self._silent("the probe process", age), [sample("kdiag_probe_up", 0.0)])
            self._hand(self.probe_status, got, samples, carried)
            health["probe"] = self._service_health("probe", ok, error)
        if self.coordination_poll:
            polled, age = self.coordination_poll.fresh(self._answer_within())
            health["coordination"] = self._service_health(
                "coordination", *(polled or (False, self._silent("the coordination process", age))))
            assert self.coordinator is not None  # polled only with a coordination process
            self._hand(self.coordination_poll, self.coordinator.samples, samples, carried)
        return samples, carried, health

    def _hand(self, source: object, got: list[Sample], samples: list[list[Sample]],
              carried: list[list[Sample]]) -> None:
        """Add a job's samples to the cycle: as new, or as carried when it is the list an earlier cycle already got
        (each run makes a new list: the same list again means nothing new since)."""
        (carried if got is self._handed.get(id(source)) else samples).append(got)
        self._handed[id(source)] = got

    def _answer_within(self) -> float:
        """How old a child's last answer may be: two cycles and the time its asking may take."""
        return 2 * self._interval() + ANSWER_TIMEOUT

    @staticmethod
    def _silent(what: str, age: float) -> str:
        return f"{what} has not answered for {age:.0f}s"

    def _service_health(self, name: str, ok: bool, error: str) -> Health:
        if ok:
            self._last_ok[name] = self._live_root.now()
        return Health(ok, 0.0, self._last_ok.get(name), error)

    def step(self) -> None:
        """One cycle: collect (or take the recording's next snapshot), evaluate, publish."""
        if self.recording:
            self._replay_step()
        else:
            self._live_step()

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
            # Never before the last snapshot replayed: stepped faster than its interval, time still only goes forward.
            start = max(time.time(), self._replayed_until + self._interval())
            self._replay = self.recording.roots(start - next(self.recording.roots()).now())
            root = next(self._replay)
        self._replayed_until = root.now()
        self._publish(self.pipeline.step(root))

    def _interval(self) -> float:
        return self.recording.interval if self.recording else self.config.interval

    def _stale_after(self) -> float:
        return stale_after(self.config, self._interval())

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
