"""`kdiag run --no-collector`: the collector is not run, its series are gone, /metrics and the page say it is off."""

from __future__ import annotations

import urllib.request

import pytest
from tests.paths import FIXTURES
from tests.promstack import Stack

pytestmark = pytest.mark.integration

HOST = FIXTURES / "host-vm2"


def get(address: str, path: str) -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
        return r.read().decode()


def test_kdiag_run_with_diskstats_off_exports_no_disk_series_and_shows_it_off(tmp_path):
    config = tmp_path / "kdiag.yaml"
    config.write_text('state_dir: ""\ncollectors:\n  vmstat: false\n')
    stack = Stack(tmp_path)
    try:
        address = stack.kdiag_live("--no-discover", "--config", str(config), "--procfs", str(HOST / "proc"),
                                   "--sysfs", str(HOST / "sys"), "--no-collector", "diskstats", "--collector", "vmstat")
        metrics = get(address, "/metrics")
        page = get(address, "/")
    finally:
        stack.close()
    assert 'kdiag_collector_enabled{collector="diskstats"} 0.0' in metrics
    assert 'kdiag_collector_enabled{collector="vmstat"} 1.0' in metrics  # the flag over the config file
    assert 'kdiag_collector_success{collector="vmstat"} 1.0' in metrics
    assert 'kdiag_collector_success{collector="diskstats"}' not in metrics
    assert "\nkdiag_cpu_seconds_total{" in metrics
    assert not [line for line in metrics.splitlines() if line.startswith("kdiag_disk_")]
    assert "<td>diskstats</td><td>off</td>" in page
