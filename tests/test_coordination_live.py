"""The reporter election on the lab: one reporter among three coordinators, and a handover when it stops."""

from __future__ import annotations

import gc
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from waiting import wait_until

from kdiag.coordination import SESSION_TIMEOUT_MS, Coordinator, client_id, member_of
from kdiag.kafka_client import ClientSettings
from kdiag.scope import Member

pytestmark = pytest.mark.kafka


def test_client_id_names_the_daemon() -> None:
    for me in (Member("broker-1.example", 1), Member("loadhost", None)):
        assert member_of(client_id(me)) == me
    assert member_of("rdkafka") is None


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
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)


def test_one_reporter_and_a_handover_when_it_stops(kafka_lab: dict) -> None:
    bootstrap = kafka_lab["bootstrap"]
    tag = f"scope-coord-{uuid.uuid4().hex[:8]}"
    topic, group = f"{tag}-topic", f"{tag}-group"
    coordinators = [Coordinator(bootstrap, ClientSettings(), Member(f"host-{b}", b), topic, group) for b in (1, 2, 3)]
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
    finally:
        for c in coordinators:
            c.stop()
        delete_topic(bootstrap, topic, group)
