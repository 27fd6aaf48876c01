"""`kdiag run`: runs the services build() wired, live or over a recording, until stopped; reloads on request."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from kdiag.analysis.catalog import CatalogError
from kdiag.app.background import Asked
from kdiag.app.build import Services, rebuild
from kdiag.app.wiring import load_rules
from kdiag.config.settings import Config, ConfigError
from kdiag.core.root import SnapshotRoot
from kdiag.core.sample import Sample
from kdiag.families.probe import PROBE_UP
from kdiag.kafka import coordination
from kdiag.kafka.coordination import Reporting
from kdiag.probe import process as probe_process
from kdiag.runtime.pipeline import Health, State

log = logging.getLogger(__name__)

# After SIGTERM/SIGINT, whatever still hangs (a collector thread, a Kafka client) gets this long before os._exit.
SHUTDOWN_GRACE_SECONDS = 5.0
# Config keys a reload applies; the others need a restart.
RELOADABLE = ("rules_dirs", "interval", "signal_window", "collector_timeout")
# The longest a child's asking may take before it counts as not answering.
ANSWER_TIMEOUT = max(probe_process.ANSWER_TIMEOUT, coordination.ANSWER_TIMEOUT)


def _job() -> dict[str, object]:
    """A job's scheduling: first run now, one at a time, the runs missed while it ran or the host stalled made one."""
    # misfire_grace_time None: a run whose time passed while the whole host stalled (APScheduler's default allows
    # 1 s) still runs when the scheduler wakes, instead of waiting out a second interval with nothing published.
    return {"max_instances": 1, "coalesce": True, "misfire_grace_time": None, "next_run_time": datetime.now(UTC)}


