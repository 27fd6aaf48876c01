"""The Grafana dashboards: well formed, every query parses (promtool) and returns data from a real Prometheus scraping kdiag."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from promstack import ROOT, Stack, binary, get_json, query
from waiting import wait_until

DASHBOARDS = ROOT / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
# Diagnoses and Host panels must return data from any kdiag; Kafka and probe series exist only with a cluster.
STRICT = {"kdiag-diagnoses", "kdiag-host"}
GRAFANA_INTERVALS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
METRIC = re.compile(r"\bkdiag_\w+")


def panels(board: dict) -> list[dict]:
    """Every panel, including those nested in collapsed rows."""
    out = []
    for p in board["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def targets() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title + refId, PromQL) of every query of every dashboard."""
    out = []
    for f in FILES:
        board = json.loads(f.read_text())
        for p in panels(board):
            out += [(board["uid"], f"{p['title']}/{t['refId']}", t["expr"]) for t in p.get("targets", [])]
    return out


def concrete(expr: str) -> str:
    """A panel query with Grafana's intervals and the dashboard variables (`=~"$var"` matchers) filled in."""
    for name, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(name, value)
    return VARIABLE.sub(".+", expr)


TARGETS = targets()


def test_dashboards_are_well_formed() -> None:
    assert {f.stem for f in FILES} == {"kdiag-diagnoses", "kdiag-host", "kdiag-kafka", "kdiag-probe"}
    for f in FILES:
        board = json.loads(f.read_text())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["DS_PROMETHEUS"]["type"] == "datasource"
        assert variables["instance"]["definition"] == "label_values(kdiag_build_info, instance)"
        if f.stem in ("kdiag-kafka", "kdiag-probe"):
            assert "broker_id" in variables
        ids = [p["id"] for p in panels(board)]
        assert len(ids) == len(set(ids)), f"{f.name}: duplicate panel ids"
        for p in panels(board):
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, f"{f.name}: {p['title']}"
            assert p["targets"], f"{f.name}: {p['title']} has no query"
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${DS_PROMETHEUS}"
                # A variable anywhere but in a regex matcher would not survive Grafana's multi-value formatting.
                for m in VARIABLE.finditer(t["expr"]):
                    assert m.group(0) in GRAFANA_INTERVALS or t["expr"][m.start() - 3:m.start()] == '=~"', t["expr"]


def test_provisioning_points_at_the_dashboards() -> None:
    providers = yaml.safe_load((DASHBOARDS / "provisioning" / "dashboards.yml").read_text())["providers"]
    sources = yaml.safe_load((DASHBOARDS / "provisioning" / "datasources.yml").read_text())["datasources"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards/kdiag"]
    assert [(s["type"], s["isDefault"]) for s in sources] == [("prometheus", True)]


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    promtool = binary("promtool")
    exprs = [concrete(e) for _, _, e in TARGETS]
    for f in FILES:
        for v in json.loads(f.read_text())["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.+), *(\w+)\)", v["definition"])
                assert m, v["definition"]
                exprs.append(concrete(m.group(1)))
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


@pytest.fixture(scope="session")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real Prometheus that has scraped a kdiag replaying a cause, the symptom it explains and a lint."""
    stack = Stack(tmp_path_factory.mktemp("dashboards-stack"))
    try:
        kdiag = stack.kdiag("small-packet-storm-retransmits")
        prometheus = stack.prometheus(kdiag)
        # Two kdiag snapshots (5 s apart) inside the rate windows, and a diagnosis of each kind with its evidence.
        wait_until(lambda: query(prometheus, "count_over_time(kdiag_build_info[1m]) >= 8")
                   and len(query(prometheus, "count by (kind) (kdiag_diagnosis_active)")) == 3
                   and query(prometheus, "kdiag_diagnosis_evidence"), 60, "8 scrapes and diagnoses of each kind", stack.logs)
        names = set(get_json(f"{prometheus}/api/v1/label/__name__/values")["data"])
        yield {"prometheus": prometheus, "names": names, "instance": kdiag}
    finally:
        stack.close()


def test_instance_variable_finds_kdiag(scraped: dict) -> None:
    values = get_json(f"{scraped['prometheus']}/api/v1/label/instance/values?match[]=kdiag_build_info")["data"]
    assert values == [scraped["instance"]]


@pytest.mark.parametrize(("uid", "panel", "expr"), TARGETS, ids=[f"{u}:{p}" for u, p, _ in TARGETS])
def test_panel_query_returns_data(scraped: dict, uid: str, panel: str, expr: str) -> None:
    missing = sorted(set(METRIC.findall(expr)) - scraped["names"])
    if missing and uid not in STRICT:
        pytest.skip(f"the kdiag under test exports no {', '.join(missing)}: that collector needs a Kafka cluster "
                    "(--bootstrap-servers) or the probe, which a replayed host recording has not")
    assert query(scraped["prometheus"], concrete(expr)), f"{uid} / {panel}: no data for {concrete(expr)}"
