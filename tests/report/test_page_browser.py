"""The live page and the report as a person sees them: headless Chromium at 1280 and 390 px, every diagnosis shown, no
text overlapping or overflowing, no console error, no request leaving the page."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request

import pytest
from tests.waiting import wait_until

from tests.browser import WIDTHS, Browser
from tests.report.test_page import HOSTILE, drawing, hostile_state  # noqa: F401  (a fixture)
from tests.paths import RECORDINGS
from kdiag.core.quote import printable
from kdiag.report.page import LivePage

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


def kdiag(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdiag", *args], capture_output=True, text=True, timeout=timeout)


def assert_seen_well(look, wanted: set[tuple[str, str]], origin: str) -> None:
    assert look.errors == [] and look.layout == []
    assert [u for u in look.requests if not u.startswith(origin)] == []
    assert wanted <= set(look.attrs), wanted - set(look.attrs)


@pytest.mark.parametrize("recording", ["small-packet-storm", "foreign-io-scanner", "log-disk-misconfigured"])
def test_the_recording_report_at_both_widths(browser, tmp_path, recording):
    page = tmp_path / "report.html"
    run = kdiag("diagnose", "--from", str(RECORDINGS / recording), "--format", "html", "-o", str(page))
    assert run.returncode == 0, run.stderr
    final = json.loads(kdiag("diagnose", "--from", str(RECORDINGS / recording), "--format", "json").stdout)
    wanted = {(d["rule"], d["subject"]) for d in final["diagnoses"]}
    assert wanted
    for width in WIDTHS:
        look = browser.look(page.as_uri(), width)
        assert_seen_well(look, wanted, page.as_uri())
        assert "Fix:" in look.text and "fault window" not in look.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read()


def test_the_live_page_updates_itself_at_both_widths(browser, tmp_path):
    port = free_port()
    origin = f"http://127.0.0.1:{port}/"
    with open(tmp_path / "log", "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--from",
                                   str(RECORDINGS / "small-packet-storm"), "--listen", f"127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        def diagnosed() -> bool:
            try:
                return bool(json.loads(get(origin + "api/diagnoses"))["diagnoses"])
            except OSError:
                return False

        wait_until(diagnosed, 120, "the replaying daemon lists its diagnoses", [tmp_path / "log"])
        for width in WIDTHS:
            def refreshed(page) -> None:
                page.evaluate("window.keptAcrossUpdates = 1")
                # Polled from here: the page's policy lets no string be evaluated inside it.
                wait_until(lambda: page.evaluate("() => document.getElementById('status').textContent")
                           .startswith("live: updated"), 60, "the page updating itself")
                assert page.evaluate("window.keptAcrossUpdates") == 1  # swapped in place, not reloaded

            look = browser.look(origin, width, wait_for=refreshed)
            listed = json.loads(get(origin + "api/diagnoses"))["diagnoses"]
            assert_seen_well(look, {(d["rule"], d["subject"]) for d in listed}, origin)
            assert "Fix:" in look.text and "Network interfaces" in look.text and "Collectors" in look.text
    finally:
        daemon.terminate()
        daemon.wait(30)
    assert "Traceback" not in (tmp_path / "log").read_text()


def test_hostile_text_is_shown_as_text_in_the_browser(browser, tmp_path, hostile_state):  # noqa: F811
    page = tmp_path / "hostile.html"
    page.write_bytes(drawing(LivePage(900).update(hostile_state, 3600.0))[0])
    look = browser.look(page.as_uri(), 390)
    assert look.errors == [] and look.layout == [] and look.requests == [page.as_uri()]
    assert look.dom.count("<script") == 1 and "<img" not in look.dom
    assert all(printable(t) in look.text for t in HOSTILE[:5])
