"""The AdminClient's own process (`python -m kdiag.kafka.admin_worker`): one admin state per request.

A librdkafka crash here (see kdiag/core/worker_process.py) ends this process only; KafkaAdminCollector starts another.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kdiag.kafka.admin import KafkaAdminError, fetch_admin_state
from kdiag.kafka.configs import ConfigCache
from kdiag.kafka.committed import CommittedCache
from kdiag.kafka.client import ClientSettings, ErrorLog
from kdiag.kafka.group_offsets import BatchedReads
from kdiag.kafka.offsets_topic import OffsetsView
from kdiag.kafka.record_time import RecordTimes
from kdiag.kafka.state import AdminState
from kdiag.core.worker_process import serve


class AdminSession:
    """One reused AdminClient, a Consumer for log end offsets, kafka-python's client for batched committed offsets,
    the config cache and what librdkafka last said; lives in the AdminClient's own process."""

    def __init__(self, bootstrap_servers: str, timeout: float, settings: ClientSettings, configs_interval: float = 0.0,
                 quiet_groups_interval: float = 0.0, top_partitions: int = 0):
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
        self.view = OffsetsView()  # the __consumer_offsets reader's table, as the collector passes it on
        self.batch = BatchedReads(settings, bootstrap_servers, timeout)

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
        """Close the Consumer and the batched reader (the AdminClient has no close: it goes with its last reference)."""
        consumer, self._consumer, self._admin = self._consumer, None, None
        if consumer is not None:
            consumer.close()
        self.record_times.close()
        self.batch.close()

    def fetch(self, full: bool = True, local_broker: int | None = None,
              record_times: list[list[str]] | None = None, view: OffsetsView | None = None) -> AdminState:
        """Live admin state (see fetch_admin_state for `full`), committed offsets from `view` when given (the
        __consumer_offsets reader's); KafkaAdminError naming the bootstrap servers when the cluster fails to answer."""
        from confluent_kafka import KafkaException

        try:
            state = fetch_admin_state(self.admin(), self.consumer(), self.timeout, self.configs, self.committed, full,
                                      local_broker, view, self.top_partitions, self.batch)
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
                self.record_times.add_to(state, record_times, self.committed.get if view is None or not view.caught_up
                                         else lambda g: view.offsets(g)[0])
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
                           settings.get("quiet_groups_interval", 0.0), settings.get("top_partitions", 0))

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        view = request.get("committed")
        if view is not None:
            session.view.update(view)
        try:
            return {"state": session.fetch(request.get("full", True), request.get("local_broker"),
                                           request.get("record_times"), None if view is None else session.view)}
        except KafkaAdminError as e:
            return {"error": str(e)}

    return handle


if __name__ == "__main__":
    serve(start)
