"""The AdminClient's own process (`python -m kdiag.kafka.admin_worker`): one admin state per request.

A librdkafka crash here (see kdiag/core/worker_process.py) ends this process only; KafkaAdminCollector starts another.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kdiag.kafka.admin import CommittedCache, ConfigCache, KafkaAdminError, fetch_admin_state
from kdiag.kafka.client import ClientSettings, ErrorLog
from kdiag.kafka.offsets_topic import OffsetsTopicReader
from kdiag.kafka.record_time import RecordTimes
from kdiag.kafka.state import AdminState
from kdiag.core.worker_process import serve


class AdminSession:
    """One reused AdminClient, a Consumer for log end offsets, the config cache and what librdkafka last said;
    lives in the AdminClient's own process."""

    def __init__(self, bootstrap_servers: str, timeout: float, settings: ClientSettings, configs_interval: float = 0.0,
                 quiet_groups_interval: float = 0.0, committed_offsets: str = "offset_fetch", top_partitions: int = 0):
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.top_partitions = top_partitions
        self.settings = settings
        self.configs = ConfigCache(configs_interval)
        self.committed = CommittedCache(quiet_groups_interval)
        self.errors = ErrorLog(settings, bootstrap_servers)
        self._admin: Any = None
        self._consumer: Any = None
        self.record_times = RecordTimes(self._conf)
        # Never joined: librdkafka only wants a group.id to make a consumer.
        self.reader = OffsetsTopicReader(self._conf(**{"group.id": "kdiag-offsets-reader"})) \
            if committed_offsets == "offsets_topic" else None

    def _conf(self, **extra: object) -> dict[str, Any]:
        return self.settings.client_conf(self.bootstrap_servers, "kdiag", self.errors, self.timeout,
                                         {"request.timeout.ms": int(self.timeout * 1000), **extra})

    def admin(self) -> Any:
        """The AdminClient, created on first use."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._conf())
        return self._admin

    def consumer(self) -> Any:
        """The Consumer that reads log end offsets; it never subscribes, joins its group or commits."""
        if self._consumer is None:
            from confluent_kafka import Consumer

            # librdkafka requires a group.id for any consumer; this one is never joined.
            self._consumer = Consumer(self._conf(**{"group.id": "kdiag-offsets", "enable.auto.commit": False}))
        return self._consumer

    def close(self) -> None:
        """Close the Consumer (the AdminClient has no close: it goes with its last reference)."""
        consumer, self._consumer, self._admin = self._consumer, None, None
        if consumer is not None:
            consumer.close()
        self.record_times.close()
        if self.reader is not None:
            self.reader.close()

    def _committed(self, group: str) -> dict[str, list[tuple[int, int]]]:
        """The group's committed offsets, from the source the fetch used."""
        return self.committed.get(group) if self.reader is None else self.reader.offsets([group])[group][0]

    def fetch(self, full: bool = True, local_broker: int | None = None,
              record_times: list[list[str]] | None = None) -> AdminState:
        """Live admin state (see fetch_admin_state for `full`); KafkaAdminError naming the bootstrap servers when the
        cluster fails to answer."""
        from confluent_kafka import KafkaException

        if not full and self.reader is not None:
            self.reader.close()  # a standby reads no cluster-wide state, __consumer_offsets included
        try:
            state = fetch_admin_state(self.admin(), self.consumer(), self.timeout, self.configs, self.committed, full,
                                      local_broker, self.reader, self.top_partitions)
        except (KafkaException, TimeoutError) as e:
            admin = self._admin
            # librdkafka keeps waiting for a controller it learnt before that broker died (until its next
            # metadata refresh, minutes away): fresh clients ask the live brokers again.
            if admin is not None:
                admin.poll(0)  # serves error_cb: an authentication or TLS failure says more than the timeout
            self.close()
            reason = self.errors.reason() or self.settings.redact(f"{type(e).__name__}: {e}")
            raise KafkaAdminError(f"Kafka at {self.bootstrap_servers}: {reason}") from None
        if record_times and state["consumer_groups"]:
            with contextlib.suppress(KafkaException):  # only the fallback of lag seconds is lost
                self.record_times.add_to(state, record_times, self._committed)
        if state.get("top_partitions"):
            with contextlib.suppress(KafkaException):  # only the fallback of partition lag seconds is lost
                self.record_times.add_to_partitions(state["top_partitions"])
        self._admin.poll(0)  # drains the librdkafka log lines queued for `errors`
        self._consumer.poll(0)
        self.errors.clear()
        return state


def start(settings: dict[str, Any]) -> Any:
    """The request handler of one child: its AdminSession answers every fetch."""
    client = ClientSettings(**settings["client"])
    session = AdminSession(settings["bootstrap_servers"], settings["timeout"], client, settings.get("configs_interval", 0.0),
                           settings.get("quiet_groups_interval", 0.0),
                           settings.get("committed_offsets", "offset_fetch"), settings.get("top_partitions", 0))

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"state": session.fetch(request.get("full", True), request.get("local_broker"),
                                           request.get("record_times"))}
        except KafkaAdminError as e:
            return {"error": str(e)}

    return handle


if __name__ == "__main__":
    serve(start)
