"""Text from outside (process names, group ids, topics, interfaces, mount points) in every output: /metrics parses with
promtool and prometheus_client and stays fresh, /api/diagnoses is JSON, the Alertmanager payload and the HTML report hold."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.promstack import binary
from tests.waiting import wait_until
from tests.paths import FIXTURES

from kdiag.alerting.alertmanager import AlertPusher, exported_labels
from kdiag.analysis.catalog import load_catalog
from kdiag.collectors.kafka.admin_samples import samples_from_admin_state
from kdiag.collectors.host.netclass import NetclassCollector
from kdiag.config.settings import Config
from kdiag.app.wiring import host_collectors
from kdiag.analysis.engine import Engine, EngineState
from kdiag.core.quote import printable
from kdiag.serve.exporter import FamilyCache, Published, render_metrics
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.report.html import recording_report
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, HISTOGRAM, sample

pytestmark = pytest.mark.integration


def one_per_category() -> list[str]:
    """The first code point of every Unicode general category (Cs: a lone surrogate, Cn: an unassigned one)."""
    found: dict[str, str] = {}
    for code in range(0x110000):
        found.setdefault(unicodedata.category(chr(code)), chr(code))
        if len(found) == 30:
            break
    return list(found.values())


LINE_BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
CHARS = sorted({*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), *LINE_BREAKS, chr(0xD800), chr(0xDFFF),
                '"', "\\", "{", "}", "=", ",", "#", " ", "\u202e", "\ufeff", *one_per_category()})


def hostile(c: str) -> str:
    """The character at the start, the end, before `# ` and inside a fake label set."""
    return f'{c}a {c}# b{{x="{c}"}} \\{c}'


HOSTILE = [hostile(c) for c in CHARS]
# Subjects reach CEL, which takes no lone surrogate; kdiag reads /proc and /sys text with errors="replace".
SUBJECTS = [t for t in HOSTILE if t.encode(errors="surrogatepass").decode(errors="replace") == t]
LABELS = ("comm", "cmdline", "cwd", "group", "topic", "device", "mountpoint", "path", "client_id", "interface")


def promtool_parses(text: bytes) -> None:
    """promtool check metrics finds no format error (exit 3 is its lint about names, which this test does not judge)."""
    out = subprocess.run([binary("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert out.returncode in (0, 3) and b"error while linting" not in out.stderr, out.stderr.decode()[-2000:]


def parsed(text: bytes) -> dict:
    """Family name -> family, by prometheus_client's own text parser."""
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def label_paths(v: float) -> list:
    """One series per hostile string on every label name kdiag exports from outside text, in each family type."""
    out = []
    for i, text in enumerate(HOSTILE):
        for label in LABELS:
            out.append(sample(f"kdiag_hostile_{label}", v, GAUGE, **{label: text}))
        out.append(sample("kdiag_hostile_reads_total", v, COUNTER, topic=text, n=i))
        out.append(sample("kdiag_hostile_seconds_bucket", v, HISTOGRAM, group=text, le="+Inf"))
        out.append(sample("kdiag_hostile_seconds_count", v, HISTOGRAM, group=text))
    return out


def admin_state() -> dict:
    """The captured AdminClient state with every consumer group and topic renamed to hostile text."""
    state = json.loads((FIXTURES / "kafka" / "admin-state.json").read_text())
    groups = list(state["consumer_groups"].values())
    topics = list(state["topics"].items())
    state["consumer_groups"] = {f"adv{name}": copy.deepcopy(groups[i % len(groups)]) for i, name in enumerate(HOSTILE)}
    for g in state["consumer_groups"].values():
        g["lag"] = {HOSTILE[0]: next(iter(g["lag"].values()))}
    state["topics"] = {name: copy.deepcopy(topics[i % len(topics)][1]) for i, name in enumerate(HOSTILE[:40])}
    return state


TOPIC_RULE = """\
- id: skew
  kind: cause
  severity: warning
  each: topic
  when: it.leader_skew_ratio > 2.0
  summary: "{it.name} skewed"
  evidence: [it.leader_skew_ratio]
  remediation: none
  source: tests
"""


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> State:
    """A state whose samples and diagnoses carry every hostile string: synthetic series, the admin state, netclass."""
    rules = tmp_path_factory.mktemp("rules") / "r.yaml"
    rules.write_text(TOPIC_RULE)
    signals = {"topic": {t: {"name": t, "leader_skew_ratio": 3.0} for t in SUBJECTS}}
    diagnoses = Engine(load_catalog([rules])).evaluate(EngineState(), 0.0, signals).current()
    assert {d.subject for d in diagnoses} == set(SUBJECTS)
    sysfs = tmp_path_factory.mktemp("sys")
    for name in HOSTILE:
        if "/" not in name and "\0" not in name and not 0xD800 <= ord(name[0]) <= 0xDFFF:
            nic = sysfs / "class" / "net" / name
            (nic / "queues" / "rx-0").mkdir(parents=True)
            for attr, text in (("speed", "1000\n"), ("operstate", "up\n"), ("mtu", "1500\n")):
                (nic / attr).write_text(text)
    collected = [*samples_from_admin_state(admin_state()), *NetclassCollector().collect(Root(sys=sysfs))]
    assert len({dict(s.labels)["device"] for s in collected if s.name == "kdiag_network_up"}) > 100
    return State("h\x1c# host\u2028", 1.0, [*label_paths(1.0), *collected], {}, signals, diagnoses, cluster="c\x1c#\n")


