"""The reporter election on the lab: one reporter among three coordinators, and a handover when it stops."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from tests.kafka.coordinator_move import coordinator_moved, described_group
from tests.waiting import timed_wait, wait_until

from kdiag.kafka.client import ClientSettings
from kdiag.kafka.coordination import SESSION_TIMEOUT_MS, STATE_SUFFIX, Coordinator
from kdiag.kafka.coordination_records import Member

pytestmark = pytest.mark.kafka


def state(name: str) -> dict:
    """A state record as the handover hands it to publish(), naming its sender in its one diagnosis's subject."""
    return {"saved": time.time(), "diagnoses": [{"rule": "broker_down", "subject": name, "state": "firing",
                                                 "since": time.time() - 5, "summary": "", "evidence": {}}]}


def published_by(c: Coordinator) -> str | None:
    """The subject of the one diagnosis of the state record a coordinator took, None before one."""
    return c.published["diagnoses"][0]["subject"] if c.published and c.published["diagnoses"] else None


def reporters(coordinators: list[Coordinator]) -> list[Coordinator]:
    return [c for c in coordinators if c.reporting().reporting]


def agreed(coordinators: list[Coordinator]) -> Coordinator | None:
    """The one reporter, once every coordinator names it; None before."""
    now = reporters(coordinators)
    if len(now) != 1:
        return None
    who = now[0].me
    return now[0] if all(c.reporting().reporter == who for c in coordinators) else None


