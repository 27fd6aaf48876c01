"""Test tiers (tests/tiers.py), `--require-services`, `--own-lab`, and the shared fixtures: the local Kafka lab and the
secured (sasl_ssl) lab, when they are running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from tests import services
from tests import tiers
from kdiag.tools.lab.lab import read_lab


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-services", action="store_true",
                     help="a missing Kafka lab, Prometheus, Alertmanager or external binary fails the test, not skips it")
    parser.addoption("--own-lab", action="store_true",
                     help="the Kafka lab is this run's own: the drills may stop its brokers and set cluster-wide configs")


def pytest_configure(config: pytest.Config) -> None:
    services.REQUIRED = config.getoption("require_services")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test exactly one tier marker (tests/tiers.py)."""
    for item in items:
        tier = tiers.tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(tier)


@pytest.fixture(autouse=True)
def unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that reaches the network, a subprocess or the live /proc and /sys fails."""
    if request.node.get_closest_marker("unit"):
        tiers.guard_unit(monkeypatch)


@pytest.fixture(scope="session")
def kafka_lab() -> dict:
    """lab.json of the running `kdiag lab`; skips (fails under --require-services) when there is none."""
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
        services.unavailable(problem)
    return info


def secure_lab_dir() -> Path:
    """Directory of the sasl_ssl lab: $KDIAG_SECURE_LAB_DIR or ~/.cache/kdiag/lab-sasl_ssl."""
    env = os.environ.get("KDIAG_SECURE_LAB_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kdiag" / "lab-sasl_ssl"


def lab_client_conf(config_path: str | Path) -> dict:
    """librdkafka settings of a lab's kdiag.yaml, its password files read in, for the tests' own clients."""
    kafka = yaml.safe_load(Path(config_path).read_text())["kafka"]
    conf = {"bootstrap.servers": kafka["bootstrap_servers"]}
    for key, value in (kafka.get("client") or {}).items():
        if key.endswith("_file"):
            conf[key.removesuffix("_file")] = Path(value).read_text().strip()
        else:
            conf[key] = value
    return conf


@pytest.fixture(scope="session")
def secure_lab() -> dict:
    """The running sasl_ssl lab: its lab.json plus "config" (DIR/kdiag.yaml), "client" (librdkafka settings with
    the SASL password in clear, for tests' own clients) and "password"; skips (fails under --require-services)
    when none runs at secure_lab_dir(). Start it as CI does:
    KDIAG_LAB_DIR=~/.cache/kdiag/lab-sasl_ssl kdiag lab up --brokers 1 --security sasl_ssl --base-port 9192"""
    d = secure_lab_dir()
    info = read_lab(d)
    if info is None or info.get("security") != "sasl_ssl":
        services.unavailable(f"no sasl_ssl lab running in {d}: start one with `KDIAG_LAB_DIR={d} kdiag lab up "
                     "--brokers 1 --security sasl_ssl --base-port 9192`")
    config = d / "kdiag.yaml"
    client = lab_client_conf(config)
    try:
        AdminClient(client).list_topics(timeout=10)
    except Exception as e:  # the lab's pids live but the cluster does not answer
        services.unavailable(f"sasl_ssl lab at {info['bootstrap']} does not answer: {e}")
    return {**info, "config": str(config), "client": client, "password": client["sasl.password"]}
