"""The synthetic probe in its own process (`python -m kdiag.probe.process`): a librdkafka abort or segfault in its
producer or consumer ends that process only, and the daemon starts another after a backoff."""

from __future__ import annotations

import atexit
import dataclasses
from typing import Any

from kdiag.config.probe import ProbeConfig
from kdiag.core.sample import Sample
from kdiag.core.worker_process import WorkerError, WorkerProcess, serve
from kdiag.families.probe import PROBE_UP
from kdiag.kafka.client import ClientSettings
from kdiag.probe.probe import ProbeService

# Seconds the daemon's cycle waits for the probe's counters; the child answers from memory, but a first answer may
# explain a TLS refusal (one connection of its own).
ANSWER_TIMEOUT = 10.0


class ProbeProcess:
    """The daemon's handle on the probe's process: start, its health and samples once per cycle, stop."""

    def __init__(self, bootstrap_servers: str, config: ProbeConfig, instance: str, settings: ClientSettings):
        self.worker = WorkerProcess(__name__, {
            "bootstrap_servers": bootstrap_servers, "config": dataclasses.asdict(config), "instance": instance,
            "client": dataclasses.asdict(settings)},
            "the probe process")

    def start(self) -> None:
        """Start the probe's process; returns at once."""
        self.worker.start()

    def status(self) -> tuple[bool, str, list[Sample]]:
        """(up, what is wrong, samples) as the probe sees them; down with the death and its restart while it is dead."""
        try:
            answer = self.worker.request({"status": True}, ANSWER_TIMEOUT)
        except WorkerError as e:
            return False, str(e), [PROBE_UP.sample(0.0)]
        return answer["up"], answer["error"], [Sample(*s) for s in answer["samples"]]

    def stop(self) -> None:
        """Stop the probe (its producer flushes) and its process."""
        self.worker.close()


def start(settings: dict[str, Any]) -> Any:
    """The request handler of the probe's process: its ProbeService runs on threads here."""
    client = ClientSettings(**settings["client"])
    probe = ProbeService(settings["bootstrap_servers"], ProbeConfig(**settings["config"]), settings["instance"], client)
    probe.start()
    atexit.register(probe.stop)  # stdin closed: the daemon stops, and outstanding sends get their reports

    def handle(_request: dict[str, Any]) -> dict[str, Any]:
        up, error = probe.health()
        # marshal takes plain tuples only
        return {"up": up, "error": error, "samples": [tuple(s) for s in probe.samples()]}

    return handle


if __name__ == "__main__":
    serve(start)