def test_label_value_escapes_what_is_not_printable():
    assert printable("kafka-0 /data") == "kafka-0 /data"
    assert printable(f"a \x1c# b\u2028\n{chr(0xD800)}\U000e0001") == "a \\x1c# b\\u2028\\x0a\\ud800\\U000e0001"
    assert all(printable(text).isprintable() for text in HOSTILE)


def test_every_label_path_parses_and_stays_fresh_over_cycles(state):
    published = Published()
    for cycle in range(3):  # rendered, then cached prefixes with new values, then the same again
        moved = State(state.host, state.time + cycle, [s._replace(value=s.value + cycle) for s in state.samples],
                      {}, state.signals, state.diagnoses, cluster=state.cluster)
        published.publish(moved)
        promtool_parses(published.metrics)
        fams = parsed(published.metrics)
        assert fams["kdiag_last_cycle_timestamp_seconds"].samples[0].value == state.time + cycle
        for label in LABELS:
            got = {s.labels[label]: s.value for s in fams[f"kdiag_hostile_{label}"].samples}
            assert got == {printable(t): 1.0 + cycle for t in HOSTILE}, label
        assert len(fams["kdiag_hostile_seconds"].samples) == 2 * len(HOSTILE)
        lag = fams["kdiag_kafka_consumergroup_lag"].samples
        assert {s.labels["group"] for s in lag} == {printable(f"adv{t}") for t in HOSTILE}
        assert {s.labels["cluster"] for s in lag} == {"c\\x1c#\\x0a"}
        active = fams["kdiag_diagnosis_active"].samples
        assert {s.labels["subject"] for s in active} == {printable(t) for t in SUBJECTS}
        assert "kdiag_render_errors" not in fams or not fams["kdiag_render_errors"].samples
        diagnoses = json.loads(published.diagnoses)
        assert {d["subject"] for d in diagnoses["diagnoses"]} == set(SUBJECTS)
    assert published.health() == (200, b"ok\n")


def test_alertmanager_payload_is_json_with_the_labels_prometheus_sends(state):
    pusher = AlertPusher("http://127.0.0.1:9/", "h\x1c# host")
    pusher._take(state, {})
    body = json.loads(json.dumps(list(pusher._firing.values())))
    active = parsed(render_metrics(state))["kdiag_diagnosis_active"].samples
    assert {a["labels"]["subject"] for a in body} == {s.labels["subject"] for s in active}
    assert all(v.isprintable() for a in body for v in a["labels"].values())


def test_html_report_escapes_every_subject(state):
    page = recording_report("rec\x1c<b>", [state, State(state.host, 2.0, [], {}, state.signals, state.diagnoses)])
    assert "<b>" not in page and '{x="' not in page
    page.encode()  # no lone surrogate


def test_a_family_that_cannot_be_rendered_is_left_out_and_counted():
    cache = FamilyCache()
    good = [sample("kdiag_good", 1.0, device="sda")]
    bad = [sample("kdiag_bad", 1.0, device="sda")._replace(value="not a number")]
    for cycle in (1, 2):
        text = render_metrics(State("h", 0.0, [*good, *bad], {}, {}, []), cache)
        promtool_parses(text)
        fams = parsed(text)
        assert "kdiag_bad" not in fams and fams["kdiag_good"].samples[0].value == 1.0
        assert [(s.labels, s.value) for s in fams["kdiag_render_errors"].samples] == [({"family": "kdiag_bad"}, cycle)]


BUSY = """\
import sys, time
open("/proc/self/comm", "w").write(sys.argv[1])
end = time.monotonic() + 120
while time.monotonic() < end:
    pass
"""


def test_a_process_named_with_line_breaks_leaves_metrics_parseable_and_fresh():
    name = "a\u2028# x\x1c# b\nc"  # split at \u2028 and \x1c, the line before `# ` had no space: old kdiag raised
    proc = subprocess.Popen([sys.executable, "-c", BUSY, name, "--x=\x1c# y\u2029\n\x85z"])
    try:
        wait_until(lambda: Path(f"/proc/{proc.pid}/comm").read_text() == name + "\n", 30, "the process renamed itself")
        collectors = CollectorSet(host_collectors(Config()))
        pipeline = Pipeline(collectors, [], "testhost")
        published = Published()

        def cycle() -> bool:
            state = pipeline.step(Root())
            published.publish(state)
            promtool_parses(published.metrics)
            fams = parsed(published.metrics)
            assert fams["kdiag_last_cycle_timestamp_seconds"].samples[0].value == state.time
            info = [s for s in fams["kdiag_process_info"].samples if s.labels["pid"] == str(proc.pid)]
            return bool(info) and info[0].labels["comm"] == printable(name)

        wait_until(cycle, 60, "the busy process among the exported processes")
    finally:
        proc.kill()
        proc.wait()


def test_a_long_label_value_is_cut_and_two_long_ids_stay_apart() -> None:
    long_a, long_b = "g" * 30_008, "g" * 30_000 + "-other"  # the same first 300 characters
    samples = [sample("kdiag_consumer_lag_messages", 1.0, GAUGE, group=long_a, topic="t"),
               sample("kdiag_consumer_lag_messages", 2.0, GAUGE, group=long_b, topic="t")]
    text = FamilyCache().render([samples])
    promtool_parses(text)
    values = [s.labels["group"] for f in text_string_to_metric_families(text.decode()) for s in f.samples]
    assert len(values) == 2 and values[0] != values[1]
    assert all(len(v) == 309 and v.startswith("g" * 300 + "…") for v in values)
    assert exported_labels({"group": long_a})["group"] == values[0]  # a pushed alert's labels are the series' labels
