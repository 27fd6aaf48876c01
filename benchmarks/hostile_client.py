"""The hostile Kafka client of the chaos soak: forged and malformed coordination records, a flood of large ones, the
coordination topics deleted, the election's group hijacked. It watches the daemons while it acts: a forged record
shown by any of them, and how long no daemon reported cluster scope during its events."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

HOSTILE_ID = "kdiag/<b>evil</b>\x1b[31m/7"
TOPIC, GROUP = "__kdiag_coordination", "kdiag-coordination"  # the daemons' defaults
STATE = TOPIC + "_state"
FORGED = "forged-by-chaos"  # every forged diagnosis's subject starts so
AFTERMATH = 30.0  # seconds after an event still counted as its window (the fallback takes 20 s)


def forged_record(member_id: str, since: float, **changes: Any) -> bytes:
    """A state record as the elected daemon would write it, but unsigned (or with a bogus MAC)."""
    record = {"format": "kdiag-state", "version": 1, "group": GROUP, "kind": "state", "host": "hostA", "broker_id": 1,
              "member_id": member_id, "saved": time.time(),
              "diagnoses": [{"rule": "broker_down", "subject": f"{FORGED}-{uuid.uuid4().hex[:6]}", "state": "firing",
                             "since": since, "summary": "\x1b[31m<script>forged</script>", "evidence": {},
                             "brokers": ["1"]}]}
    return json.dumps({**record, **changes}).encode()


class HostileClient:
    """Acts as any client of the cluster may; watch() runs on its own thread while the soak goes on."""

    def __init__(self, bootstrap: str, urls: list[str], restart_daemons: Callable[[], None]):
        self.bootstrap, self.urls, self.restart_daemons = bootstrap, urls, restart_daemons
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.forged_shown: list[str] = []  # "daemon url: subject" of each forged diagnosis a daemon listed
        self.windows: list[tuple[float, float]] = []  # (start, end) monotonic of each event and its aftermath
        self.nobody_reported = 0.0  # the longest time within a window when no daemon reported cluster scope
        self.foreign_seen = 0  # the most foreign members a daemon named
        self.refused: dict[str, float] = {}  # the daemons' refused records by reason, summed, at the last look
        self._silent_since: float | None = None

    def watch(self, stop: threading.Event) -> None:
        """Every second: forged diagnoses listed, who reports, foreign members, refusals."""
        while not stop.wait(1.0):
            now = time.monotonic()
            reporting, refused = False, {}
            for url in self.urls:
                try:
                    with urllib.request.urlopen(f"{url}/api/diagnoses", timeout=5) as r:
                        body = json.loads(r.read())
                    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
                        metrics = r.read().decode()
                except (OSError, ValueError):
                    continue
                reporting |= bool(body.get("coordination", {}).get("reporting"))
                self.forged_shown += [f"{url}: {d['subject']}" for d in body["diagnoses"]
                                      if str(d.get("subject", "")).startswith(FORGED)]
                for line in metrics.splitlines():
                    if line.startswith("kdiag_coordination_foreign_members"):
                        self.foreign_seen = max(self.foreign_seen, int(float(line.rsplit(" ", 1)[1])))
                    elif line.startswith("kdiag_coordination_records_refused_total{"):
                        reason = line.split('reason="', 1)[1].split('"', 1)[0]
                        refused[reason] = refused.get(reason, 0.0) + float(line.rsplit(" ", 1)[1])
            # A restarted daemon counts from 0 again: keep the most seen.
            self.refused = {r: max(n, self.refused.get(r, 0.0)) for r, n in {**self.refused, **refused}.items()}
            inside = any(start <= now <= end for start, end in self.windows) or (
                self.windows and self.windows[-1][1] == float("inf"))
            if reporting or not inside:
                self._silent_since = None
            else:
                self._silent_since = self._silent_since or now
                self.nobody_reported = max(self.nobody_reported, now - self._silent_since)

    def _window(self, act: Callable[[], str]) -> str:
        self.windows.append((time.monotonic(), float("inf")))
        try:
            return act()
        finally:
            self.windows[-1] = (self.windows[-1][0], time.monotonic() + AFTERMATH)

    def _holder(self) -> str:
        """The member id of partition 0's holder, as DescribeGroups shows it to anyone."""
        try:
            description = self.admin.describe_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
        except Exception:  # the group is being rebuilt: forge for nobody
            return ""
        return next((m.member_id for m in description.members if m.assignment and any(
            tp.topic == TOPIC for tp in m.assignment.topic_partitions)), "")

    def forge(self) -> str:
        """Forged records naming the real reporter, with no MAC and a bogus one, and malformed ones."""
        def act() -> str:
            holder, producer = self._holder(), Producer({"bootstrap.servers": self.bootstrap, "client.id": HOSTILE_ID})
            valid = json.loads(forged_record(holder, time.time() - 5))
            values = [forged_record(holder, time.time() - 5), forged_record(holder, time.time() - 5),
                      json.dumps({**valid, "diagnoses": [{**valid["diagnoses"][0], "rule": []}]}).encode(),
                      b'{"a":' + b"[" * 200_000, forged_record(holder, -1e12),
                      forged_record(holder, time.time()).replace(b'"evidence": {}', b'"evidence": {"v": NaN}')]
            for i, value in enumerate(values):
                producer.produce(STATE, key=GROUP.encode(), value=value,
                                 headers=[("kdiag-mac", b"0" * 64)] if i == 1 else None)
            producer.flush(30)
            time.sleep(5)
            return f"{len(values)} forged and malformed records naming member {holder[:40]!r}"
        return self._window(act)

    def flood(self) -> str:
        """5 records of ~1 MB a second for 10 s, and one zstd record of 15.8 MB of JSON."""
        def act() -> str:
            producer = Producer({"bootstrap.servers": self.bootstrap, "client.id": HOSTILE_ID,
                                 "message.max.bytes": 20_000_000, "compression.type": "zstd"})
            holder, sent, t0 = self._holder(), 0, time.monotonic()
            while (elapsed := time.monotonic() - t0) < 10:
                if sent < elapsed * 5:
                    big = json.loads(forged_record(holder, time.time() - 5))
                    big["diagnoses"] = big["diagnoses"] * 1000
                    producer.produce(STATE, key=GROUP.encode(), value=json.dumps(big).encode())
                    sent += 1
                producer.poll(0.05)
            producer.produce(STATE, key=GROUP.encode(), value=json.dumps({"padding": "a" * 15_800_000}).encode())
            producer.flush(60)
            return f"{sent} records of ~1 MB and one zstd record of 15.8 MB"
        return self._window(act)

    def delete_topics(self) -> str:
        """Delete both coordination topics; the daemons create them again."""
        def act() -> str:
            t0 = time.monotonic()
            for future in self.admin.delete_topics([TOPIC, STATE], operation_timeout=10).values():
                with contextlib.suppress(Exception):  # already gone
                    future.result(timeout=30)
            back = False
            while time.monotonic() - t0 < 120 and not back:
                time.sleep(1)
                topics = self.admin.list_topics(timeout=10).topics
                back = TOPIC in topics and STATE in topics
            return f"coordination topics deleted; {'back' if back else 'NOT back'} after {time.monotonic() - t0:.0f} s"
        return self._window(act)

    def hijack(self) -> str:
        """Three consumers lead the emptied group (the daemons restarted behind them) and keep partition 0 for 40 s;
        the window (no daemon reporting) starts once the daemons answer again."""
        hijackers = [Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": HOSTILE_ID,
                               "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000})
                     for _ in range(3)]
        try:
            for h in hijackers:
                h.subscribe([TOPIC])
                h.poll(0.5)
            self.restart_daemons()  # they leave the group; the hijackers, first in, lead it

            def hold() -> str:
                held, t0 = "", time.monotonic()
                while time.monotonic() - t0 < 40:
                    for h in hijackers:
                        h.poll(0.1)
                    held = held or self._holder()
                mine = any(held == h.memberid() for h in hijackers)
                return f"hijackers {'held' if mine else 'did not get'} partition 0 for 40 s"
            return self._window(hold)
        finally:
            for h in hijackers:
                h.close()

    def summary(self) -> dict[str, Any]:
        """What the soak reports of the hostile client."""
        return {"forged_shown": self.forged_shown, "nobody_reported_seconds": round(self.nobody_reported, 1),
                "foreign_members_seen": self.foreign_seen, "refused": self.refused}