class Daemon:
    """`kdiag run`: collection on a schedule, the exporter serving the last published state."""

    def __init__(self, services: Services, reload_config: Callable[[], Config] | None = None):
        self.services = services
        self.reload_config = reload_config
        probe, coordinator = services.probe, services.coordinator
        # The children's answers are asked for on jobs of their own: a hung or restarting child never holds a cycle.
        self.probe_status = Asked(probe.status) if probe else None
        self.coordination_poll = Asked(coordinator.poll) if coordinator and coordinator.worker else None
        self.scheduler = BackgroundScheduler(timezone="UTC")
        # Plain flags, not Events: signal handlers set them, and an Event's lock could deadlock its own thread.
        self._stop = False
        self._reload = False
        self._handed: dict[int, list[Sample]] = {}  # per background job, the samples last handed to the pipeline
        self._last_ok: dict[str, float] = {}  # when the probe and the election last worked
        self._replay: Iterator[SnapshotRoot] | None = None
        self._replayed_until = 0.0  # the time of the last snapshot replayed
        # A reload (main thread) swaps the services between two cycles (collection thread), never during one.
        self._cycle = threading.Lock()

    def start(self) -> None:
        """Start collecting and serving; returns at once."""
        self.services.exporter.start()
        interval = self._interval()
        for i, background in enumerate(self.services.background):
            self.scheduler.add_job(background.run, "interval", seconds=background.every, id=f"background-{i}", **_job())
        for name, asked in (("probe-status", self.probe_status), ("coordination-poll", self.coordination_poll)):
            if asked:
                self.scheduler.add_job(asked.run, "interval", seconds=interval, id=name, **_job())
        self.scheduler.add_job(self.step, "interval", seconds=interval, id="collect", **_job())
        self.scheduler.start()
        threading.Thread(target=self._watchdog, name="shutdown-watchdog", daemon=True).start()
        if self.services.probe:
            self.services.probe.start()
        if self.services.coordinator:
            self.services.coordinator.start()
        if self.services.pusher:
            self.services.pusher.start()
        log.info("kdiag serving on %s (every %.3gs, %d rules)", self.services.config.listen, interval,
                 len(self.services.rules))

    def _publish(self, state: State) -> None:
        services = self.services
        if services.coordinator:
            answered = self.coordination_poll.fresh(self._answer_within())[0] if self.coordination_poll else True
            # A coordination process that stopped answering may have lost the group: never report on its word.
            state = replace(state, reporting=services.coordinator.reporting() if answered is not None
                            else Reporting(False, None))
            if services.handover:
                state, judged = services.handover.step(state, services.pipeline.judged, services.rules,
                                                       services.coordinator)
                services.pipeline.adopt(judged)
        services.published.publish(state)
        if draw := services.page.update(state, self._interval()):
            services.published.publish_page(draw)
        if services.state_file:
            services.state_file.save(state.diagnoses)
        if services.pusher:
            services.pusher.offer(state)

    def _extra(self) -> tuple[list[list[Sample]], list[list[Sample]], dict[str, Health]]:
        """Samples gathered off the cycle: new lists, batches an earlier cycle already added (carried), and health."""
        samples: list[list[Sample]] = []
        carried: list[list[Sample]] = []
        health: dict[str, Health] = {}
        for background in self.services.background:
            got, h = background.latest()
            self._hand(background, got, samples, carried)
            health.update(h)
        if self.probe_status:
            # The probe runs in its own process; its job hands over its counters.
            status, age = self.probe_status.fresh(self._answer_within())
            ok, error, got = status or (False, self._silent("the probe process", age), [PROBE_UP.sample(0.0)])
            self._hand(self.probe_status, got, samples, carried)
            health["probe"] = self._service_health("probe", ok, error)
        if self.coordination_poll:
            polled, age = self.coordination_poll.fresh(self._answer_within())
            health["coordination"] = self._service_health(
                "coordination", *(polled or (False, self._silent("the coordination process", age))))
            assert self.services.coordinator is not None  # polled only with a coordination process
            self._hand(self.coordination_poll, self.services.coordinator.samples, samples, carried)
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
            self._last_ok[name] = self.services.root.now()
        return Health(ok, 0.0, self._last_ok.get(name), error)

    def step(self) -> None:
        """One cycle: collect (or take the recording's next snapshot), evaluate, publish."""
        with self._cycle:
            if self.services.recording:
                self._replay_step()
            else:
                self._live_step()

    def _live_step(self) -> None:
        samples, carried, health = self._extra()
        self._publish(self.services.pipeline.step(self.services.root, samples, health, carried))

    def _replay_step(self) -> None:
        # Loop over the recording with times shifted so it reads as live, for demos and integration tests.
        assert self.services.recording is not None  # this job runs only over a recording
        root = next(self._replay, None) if self._replay else None
        if root is None:
            if self._replay is not None:
                # Counters jump back to the recording's start: rates across the loop would be nonsense.
                self.services.pipeline.restart_history()
            # Never before the last snapshot replayed: stepped faster than its interval, time still only goes forward.
            start = max(time.time(), self._replayed_until + self._interval())
            self._replay = self.services.recording.roots(start - next(self.services.recording.roots()).now())
            root = next(self._replay)
        self._replayed_until = root.now()
        self._publish(self.services.pipeline.step(root))

    def _interval(self) -> float:
        return self.services.recording.interval if self.services.recording else self.services.config.interval

    def serve_forever(self) -> None:
        """Start, then reload on request_reload() (SIGHUP) until stop() (SIGTERM/SIGINT)."""
        self.start()
        while not self._stop:
            if self._reload:
                self._reload = False
                self.reload()
            time.sleep(0.5)
        self.scheduler.shutdown(wait=False)
        if self.services.coordinator:
            self.services.coordinator.stop()  # leaves the group: another daemon takes the cluster-scope diagnoses over at once
        for background in self.services.background:
            background.collectors.close()
        if self.services.probe:
            self.services.probe.stop()
        if self.services.pusher:
            self.services.pusher.stop()
        self.services.exporter.stop()

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
        """Re-read the config file and the rules and swap in the services rebuilt from them; a broken one is refused
        with one log line and the old one stays."""
        old = self.services
        try:
            config = self.reload_config() if self.reload_config else old.config
            rules = load_rules(config)  # compiled before the lock: a cycle never waits for it
            with self._cycle:
                self.services = rebuild(config, rules, old)
        except CatalogError as e:
            log.error("reload refused, the running rules stay: %s", "; ".join(map(str, e.errors)))
            return
        except ConfigError as e:
            log.error("reload refused, the running config stays: %s", e)
            return
        except Exception as e:  # a reload never takes the daemon down
            log.error("reload refused (%s: %s)", type(e).__name__, e)
            return
        if not old.recording and config.interval != old.config.interval:
            self.scheduler.reschedule_job("collect", trigger="interval", seconds=config.interval)
        changed = [f.name for f in dataclasses.fields(Config) if getattr(old.config, f.name) != getattr(config, f.name)]
        later = [name for name in changed if name not in RELOADABLE]
        log.info("reloaded: %d rules%s", len(self.services.rules),
                 f"; changed {', '.join(later)}: takes effect at the next restart" if later else "")
