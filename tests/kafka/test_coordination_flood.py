"""Issue 30 finding 6 on the lab: a standby daemon (`kdiag run`) under a 30 s flood of 1 MB state records and one
zstd record that decompresses to 15.8 MB keeps its memory (RSS of the daemon and its children moves < 20 MB); a run
of such records is read past several to a pass of the coordinator's loop, not one."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from tests.promstack import Stack
from tests.system.test_child_crashes import children
from tests.kafka.test_coordination_hostile import HOSTILE_ID, holder_member_id
from tests.kafka.test_coordination_live import delete_topic, pair, published_by, state  # noqa: F401  (pair: a fixture)
from tests.waiting import wait_until

from kdiag.kafka.client import ClientSettings
from kdiag.kafka.coordination import STATE_SUFFIX, Coordinator
from kdiag.kafka.coordination_records import Member
from kdiag.kafka.fleet_key import write_key

pytestmark = pytest.mark.kafka
FLOOD_SECONDS = 30.0
RECORDS_PER_SECOND = 5  # 150 records of 1 MB: bounded, the lab's disks share the machine
GROWTH_LIMIT_MB = 20.0
BOMBS = 40


def bomb() -> bytes:
    """15.8 MB of JSON that zstd packs under the broker's 1 MB limit: librdkafka will not decompress it."""
    return json.dumps({"format": "kdiag-state", "padding": "a" * 15_800_000}).encode()


def republishing(reporter: Coordinator, subject: str) -> Callable[[], None]:
    """A call that has the reporter publish a state naming subject, at most every 2 s, as a daemon does each cycle
    (one whose look is late does not count itself elected for the moment, and its publish() is then a no-op)."""
    published = [0.0]

    def republish() -> None:
        if time.monotonic() - published[0] >= 2.0:
            reporter.publish(state(subject))
            published[0] = time.monotonic()

    return republish


def rss_mb(pid: int) -> float:
    """VmRSS of a process and its children, in MB."""
    total = 0
    for p in [pid, *children(pid).values()]:
        status = Path(f"/proc/{p}/status").read_text()
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return total / 1024


