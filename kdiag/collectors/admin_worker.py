"""The AdminClient's own process (`python -m kdiag.collectors.admin_worker`): one admin state per request.

A librdkafka crash here (see kdiag/worker_process.py) ends this process only; KafkaAdminCollector starts another.
"""

from __future__ import annotations

from typing import Any

from kdiag.collectors.kafka_admin import KafkaAdminError, fetch_admin_state
from kdiag.kafka_client import ClientSettings, ErrorLog
from kdiag.worker_process import serve


class AdminSession:
    """One reused AdminClient and what librdkafka last said about it; lives in the AdminClient's own process."""

    def __init__(self, bootstrap_servers: str, timeout: float, settings: ClientSettings):
        self.bootstrap_servers = bootstrap_servers
        self.timeout = timeout
        self.settings = settings
        self.errors = ErrorLog(settings, bootstrap_servers)
        self._admin: Any = None

    def admin(self) -> Any:
        """The AdminClient, created on first use."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            ms = int(self.timeout * 1000)
            self._admin = AdminClient(self.settings.conf(
                {"bootstrap.servers": self.bootstrap_servers, "client.id": "kdiag", "socket.timeout.ms": ms,
                 "request.timeout.ms": ms},
                self.errors))
        return self._admin

    def fetch(self) -> dict[str, Any]:
        """Live admin state; KafkaAdminError naming the bootstrap servers when the cluster fails to answer."""
        from confluent_kafka import KafkaException

        try:
            state = fetch_admin_state(self.admin(), self.timeout)
        except (KafkaException, TimeoutError) as e:
            admin, self._admin = self._admin, None
            # librdkafka keeps waiting for a controller it learnt before that broker died (until its next
            # metadata refresh, minutes away): a fresh client asks the live brokers again.
            if admin is not None:
                admin.poll(0)  # serves error_cb: an authentication or TLS failure says more than the timeout
            reason = self.errors.reason() or self.settings.redact(f"{type(e).__name__}: {e}")
            raise KafkaAdminError(f"Kafka at {self.bootstrap_servers}: {reason}") from None
        self._admin.poll(0)  # drains the librdkafka log lines queued for `errors`
        self.errors.clear()
        return state


def start(settings: dict[str, Any]) -> Any:
    """The request handler of one child: its AdminSession answers every fetch."""
    client = ClientSettings(props=settings["props"], given=settings["given"], prefix=settings["prefix"])
    session = AdminSession(settings["bootstrap_servers"], settings["timeout"], client)

    def handle(_request: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"state": session.fetch()}
        except KafkaAdminError as e:
            return {"error": str(e)}

    return handle


if __name__ == "__main__":
    serve(start)
