"""The daemon's handle on the election, whose Coordinator runs in a process of its own (`python -m` this module).

librdkafka has aborted in its describe (rd_kafka_enq_once_del_source_return) while a fresh cluster answered
NOT_COORDINATOR: such a death costs the election only, and the daemon does not report until a new process has joined.
The process sends the state record it took only when it is new: a record is never re-sent over the pipe unchanged.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import logging
from typing import Any

from kdiag.core.sample import Sample
from kdiag.core.worker_process import WorkerError, WorkerProcess, serve
from kdiag.families.own import (
    COORDINATION_AUTHENTICATED,
    COORDINATION_FOREIGN_MEMBERS,
    COORDINATION_RECORDS_REFUSED_TOTAL,
)
from kdiag.kafka.client import ClientSettings
from kdiag.kafka.coordination import ANSWER_TIMEOUT, Coordinator, Reporting
from kdiag.kafka.coordination_records import REASONS, Member

FAMILIES = (COORDINATION_FOREIGN_MEMBERS, COORDINATION_RECORDS_REFUSED_TOTAL, COORDINATION_AUTHENTICATED)

log = logging.getLogger(__name__)


class CoordinatorProcess:
    """The daemon's handle on the election; while the process is dead (or waits out its restart backoff) this daemon
    does not report and knows no reporter."""

    def __init__(self, bootstrap: str, settings: ClientSettings, me: Member, topic: str, group: str,
                 mode: str = "auto", timeout: float = 10.0, key: bytes | None = None,
                 rule_ids: frozenset[str] = frozenset()):
        self.me = me
        self.authenticated = key is not None
        self._reporting = (Reporting(True, me, "kafka.cluster_scope is always", self.authenticated) if mode == "always"
                           else Reporting(False, None, "the coordination process has not answered yet",
                                          self.authenticated))
        self.outgoing: dict[str, Any] | None = None  # the record the next poll publishes
        self.published: dict[str, Any] | None = None  # the last state record taken from the state topic
        self._seq = 0  # the coordination process's count of records taken, as of `published`
        self.samples: list[Sample] = []  # the election's own series, as of the last poll
        self.worker = None if mode == "always" else WorkerProcess(__name__, {
            "bootstrap": bootstrap, "me": [me.host, me.broker_id], "topic": topic, "group": group, "mode": mode,
            "timeout": timeout, "client": dataclasses.asdict(settings), "key": key.hex() if key else None,
            "rules": sorted(rule_ids)}, "the coordination process")

    def start(self) -> None:
        """Start the coordination process (none with cluster_scope: always); returns at once."""
        if self.worker:
            self.worker.start()

    def poll(self) -> tuple[bool, str]:
        """Ask the coordination process who reports now (kept for reporting()); (working, what is wrong)."""
        assert self.worker is not None
        request: dict[str, Any] = {"reporting": True, "seq": self._seq}
        if self.outgoing is not None:
            request["publish"], self.outgoing = self.outgoing, None
        try:
            answer = self.worker.request(request, ANSWER_TIMEOUT)
        except WorkerError as e:
            self._reporting = Reporting(False, None, "the coordination process does not answer", self.authenticated)
            self._seq = -1  # a new process counts from 0 again: take its first record whatever its count
            return False, str(e)
        if answer["seq"] != self._seq:
            self.published, self._seq = answer["published"], answer["seq"]
        reporter = answer["reporter"]
        self._reporting = Reporting(answer["reporting"], Member(*reporter) if reporter else None, answer["why"],
                                    self.authenticated)
        self.samples = [COORDINATION_FOREIGN_MEMBERS.sample(float(answer["foreign"])),
                        COORDINATION_AUTHENTICATED.sample(float(self.authenticated)),
                        *(COORDINATION_RECORDS_REFUSED_TOTAL.sample(float(answer["refused"].get(r, 0)), reason=r) for r in REASONS)]
        return not answer["problem"], answer["problem"]

    def reporting(self) -> Reporting:
        """Whether this daemon reports, as of the last poll()."""
        return self._reporting

    def publish(self, record: dict[str, Any]) -> None:
        """Hand the reporter's cluster-scope state to the next poll(), which publishes it to the state topic."""
        self.outgoing = record

    def stop(self) -> None:
        """Leave the group (the process's Coordinator closes its consumer) and end the process."""
        if self.worker:
            self.worker.close()


def start(settings: dict[str, Any]) -> Any:
    """The request handler of the coordination process: its Coordinator's thread runs the election here."""
    client = ClientSettings(**settings["client"])
    key = bytes.fromhex(settings["key"]) if settings.get("key") else None
    coordinator = Coordinator(settings["bootstrap"], client, Member(*settings["me"]), settings["topic"],
                              settings["group"], settings["mode"], settings["timeout"], key,
                              frozenset(settings.get("rules", [])))
    coordinator.start()
    atexit.register(coordinator.stop)  # stdin closed: the daemon stops, and LeaveGroup hands partition 0 over at once

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        if "publish" in request:
            try:
                coordinator.publish(request["publish"])
            except Exception as e:  # BufferError, KafkaException: this record is lost, the next cycle sends another
                log.warning("publishing to %s failed: %s", coordinator.state_topic,
                            coordinator.settings.redact(f"{type(e).__name__}: {e}"))
        now = coordinator.reporting()
        reporter = [now.reporter.host, now.reporter.broker_id] if now.reporter else None
        seq = coordinator.published_seq
        return {"reporting": now.reporting, "reporter": reporter, "why": now.why, "problem": coordinator.problem,
                "seq": seq, "published": coordinator.published if seq != request.get("seq") else None,
                "foreign": len(coordinator.foreign), "refused": dict(coordinator.refused)}

    return handle


if __name__ == "__main__":
    # The handler of the module imported by its name, whose log lines then say kdiag.kafka.coordination_process.
    serve(importlib.import_module(__spec__.name).start)
