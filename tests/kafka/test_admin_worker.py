"""The AdminClient's own process: a crash or a hang there costs fetches until its restart after a backoff, never
kdiag; secrets stay off its argv."""

from __future__ import annotations

import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.waiting import wait_until

from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.admin import KafkaAdminError
from kdiag.kafka.client import ClientSettings


def state(pid: int) -> str:
    """The process state letter of pid, 'X' when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def dead(pid: int) -> bool:
    """Whether pid is gone or a zombie."""
    return state(pid) in "XZ"


def waiting_for_an_answer() -> bool:
    """Whether some thread is reading a worker's answer."""
    frames = sys._current_frames().values()
    return any(f.f_code.co_name == "_read_exactly" for frame in frames for f in _stack(frame))


def fetched(collector: KafkaAdminCollector) -> bool:
    """Whether a fetch succeeds (not while the AdminClient process waits out its restart backoff)."""
    try:
        return bool(collector.fetch()["cluster_id"])
    except KafkaAdminError:
        return False


def _stack(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


@pytest.mark.kafka
def test_a_segfault_in_the_admin_process_fails_fetches_until_a_new_one_starts_after_a_backoff(kafka_lab, caplog):
    collector = KafkaAdminCollector(kafka_lab["bootstrap"], timeout=10.0)
    try:
        assert collector.fetch()["cluster_id"]
        first = collector.worker.pid()
        # A death in the middle of a fetch (librdkafka's segfault comes mid-request): the child is stopped so the
        # fetch is surely in flight, then killed (SIGKILL: a signal a stopped process takes at once).
        os.kill(first, signal.SIGSTOP)
        wait_until(lambda: state(first) == "T", 30, "the admin process stopped")
        with ThreadPoolExecutor(1) as pool:
            fetching = pool.submit(collector.fetch)
            wait_until(waiting_for_an_answer, 30, "the fetch sent and waiting for the stopped child")
            os.kill(first, signal.SIGKILL)
            with pytest.raises(KafkaAdminError, match="the AdminClient process died from SIGKILL; restarting in 1 s"):
                fetching.result(60)
        wait_until(lambda: fetched(collector), 60, "a fetch through a new admin process")
        second = collector.worker.pid()
        assert second not in (None, first) and collector.worker.restarts == 1
        # A death between fetches fails the next one, with a warning; a second death in a row waits twice as long.
        os.kill(second, signal.SIGSEGV)
        wait_until(lambda: collector.worker.pid() is None, 30, "the second admin process gone after SIGSEGV")
        reason = "the AdminClient process died from SIGSEGV since its last answer; restarting in 2 s"
        with caplog.at_level(logging.WARNING), pytest.raises(KafkaAdminError, match=reason):
            collector.fetch()
        assert reason in caplog.text
        wait_until(lambda: fetched(collector), 60, "a fetch through a third admin process")
        assert collector.worker.restarts == 2
    finally:
        collector.close()
    assert collector.worker.pid() is None and dead(second)


@pytest.mark.integration
def test_a_hung_admin_process_is_stopped_at_the_deadline_and_replaced():
    collector = KafkaAdminCollector("127.0.0.1:1", timeout=1.0)
    try:
        with pytest.raises(KafkaAdminError, match=r"127\.0\.0\.1:1"):
            collector.fetch()  # nobody listens: the child answers with the error itself
        hung = collector.worker.pid()
        os.kill(hung, signal.SIGSTOP)
        with pytest.raises(KafkaAdminError, match=r"did not answer within [0-9.]+s, stopped it; restarting in 1 s"):
            collector.fetch()
        assert dead(hung)
        with pytest.raises(KafkaAdminError, match=r"did not answer within [0-9.]+s, stopped it; restarting in 1 s"):
            collector.fetch()  # still waiting out the backoff
        def answering() -> bool:
            with pytest.raises(KafkaAdminError) as error:
                collector.fetch()
            return "restarting" not in str(error.value)

        wait_until(answering, 30, "a new admin process answering with the cluster's error")
        assert collector.worker.pid() not in (None, hung)
    finally:
        collector.close()


@pytest.mark.integration
def test_the_admin_process_gets_its_secrets_on_a_pipe_never_on_argv():
    settings = ClientSettings.resolve({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                                       "sasl.username": "kdiag", "sasl.password": "hunter2-argv"})
    collector = KafkaAdminCollector("127.0.0.1:1", timeout=1.0, settings=settings)
    try:
        with pytest.raises(KafkaAdminError) as error:
            collector.fetch()
        assert "hunter2" not in str(error.value)
        pid = collector.worker.pid()
        assert b"hunter2" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"hunter2" not in Path(f"/proc/{pid}/environ").read_bytes()
    finally:
        collector.close()
