"""Optional direct push of firing diagnoses to Alertmanager's /api/v2/alerts, off the collection thread."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from kdiag.alerting.rules import EXPLAINS_ALERT, INHIBITOR_CLASS, RUNBOOK_BASE, alert_name, runbook_url
from kdiag.core.finite import dumps, skip, utc
from kdiag.core.quote import label_value, printable
from kdiag.core.http import Authorization, BasicAuth, HttpClient, PushError, TLSConfig
from kdiag.analysis.scope import diagnosis_labels, explains_labels, exported
from kdiag.analysis.subject_cap import SubjectCap

if TYPE_CHECKING:
    from kdiag.analysis.engine import Diagnosis
    from kdiag.runtime.pipeline import State

log = logging.getLogger(__name__)

Key = tuple[str, ...]  # (rule, subject), and the broker for a KdiagExplains alert
BACKOFF_START = 1.0


def timestamp(t: float) -> str | None:
    """RFC 3339 UTC, as Alertmanager expects; None (left out, counted) for a time no calendar can show."""
    at = utc(t, "alertmanager")
    return None if at is None else at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def starts_at(t: float) -> dict[str, str]:
    """An alert's startsAt, or nothing (Alertmanager then takes the time it receives it) when t cannot be shown."""
    return {"startsAt": at} if (at := timestamp(t)) else {}


def alert_labels(d: Diagnosis, instance: str, cluster: str = "") -> dict[str, str]:
    """The labels of a diagnosis's alert, those the inhibitions match on as in the generated Prometheus alerts.

    A cluster-scope alert has no `instance`: whichever daemon reports it, it is the same alert. Values are in their
    /metrics form (printable), so Prometheus's alert and this push are one alert to Alertmanager.
    """
    labels = {k: v for k, v in diagnosis_labels(d, cluster).items() if k != "kind"}
    return exported_labels({"alertname": alert_name(d.rule.id), **labels, "kdiag_class": d.rule.kind,
                            **({"instance": instance} if d.rule.scope == "host" else {})})


