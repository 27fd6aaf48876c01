"""Cluster-scope diagnoses handed from the reporter to every daemon through the election's state topic.

The reporter publishes its cluster-scope diagnoses each cycle (kdiag/kafka/coordination.py: a compacted topic) with
their state and since; a pending one's timer is its since. A daemon that does not report reads no cluster-wide state
(its admin fetches are local): it lists the published diagnoses, which name the reporter, and keeps them in its
engine. Elected, it starts from them: a firing diagnosis keeps its since (so the same Alertmanager startsAt) and a
pending one its timer. Until its own cluster-wide fetches give it rates again, it holds them rather than resolve them;
so does a reporter whose cluster-wide source fails, for BLIND_HOLD_SECONDS at most.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kdiag.analysis.catalog import Rule
from kdiag.analysis.engine import Diagnosis, EngineState, Key
from kdiag.analysis.statefile import decode, encode
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.coordination_process import CoordinatorProcess
from kdiag.runtime.pipeline import State

# Full admin fetches a new reporter waits for before judging cluster rules itself: rates need two.
WARM_FETCHES = 2
# A reporter whose cluster-wide source fails (the AdminClient process died: librdkafka can crash on a coordinator move;
# or the cluster did not answer) holds what it said, as a new reporter does, until its fetches are warm again or this
# long has passed: a dead child must not resolve and re-fire every cluster alert, a dead cluster must not freeze them.
BLIND_HOLD_SECONDS = 120.0
# A standby's admin fetch (metadata, the local broker's and its topics' configs: for its host-scope rules) runs every
# 20 admin intervals, 5 minutes by default: leaders and configs change seldom, and only the reporter measures rates.
STANDBY_SLOWDOWN = 20.0
# The reporter publishes when a cluster-scope diagnosis comes, goes or changes state or since, else once a minute (its
# evidence values, and a sign of life): every record ends each standby's long poll of the state topic with a Fetch.
REPUBLISH_SECONDS = 60.0


def cluster_scope(diagnoses: list[Diagnosis]) -> list[Diagnosis]:
    """The cluster-scope ones."""
    return [d for d in diagnoses if d.rule.scope == "cluster"]


def published_diagnoses(record: Any, rules: list[Rule], now: float) -> list[Diagnosis]:
    """The cluster-scope diagnoses of a published record whose rules this daemon has; none when it is malformed,
    another format or older than a state file may be (statefile.RESTORE_WITHIN_SECONDS)."""
    if not isinstance(record, dict):
        return []
    try:
        got, _dropped = decode(record, str(record.get("host")), {r.id: r for r in rules}, now)
    except ValueError:
        return []
    return cluster_scope(got)


class Handover:
    """Each cycle after the pipeline's step: scope the admin fetches to the role, publish or adopt cluster scope."""

    def __init__(self, host: str, admin: KafkaAdminCollector | None,
                 slow_admin: Callable[[float], None] | None = None):
        self.host = host
        self.admin = admin
        if admin is not None:
            admin.set_full(False)  # until elected: the reporter alone reads cluster-wide state
        self.slow_admin = slow_admin  # the admin job's slow_down
        self._held: dict[Key, Diagnosis] = {}  # the published diagnoses, kept until a new reporter is warm
        self._elected_at: int | None = None  # the admin's full fetches when this daemon was elected
        self._warm = False
        self._blind_since: float | None = None  # when the reporter's cluster-wide source started failing
        self._said: dict[Key, Diagnosis] = {}  # the cluster-scope diagnoses the reporter said last cycle
        self._published: tuple[float, list[tuple[str, str, str, float]]] | None = None  # when, and what it said

    def step(self, state: State, judged: EngineState, rules: list[Rule],
             coordinator: CoordinatorProcess) -> tuple[State, EngineState]:
        """The cycle's state and the engine's judgement with the published cluster-scope diagnoses adopted (not
        reporting) or held (reporting, not yet warm); publishes this daemon's (reporting)."""
        reporting = state.reporting.reporting
        if self.admin is not None:
            self.admin.set_full(reporting)  # from the next fetch on
        if self.slow_admin is not None:
            self.slow_admin(1.0 if reporting else STANDBY_SLOWDOWN)  # elected: a full fetch at the admin job's next tick
        if not reporting:
            self._elected_at, self._warm, self._published, self._blind_since = None, False, None, None
            self._held = {(d.rule.id, d.subject): d for d in published_diagnoses(coordinator.published, rules, state.time)}
            return _replace(state, judged, dict(self._held))
        if self.admin is None or getattr(state.health.get(self.admin.name), "success", True):
            self._blind_since = None
        elif self._warm and self._blind_since is None:
            self._warm, self._elected_at, self._blind_since = False, None, state.time
            self._held = dict(self._said)
        if not self._warm:
            state, judged = self._hold(state, judged)
        cluster = cluster_scope(state.diagnoses)
        self._said = {(d.rule.id, d.subject): d for d in cluster}
        said: list[tuple[str, str, str, float]] = sorted((d.rule.id, d.subject, d.state, d.since) for d in cluster)
        if self._published is None or said != self._published[1] or state.time - self._published[0] >= REPUBLISH_SECONDS:
            coordinator.publish(encode(self.host, state.time, cluster))
            self._published = (state.time, said)
        return state, judged

    def _hold(self, state: State, judged: EngineState) -> tuple[State, EngineState]:
        fetched = self.admin.full_fetches if self.admin is not None else 0
        if self._elected_at is None:
            self._elected_at = fetched
        # Warm from the next step on: the samples of the fetch just counted reach the pipeline then.
        blind_for = state.time - self._blind_since if self._blind_since is not None else 0.0
        self._warm = fetched >= self._elected_at + WARM_FETCHES or blind_for >= BLIND_HOLD_SECONDS
        own = {(d.rule.id, d.subject): d for d in cluster_scope(state.diagnoses)}
        for key, d in self._held.items():
            if key not in own:
                own[key] = replace(d, state="firing" if state.time - d.since >= d.rule.for_seconds else "pending")
        return _replace(state, judged, own)


def _replace(state: State, judged: EngineState, cluster: dict[Key, Diagnosis]) -> tuple[State, EngineState]:
    """The state and judgement with `cluster` as their cluster-scope diagnoses (none of the others resolved)."""
    reporting = state.reporting.reporting
    now = EngineState({**{k: d for k, d in judged.active.items() if d.rule.scope != "cluster"}, **cluster},
                      tuple(d for d in judged.resolved
                            if d.rule.scope != "cluster" or (reporting and (d.rule.id, d.subject) not in cluster)))
    return replace(state, diagnoses=now.current(), resolved=list(now.resolved)), now