def delete_topic(bootstrap: str, topic: str, group: str) -> None:
    """Drop the test's topic and group; only after every client that knew them is closed (librdkafka #5093)."""
    gc.collect()
    # The coordinator takes the members' LeaveGroups asynchronously: the group may be non-empty for a moment. An Empty
    # group without offsets (its topic was deleted) may already be gone: the broker removes it by itself.
    answers: list[str] = []

    def deleted() -> bool:
        # A client per attempt: librdkafka's keeps asking a coordinator that moved (a preferred-leader election).
        fresh = AdminClient({"bootstrap.servers": bootstrap})
        error = fresh.delete_consumer_groups([group], request_timeout=10)[group].exception(timeout=15)
        answers.append(str(error))
        return error is None or error.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

    t0 = time.monotonic()
    try:
        wait_until(deleted, 60, f"group {group} deleted")
    finally:
        print(f"group {group}: after {time.monotonic() - t0:.1f} s, the broker's last answers to DeleteGroups: "
              f"{answers[-3:]}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic, topic + STATE_SUFFIX], operation_timeout=10).values():
        error = future.exception(timeout=15)
        # A test that deleted a topic may end before the coordinators created it again: nothing left to drop.
        if error is not None and error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise error


def test_one_reporter_and_a_handover_when_it_stops(kafka_lab: dict) -> None:
    bootstrap = kafka_lab["bootstrap"]
    tag = f"scope-coord-{uuid.uuid4().hex[:8]}"
    topic, group = f"{tag}-topic", f"{tag}-group"
    coordinators = [Coordinator(bootstrap, ClientSettings(), Member(f"host-{b}", b), topic, group,
                                rule_ids=frozenset({"broker_down"})) for b in (1, 2, 3)]
    try:
        for c in coordinators:
            c.start()
        first = wait_until(lambda: agreed(coordinators), 120, "one reporter all three coordinators name")
        assert first.reporting().reporter == first.me
        t0 = time.monotonic()
        first.stop()
        assert not first.reporting().reporting
        rest = [c for c in coordinators if c is not first]
        overlaps = 0
        while (second := agreed(rest)) is None:
            overlaps += len(reporters(rest)) > 1
            assert time.monotonic() - t0 < 120, "no second reporter within 120 s"
            time.sleep(0.1)
        handover = time.monotonic() - t0
        print(f"\nhandover after a clean stop: {handover:.1f} s (session timeout {SESSION_TIMEOUT_MS / 1000:g} s)")
        assert overlaps == 0 and second is not first
        # The reporter's state reaches every coordinator through the state topic; a standby's publish is dropped.
        third = next(c for c in rest if c is not second)
        third.publish(state("a standby"))
        second.publish(state("the reporter"))
        wait_until(lambda: all(published_by(c) == "the reporter" for c in rest), 60, "the record everywhere")
        assert all(c.published["host"] == second.me.host for c in rest)
        late = Coordinator(bootstrap, ClientSettings(), Member("late", None), topic, group, mode="never",
                           rule_ids=frozenset({"broker_down"}))
        late.start()  # a daemon starting now reads the last records, not only what comes after
        coordinators.append(late)
        wait_until(lambda: published_by(late) == "the reporter", 60, "the last record read by a newcomer")
    finally:
        for c in coordinators:
            c.stop()
        delete_topic(bootstrap, topic, group)


KILLED = """
import sys, threading
from kdiag.kafka.coordination import Coordinator
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.coordination_records import Member
Coordinator(sys.argv[1], ClientSettings(), Member("killed", 9), sys.argv[2], sys.argv[3]).start()
threading.Event().wait()
"""


@pytest.fixture
def pair(kafka_lab: dict) -> Iterator[tuple[list[Coordinator], Coordinator]]:
    """Two coordinators of a group of the test's own, started, and the reporter they agreed on."""
    bootstrap = kafka_lab["bootstrap"]
    tag = f"scope-pair-{uuid.uuid4().hex[:8]}"
    coordinators = [Coordinator(bootstrap, ClientSettings(), Member(f"host-{b}", b), f"{tag}-topic", f"{tag}-group",
                                rule_ids=frozenset({"broker_down"})) for b in (1, 2)]
    try:
        for c in coordinators:
            c.start()
        yield coordinators, wait_until(lambda: agreed(coordinators), 120, "one reporter both coordinators name")
    finally:
        for c in coordinators:
            c.stop()
        delete_topic(bootstrap, f"{tag}-topic", f"{tag}-group")


def test_a_stopped_standby_leaves_the_group_before_its_stop_returns(kafka_lab: dict, pair) -> None:
    """librdkafka's cooperative close skips the LeaveGroup of a member holding no partition; kdiag's stop does not."""
    coordinators, reporter = pair
    standby = next(c for c in coordinators if c is not reporter)

    def stable_with_both() -> bool:
        try:
            described = described_group(kafka_lab["bootstrap"], reporter.group)
        except KafkaException:  # the coordinator moving (the lab's preferred-leader rebalance)
            return False
        return described.state == ConsumerGroupState.STABLE and len(described.members) == 2

    wait_until(stable_with_both, 60, "both coordinators in the group, its rebalance done")
    standby.stop()
    # The broker answered the LeaveGroup before the consumer closed: no session timeout to wait for.
    assert [m.client_id for m in group_members(kafka_lab["bootstrap"], reporter.group)] == [reporter.client_id]


def test_the_election_follows_its_group_coordinator_to_another_broker(kafka_lab: dict, pair) -> None:
    """A preferred-leader election moving the group's coordinator (librdkafka's admin cache would keep asking the old
    one for 15 minutes): every coordinator looks at the group again and one reporter stays elected."""
    coordinators, reporter = pair
    with coordinator_moved(kafka_lab["bootstrap"], reporter.group) as broker:
        moved_at = time.monotonic()
        took = timed_wait(lambda: agreed(coordinators) and all(c.looked_at > moved_at for c in coordinators), 90,
                          f"both coordinators looking at the group through broker {broker}, one reporter")
        print(f"\nthe group's coordinator moved to broker {broker}: looked at again after {took:.1f} s")


def test_a_killed_reporter_is_replaced_after_the_session_timeout(kafka_lab: dict) -> None:
    """SIGKILL: no LeaveGroup, so the group notices only when the session times out."""
    bootstrap = kafka_lab["bootstrap"]
    tag = f"scope-kill-{uuid.uuid4().hex[:8]}"
    topic, group = f"{tag}-topic", f"{tag}-group"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    victim = subprocess.Popen([sys.executable, "-c", KILLED, bootstrap, topic, group], env=env)
    observer = Coordinator(bootstrap, ClientSettings(), Member("observer", None), topic, group, mode="never")
    survivor = Coordinator(bootstrap, ClientSettings(), Member("survivor", 1), topic, group)
    try:
        observer.start()  # cluster_scope: never only looks at the group
        wait_until(lambda: observer.reporting().reporter == Member("killed", 9), 120, "the first member reporting")
        survivor.start()
        wait_until(lambda: len(group_members(bootstrap, group)) == 2, 60, "the survivor in the group")
        # The join's rebalance settles with partition 0 where it was (the sticky assignor).
        wait_until(lambda: survivor.reporting().reporter == Member("killed", 9), 60, "the survivor naming the reporter")
        assert not survivor.reporting().reporting and not observer.reporting().reporting
        t0 = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        wait_until(lambda: survivor.reporting().reporting, 120, "the survivor to take over")
        print(f"\nhandover after SIGKILL of the reporter: {time.monotonic() - t0:.1f} s "
              f"(session timeout {SESSION_TIMEOUT_MS / 1000:g} s)")
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(30)
        survivor.stop()
        observer.stop()
        delete_topic(bootstrap, topic, group)


def group_members(bootstrap: str, group: str) -> list:
    """The group's members as the coordinator describes them."""
    return described_group(bootstrap, group).members