def refused_total(address: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kdiag_coordination_records_refused_total{"))


def flood_record(group: str, member_id: str, n: int) -> bytes:
    """About 1 MB: a state record of 1,000 diagnoses whose subjects are new in every record (every other one
    under the 1 MiB a record may hold, so its MAC is checked; the others over it)."""
    diagnoses = [{"rule": "broker_down", "subject": f"{n}-{i}-" + "s" * (900 if n % 2 else 990), "state": "firing",
                  "since": time.time() - 5, "summary": "flood", "evidence": {}} for i in range(1000)]
    return json.dumps({"format": "kdiag-state", "version": 1, "group": group, "kind": "state", "host": "evil",
                       "broker_id": 1, "member_id": member_id, "saved": time.time(), "diagnoses": diagnoses}).encode()


def test_finding_6_a_flood_of_large_records_leaves_a_standby_small(kafka_lab: dict, tmp_path: Path) -> None:
    bootstrap, tag = kafka_lab["bootstrap"], f"flood{uuid.uuid4().hex[:8]}"
    topic, group = f"__kdiag_coordination_{tag}", f"kdiag-{tag}"
    key_file = tmp_path / "fleet.key"
    write_key(str(key_file))
    config = tmp_path / "kdiag.yaml"
    config.write_text(yaml.safe_dump({
        "interval": "2s", "state_dir": "", "probe": {"enabled": False},
        "kafka": {"bootstrap_servers": bootstrap, "interval": "5s", "timeout": "20s", "local_broker_id": 2,
                  "coordination_topic": topic, "coordination_group": group,
                  "coordination_key_file": str(key_file)}}))
    reporter = Coordinator(bootstrap, ClientSettings(), Member("reporter", 1), topic, group,
                           key=bytes.fromhex(key_file.read_text()), rule_ids=frozenset({"broker_down"}))
    reporter.start()
    stack = Stack(tmp_path)
    try:
        wait_until(lambda: reporter.reporting().why == "elected", 120, "the in-test reporter elected")
        address = stack.kdiag_live("--config", str(config), "--no-discover")
        daemon = stack.procs[-1]

        def standby() -> bool:
            with urllib.request.urlopen(f"http://{address}/api/diagnoses", timeout=30) as r:
                got = json.loads(r.read()).get("coordination", {})
            return got.get("why") == "another daemon is elected" and got.get("authenticated") is True

        wait_until(standby, 120, "the daemon a standby naming the reporter", stack.logs)
        wait_until(lambda: "coordination" in children(daemon.pid), 60, "the coordination child")
        before = rss_mb(daemon.pid)
        member_id = holder_member_id(bootstrap, group)
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": HOSTILE_ID, "linger.ms": 0,
                             "message.max.bytes": 20_000_000, "compression.type": "zstd"})
        sent, t0 = 0, time.monotonic()
        while (elapsed := time.monotonic() - t0) < FLOOD_SECONDS:
            if sent < elapsed * RECORDS_PER_SECOND:
                producer.produce(topic + STATE_SUFFIX, key=group.encode(), value=flood_record(group, member_id, sent))
                sent += 1
            producer.poll(0.05)
        producer.produce(topic + STATE_SUFFIX, key=group.encode(), value=bomb())
        assert producer.flush(60) == 0
        # The reader is past the flood once the reporter's next record shows on the standby (the reporter's own
        # reader wades through the flood too, on a loaded host, so it publishes again until then).
        republish = republishing(reporter, "after-the-flood")

        def shown() -> bool:
            republish()
            with urllib.request.urlopen(f"http://{address}/api/diagnoses", timeout=30) as r:
                return any(d["subject"] == "after-the-flood" for d in json.loads(r.read())["diagnoses"])

        wait_until(shown, 180, "the reporter's record after the flood on the standby", stack.logs)
        refused = refused_total(address)
        after = rss_mb(daemon.pid)
        print(f"\n{sent} records of ~1 MB and one zstd record of 15.8 MB: the standby's RSS (daemon and children) "
              f"{before:.1f} MB -> {after:.1f} MB; {refused:.0f} batches refused")
        assert refused >= 1
        assert after - before < GROWTH_LIMIT_MB
        assert daemon.poll() is None and standby()
    finally:
        stack.close()
        reporter.stop()
        delete_topic(bootstrap, topic, group)


def test_a_run_of_undecompressable_batches_is_read_past_several_to_a_pass(kafka_lab: dict, pair) -> None:  # noqa: F811
    """Each bomb is a batch of its own that the standby's reader must seek past; reading on at once after each seek
    (within the pass's read budget), not at the next pass of the loop (one group poll later), takes few passes."""
    coordinators, reporter = pair
    standby = next(c for c in coordinators if c is not reporter)
    passes = [0]
    take_state = standby._take_state

    def counted() -> None:
        passes[0] += 1
        take_state()

    standby._take_state = counted  # type: ignore[method-assign]  # the loop looks it up on each pass
    producer = Producer({"bootstrap.servers": kafka_lab["bootstrap"], "client.id": HOSTILE_ID, "linger.ms": 0,
                         "message.max.bytes": 20_000_000, "compression.type": "zstd"})
    value = bomb()
    before = passes[0]
    for _ in range(BOMBS):
        producer.produce(standby.state_topic, key=standby.group.encode(), value=value)
        assert producer.flush(30) == 0  # one batch each
    republish = republishing(reporter, "after-the-bombs")  # the reporter's own reader wades through the bombs too

    def shown() -> bool:
        republish()
        return published_by(standby) == "after-the-bombs"

    wait_until(shown, 120, "the reporter's record after the bombs on the standby")
    used = passes[0] - before
    print(f"\n{BOMBS} undecompressable batches read past in {used} passes of the standby's loop")
    assert standby.refused["too_large"] >= 1
    assert used < BOMBS / 2
