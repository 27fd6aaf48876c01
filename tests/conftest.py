"""Shared fixtures: the local Kafka lab, when one is running."""

from __future__ import annotations

import os

import pytest
from confluent_kafka.admin import AdminClient

from kdiag.lab import read_lab


@pytest.fixture(scope="session")
def kafka_lab() -> dict:
    """lab.json of the running `kdiag lab`; skips (fails under KDIAG_REQUIRE_KAFKA=1) when there is none."""
    info = read_lab()
    problem = None
    if info is None:
        problem = "no Kafka lab running: start one with `kdiag lab up --brokers 3`"
    else:
        try:
            AdminClient({"bootstrap.servers": info["bootstrap"]}).list_topics(timeout=10)
        except Exception as e:  # the lab's pids live but the cluster does not answer
            problem = f"Kafka lab at {info['bootstrap']} does not answer: {e}"
    if problem:
        if os.environ.get("KDIAG_REQUIRE_KAFKA") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return info