def exported_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels with their values as /metrics shows them."""
    return {k: label_value(v) for k, v in labels.items()}


def alert_annotations(d: Diagnosis, instance: str, runbook_base: str = RUNBOOK_BASE) -> dict[str, str]:
    """The diagnosis as kdiag rendered it: dynamic summary, evidence, fix and runbook link."""
    explains = f" It explains {', '.join(d.rule.explains)}." if d.rule.explains else ""
    return {"summary": printable(d.summary),
            "description": f"kdiag {d.rule.kind} {d.rule.id} ({d.rule.severity}) holds for {d.subject} on {instance} "
                           f"since {timestamp(d.since) or 'an unknown time'}.{explains}",
            "remediation": d.rule.remediation,
            "evidence": dumps(d.evidence, "alertmanager", sort_keys=True, default=str),
            "runbook_url": runbook_url(d.rule.id, runbook_base)}


class AlertPusher:
    """Posts firing diagnoses to Alertmanager from a background thread; offer() only hands over the latest state."""

    def __init__(self, url: str, instance: str, resend_interval: float = 60.0, timeout: float = 5.0,
                 backoff_max: float = 60.0, runbook_base: str = RUNBOOK_BASE, basic_auth: BasicAuth | None = None,
                 authorization: Authorization | None = None, tls_config: TLSConfig | None = None,
                 max_subjects: int = 0):
        # Credentials in the URL become basic auth; logs only ever name the URL without them.
        self.client = HttpClient(url, timeout, basic_auth, authorization, tls_config)
        self.instance = instance
        self.resend_interval = resend_interval
        self.backoff_max = backoff_max
        self.runbook_base = runbook_base
        self.cap = SubjectCap(max_subjects)  # the alerts of the subjects /metrics keeps (diagnosis.max_subjects_per_rule)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._state: State | None = None
        self._ended: dict[Key, float] = {}
        self._firing: dict[Key, dict[str, Any]] = {}  # what Alertmanager was last told is firing
        self._resolving: dict[Key, dict[str, Any]] = {}  # endsAt posts not yet accepted
        self._thread: threading.Thread | None = None
        self.outage = ""  # the kind of failure last logged; empty while pushes succeed
        self.accepted: dict[str, float] = {}  # rule id -> when Alertmanager last accepted it firing, annotated
        self.posts = 0
        self.failures = 0

    def offer(self, state: State) -> None:
        """Hand over the newest state; never blocks on the network (an unsent older state is replaced)."""
        with self._lock:
            self._state = state
            for d in state.resolved:
                self._ended[(d.rule.id, d.subject)] = d.ended if d.ended is not None else state.time
        self._wake.set()

    def start(self) -> None:
        """Start the sender thread."""
        self._thread = threading.Thread(target=self._run, name="alertmanager-push", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the sender thread; alerts still firing expire at their endsAt in Alertmanager."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        told: frozenset[Key] = frozenset()
        delay, retry_at, next_resend = 0.0, 0.0, 0.0
        while not self._stopping.is_set():
            self._wake.clear()
            with self._lock:
                state, self._state = self._state, None
                ended, self._ended = self._ended, {}
            if state is not None:
                try:
                    self._take(state, ended)
                except Exception as e:  # one value no alert can carry never ends the pushes, host alerts included
                    skip("alertmanager", "a cycle's alerts", f"{type(e).__name__}: {e}")
            now = time.monotonic()
            due = frozenset(self._firing) != told or bool(self._resolving) or now >= next_resend
            if (self._firing or self._resolving) and due and now >= retry_at:
                if self._post():
                    told, next_resend, delay = frozenset(self._firing), now + self.resend_interval, 0.0
                else:
                    delay = min(self.backoff_max, 2 * delay or BACKOFF_START)
                    retry_at = now + delay
            if not (self._firing or self._resolving):
                self._wake.wait()
            else:
                self._wake.wait(max(0.05, (retry_at if retry_at > now else next_resend) - time.monotonic()))

    def _take(self, state: State, ended: dict[Key, float]) -> None:
        """Turn a state into the alerts to assert as firing and the ones to resolve."""
        firing: dict[Key, dict[str, Any]] = {}
        mine = [d for d in state.diagnoses if exported(d, state.reporting)]
        kept = {(d.rule.id, d.subject) for d in self.cap.select(mine, state.cluster)[0]}
        for d in mine:
            if d.state == "firing":
                if (d.rule.id, d.subject) in kept:
                    firing[(d.rule.id, d.subject)] = {
                        "labels": alert_labels(d, self.instance, state.cluster),
                        "annotations": alert_annotations(d, self.instance, self.runbook_base), **starts_at(d.since)}
                # The inhibition sources the generated Alertmanager config matches, as Prometheus would send them.
                for source in explains_labels(d, state.cluster):
                    labels = exported_labels({"alertname": EXPLAINS_ALERT, **source, "kdiag_class": INHIBITOR_CLASS,
                                              **({"instance": self.instance} if d.rule.scope == "host" else {})})
                    firing[(d.rule.id, d.subject, source.get("broker", ""))] = {
                        "labels": labels, "annotations": {}, **starts_at(d.since)}
        cut = {(d.rule.id, d.subject) for d in mine} - kept
        for key, alert in self._firing.items():
            # A cluster-scope alert this daemon no longer reports (another daemon took over) is not resolved:
            # the new reporter asserts the same alert. One a worse subject displaced under the cap is.
            if key not in firing and (key[:2] in ended or "instance" in alert["labels"] or key[:2] in cut):
                self._resolving[key] = {**alert, "endsAt": timestamp(ended.get(key[:2], state.time)) or timestamp(state.time)}
        for key in firing:
            self._resolving.pop(key, None)
        self._firing = firing

    def _post(self) -> bool:
        """One POST of every firing alert and every pending resolution; True when Alertmanager took it."""
        # Firing alerts say when they expire so that a dead kdiag's alerts resolve themselves.
        expires = timestamp(time.time() + 4 * self.resend_interval) or ""
        body = [{**a, "endsAt": expires} for a in self._firing.values()] + list(self._resolving.values())
        try:
            self.client.post_json("/api/v2/alerts", body)
        except PushError as e:
            if e.kind != self.outage:  # one line per kind of failure, not one per retry
                log.warning("%s: retrying with backoff up to %gs", e, self.backoff_max)
                self.outage = e.kind
            self.failures += 1
            return False
        if self.outage:
            log.info("Alertmanager at %s reachable again", self.client.url)
            self.outage = ""
        self._resolving.clear()
        self.posts += 1
        now = time.time()
        # Replaced, never changed in place: other threads read it while this one posts.
        self.accepted = {**self.accepted, **{a["labels"]["rule"]: now for a in self._firing.values() if a["annotations"]}}
        return True
