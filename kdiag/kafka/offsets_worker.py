"""The __consumer_offsets reader's own process (`python -m kdiag.kafka.offsets_worker`), beside the AdminClient's.

It reads the topic from its start when it starts and then keeps up, whatever the AdminClient process does: a fetch
that fails or a librdkafka crash there (kdiag/core/worker_process.py) costs nothing of what was read here. Each
request is answered at once with what the reader has now: the share of its first read done and, once that is all,
the committed offsets of every group (asked `full`, and in its first such answer) or of the groups that changed since
its last answer; and the CPU seconds this process used since its last answer (its reader thread runs between
requests).
"""

from __future__ import annotations

import time
from typing import Any

from kdiag.core.worker_process import serve
from kdiag.kafka.client import ClientSettings, ErrorLog
from kdiag.kafka.offsets_topic import OffsetsTopicReader


def start(settings: dict[str, Any]) -> Any:
    """The request handler of one child: its reader, started now, answers every request."""
    client = ClientSettings(**settings["client"])
    bootstrap, timeout = settings["bootstrap_servers"], settings["timeout"]
    # Never joined: librdkafka only wants a group.id to make a consumer.
    errors = ErrorLog(client, bootstrap)
    reader = OffsetsTopicReader(client.client_conf(bootstrap, "kdiag", errors, timeout, {
        "request.timeout.ms": int(timeout * 1000), "group.id": "kdiag-offsets-reader"}))
    reader.start()
    answered, first = time.process_time(), True

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal answered, first
        read = reader.read()
        error = reader.error and (errors.reason() or client.redact(reader.error))
        answer: dict[str, Any] = {"read": read, "error": error, "malformed": reader.table.malformed}
        if read >= 1.0:
            answer["full"] = full = request.get("full", True) or first
            answer["groups"], first = reader.view(full), False
        now = time.process_time()
        answer["cpu"], answered = now - answered, now
        return answer

    return handle


if __name__ == "__main__":
    serve(start)
