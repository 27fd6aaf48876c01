"""Cluster scope handed over through the published state: standbys list the reporter's diagnoses and read no
cluster-wide state; a new reporter keeps their since and timers and holds them until its own fetches are warm."""

from __future__ import annotations

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, EngineState
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.coordination import Reporting
from kdiag.kafka.coordination_process import CoordinatorProcess
from kdiag.kafka.coordination_records import Member
from kdiag.runtime.handover import BLIND_HOLD_SECONDS, REPUBLISH_SECONDS, STANDBY_SLOWDOWN, WARM_FETCHES, Handover
from kdiag.runtime.pipeline import Health, State

RULES = load_catalog([default_rules_dir()])
BY_ID = {r.id: r for r in RULES}
T0 = 1_764_430_000.0


@pytest.fixture
def fleet():
    """Two daemons' handovers, admin collectors, coordination handles (none of their processes started) and their
    engines' judgements, the last one last."""
    made = []
    for host, broker in (("a", 1), ("b", 2)):
        admin = KafkaAdminCollector("127.0.0.1:9", local_broker=broker)
        coordinator = CoordinatorProcess("127.0.0.1:9", ClientSettings(), Member(host, broker), "t", "g")
        made.append((Handover(host, admin), admin, coordinator, [EngineState()]))
    yield made
    for _, admin, coordinator, _ in made:
        admin.close()
        coordinator.stop()


def cycle(daemon, t: float, reporting: bool, found: list[Diagnosis], admin_ok: bool = True) -> State:
    """One cycle: the engine's own judgement (found), then the handover; the record published moves to the topic."""
    handover, _admin, coordinator, judgements = daemon
    last = judgements[-1].active
    judged = EngineState({**{k: d for k, d in last.items() if d.rule.scope == "host"},
                          **{(d.rule.id, d.subject): last.get((d.rule.id, d.subject), d) for d in found}})
    health = {} if admin_ok else {"kafka_admin": Health(False, error="the AdminClient process died from SIGSEGV")}
    state = State(coordinator.me.host, t, [], health, {}, judged.current(), [],
                  reporting=Reporting(reporting, coordinator.me if reporting else None))
    given = (state, judged, state.diagnoses)
    state, judged = handover.step(state, judged, RULES, coordinator)
    assert given[0].diagnoses is given[2] and given[0].diagnoses == given[1].current()  # new values, the old kept
    judgements.append(judged)
    assert judged.current() == state.diagnoses and list(judged.resolved) == state.resolved
    return state


def skew(since: float) -> Diagnosis:
    return Diagnosis(BY_ID["partition_skew"], "orders", since, "firing", "skewed", {"partitions": 6.0},
                     brokers=frozenset({"1"}))


def test_a_standby_lists_the_reporters_diagnoses_and_fetches_locally(fleet):
    (reporter, standby) = fleet
    state = cycle(reporter, T0, True, [skew(T0 - 100)])
    standby[2].published = reporter[2].outgoing
    # What the standby judged itself from its local fetch is not listed: only the reporter's, with its since.
    own = Diagnosis(BY_ID["partition_skew"], "payments", T0, "pending")
    listed = cycle(standby, T0 + 5, False, [own])
    assert [(d.rule.id, d.subject, d.since, d.state) for d in listed.diagnoses if d.rule.scope == "cluster"] == \
        [("partition_skew", "orders", T0 - 100, "firing")]
    assert not standby[1].full and reporter[1].full
    assert state.diagnoses[0].since == T0 - 100


def test_a_new_reporter_keeps_since_and_timers_until_its_fetches_are_warm(fleet):
    (old, new) = fleet
    rule = BY_ID["partition_skew"]
    pending = Diagnosis(rule, "payments", T0 - 10, "pending")
    cycle(old, T0, True, [skew(T0 - 100), pending])
    new[2].published = old[2].outgoing
    cycle(new, T0 + 1, False, [])
    # Elected: its engine finds nothing yet (no rates), the published diagnoses stay, the pending one's timer runs on.
    elected_at = new[1].full_fetches
    t = T0 + rule.for_seconds
    state = cycle(new, t, True, [])
    assert {(d.subject, d.since, d.state) for d in state.diagnoses if d.rule.scope == "cluster"} == \
        {("orders", T0 - 100, "firing"), ("payments", T0 - 10, "firing")}
    assert state.resolved == [] and new[1].full
    assert [d["since"] for d in new[2].outgoing["diagnoses"]] == [T0 - 100, T0 - 10]
    # Its own fetches warm: still held at the cycle that counts them (their samples arrive at the next), then judged.
    new[1].full_fetches = elected_at + WARM_FETCHES
    assert {d.subject for d in cycle(new, t + 5, True, []).diagnoses} == {"orders", "payments"}
    state = cycle(new, t + 10, True, [skew(t)])
    assert [(d.subject, d.since) for d in state.diagnoses] == [("orders", T0 - 100)]


