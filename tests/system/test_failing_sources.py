"""A failing collector on /api/diagnoses and the page: which rules it blinds, its error escaped (issue 35 item 4)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from kdiag.app.wiring import replay
from kdiag.config.settings import Config
from kdiag.recording.recording import Recording
from kdiag.report.page import LivePage
from kdiag.serve.exporter import Published
from kdiag.serve.webserver import Exporter
from tests.paths import FIXTURES

sys.path.insert(0, str(FIXTURES))
import nic_irq_cpu5

pytestmark = pytest.mark.integration

HOSTILE = "<img src=x onerror=alert(1)>"


def get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return bytes(r.read())


def test_the_api_and_the_page_say_what_a_failing_collector_blinds(tmp_path: Path) -> None:
    # The NIC steered to CPU 5, with /proc/softirqs unreadable: the cause needs NET_RX per CPU, so it cannot hold.
    top = nic_irq_cpu5.write(tmp_path / HOSTILE)
    for snap in top.glob("0*"):
        (snap / "proc/softirqs").unlink()
    state = replay(Recording(top), Config())
    assert "nic_irq_single_core" not in {d.rule.id for d in state.diagnoses}
    assert "softirq_core_saturated" in {d.rule.id for d in state.diagnoses}
    published = Published()
    published.publish(state)
    draw = LivePage(300.0).update(state, 5.0)
    assert draw is not None
    published.publish_page(draw)
    server = Exporter("127.0.0.1:0", published)
    server.start()
    try:
        api = json.loads(get(server.port, "/api/diagnoses"))
        page = get(server.port, "/").decode()
    finally:
        server.stop()
    failing = {f["collector"]: f for f in api["failing_sources"]}
    assert "nic_irq_single_core" in failing["softirqs"]["blinds"]
    assert HOSTILE in failing["softirqs"]["error"]  # JSON carries the path as data
    assert "Sources failing" in page and "<b>softirqs</b> fails" in page
    assert "nic_irq_single_core" in page[page.index("<b>softirqs</b>"):]
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
