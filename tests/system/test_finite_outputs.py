"""Issue 30 finding 7 and 8: a time no calendar can show or a non-finite number in a diagnosis leaves every output
working (the Alertmanager push, the page, the report, the state file, the JSON) and is counted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.analysis.catalog import load_catalog, default_rules_dir
from kdiag.analysis.engine import Diagnosis
from kdiag.analysis.statefile import StateFile
from kdiag.core.finite import SKIPPED, dumps
from kdiag.kafka.coordination import Reporting
from kdiag.report.page import LivePage
from tests.report.test_page import drawing
from kdiag.report.text import render_text
from kdiag.runtime.pipeline import State
from kdiag.serve.exporter import render_metrics

pytestmark = pytest.mark.integration  # the pusher's HTTP client reads /proc/stat
RULES = {r.id: r for r in load_catalog([default_rules_dir()])}
BAD_TIMES = [-1e12, -1e20, 1e20, math.nan, math.inf]


def strict(text: str) -> object:
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def state_with(since: float) -> State:
    d = Diagnosis(RULES["broker_down"], "1", since, "firing", "broker 1 is down",
                  {"up": math.nan, "rate": math.inf, "why": "gone"}, brokers=frozenset({"1"}))
    return State("h", 1_800_000_000.0, [], {}, {}, [d], cluster="c1", reporting=Reporting(True, None))


@pytest.mark.parametrize("since", BAD_TIMES)
def test_every_output_survives_a_time_or_number_it_cannot_show(since: float, tmp_path: Path) -> None:
    before = sum(SKIPPED.values())
    state = state_with(since)
    got = strict(dumps(state.to_json(), "api"))
    assert got["diagnoses"][0]["evidence"] == {"up": None, "rate": None, "why": "gone"}
    page, data = drawing(LivePage(900).update(state, 5.0))
    assert b"broker 1 is down" in page and strict(data.decode())
    assert "broker_down" in render_text(state)
    pusher = AlertPusher("http://127.0.0.1:1", "h")
    pusher._take(state, {})  # the push thread's step: it raised ValueError for -1e12 and stopped pushing
    (alert,) = [a for a in pusher._firing.values() if a["annotations"]]
    assert "startsAt" not in alert  # Alertmanager takes the time it receives it
    strict(json.dumps(alert))
    (tmp_path / "state").mkdir(mode=0o700)
    saved = StateFile(tmp_path / "state" / "state.json", "h")
    saved.save(state.diagnoses, force=True)
    strict((tmp_path / "state" / "state.json").read_text())
    saved.close()
    assert sum(SKIPPED.values()) > before
    assert 'kdiag_output_values_skipped_total{output="api"}' in render_metrics(state).decode()