def test_a_stale_or_foreign_record_lists_nothing(fleet):
    (reporter, standby) = fleet
    cycle(reporter, T0, True, [skew(T0 - 100)])
    standby[2].published = reporter[2].outgoing
    assert cycle(standby, T0 + 3600, False, []).diagnoses == []
    for record in (None, {"format": "other"}, ["not", "a", "dict"]):
        standby[2].published = record
        assert cycle(standby, T0 + 5, False, []).diagnoses == []


def test_a_standby_slows_its_admin_job_down_and_an_elected_one_speeds_it_up(fleet):
    paces: list[float] = []
    daemon = (Handover("a", fleet[0][1], paces.append), *fleet[0][1:])
    cycle(daemon, T0, False, [])
    assert paces == [STANDBY_SLOWDOWN] and not fleet[0][1].full
    cycle(daemon, T0 + 5, True, [])
    assert paces == [STANDBY_SLOWDOWN, 1.0] and fleet[0][1].full


def test_the_reporter_publishes_a_change_at_once_and_the_same_diagnoses_once_a_minute(fleet):
    reporter = fleet[0]
    cycle(reporter, T0, True, [skew(T0 - 100)])
    assert reporter[2].outgoing is not None
    reporter[2].outgoing = None  # sent by the coordination process's poll
    cycle(reporter, T0 + 5, True, [skew(T0 - 100)])
    assert reporter[2].outgoing is None  # nothing changed: each standby's long poll goes on
    cycle(reporter, T0 + 10, True, [])
    assert reporter[2].outgoing is not None and reporter[2].outgoing["diagnoses"] == []  # resolved: at once
    reporter[2].outgoing = None
    cycle(reporter, T0 + 10 + REPUBLISH_SECONDS, True, [])
    assert reporter[2].outgoing is not None  # a minute on: the same again


def test_a_reporter_whose_admin_source_fails_holds_what_it_said_until_warm_or_for_a_bounded_time(fleet):
    (reporter, _) = fleet
    cycle(reporter, T0, True, [skew(T0 - 100)])
    reporter[1].full_fetches = WARM_FETCHES  # warm: judging cluster rules itself
    cycle(reporter, T0 + 5, True, [skew(T0 - 100)])
    # The AdminClient process died: its engine finds no skew (no samples), the diagnosis is held with its since.
    state = cycle(reporter, T0 + 10, True, [], admin_ok=False)
    assert [(d.subject, d.since, d.state) for d in state.diagnoses] == [("orders", T0 - 100, "firing")]
    assert state.resolved == []
    # Back, its next fetches warm again: then judged by its own engine (still skewed: kept, since unchanged).
    fetched = reporter[1].full_fetches
    assert [d.subject for d in cycle(reporter, T0 + 15, True, []).diagnoses] == ["orders"]
    reporter[1].full_fetches = fetched + WARM_FETCHES
    cycle(reporter, T0 + 20, True, [])
    assert [(d.subject, d.since) for d in cycle(reporter, T0 + 25, True, [skew(T0 + 25)]).diagnoses] == \
        [("orders", T0 - 100)]
    # A source failing for good: held BLIND_HOLD_SECONDS, then judged as it is (nothing seen: resolved).
    cycle(reporter, T0 + 30, True, [], admin_ok=False)
    assert [d.subject for d in cycle(reporter, T0 + 30 + BLIND_HOLD_SECONDS - 1, True, [], admin_ok=False).diagnoses] \
        == ["orders"]
    cycle(reporter, T0 + 30 + BLIND_HOLD_SECONDS, True, [], admin_ok=False)
    state = cycle(reporter, T0 + 35 + BLIND_HOLD_SECONDS, True, [], admin_ok=False)
    assert state.diagnoses == []
