"""The one HTML renderer (report/page.py): the live page, the recording report, hostile text in both."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.app.wiring import replay
from kdiag.config.settings import load_config
from kdiag.core.quote import printable
from kdiag.core.sample import GAUGE, sample
from kdiag.kafka.coordination import Reporting
from kdiag.kafka.coordination_records import Member
from kdiag.recording.recording import Recording
from kdiag.report.html import frozen, recording_report
from kdiag.report.page import SCRIPT, STYLE, EvidenceHistory, LivePage, PageDraw
from kdiag.report.plots import formatted, plot
from kdiag.runtime.pipeline import Health, State
from tests.analysis.test_subject_cap import judged
from tests.paths import RECORDINGS

LINE_BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
CHARS = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), *LINE_BREAKS, "\u202e", "\ufeff", "\u200b",
         '"', "'", "<", ">", "&", "`"]
# Each character around markup, quotes and a closing script tag.
HOSTILE = [f'{c}<script>alert(1)</script>{c}"\'><img src=x onerror=alert(2)>{c}' for c in CHARS]
TOPIC_RULE = """\
- id: skew
  kind: cause
  severity: warning
  each: topic
  when: it.leader_skew_ratio > 2.0
  summary: "{it.name} skewed"
  evidence: [it.leader_skew_ratio]
  remediation: rebalance the leaders of the topic
  source: tests
"""


def states_of(name: str) -> list[State]:
    """Every state of a recording replayed through the shipped catalog."""
    states: list[State] = []
    recording = Recording(RECORDINGS / name)
    try:
        replay(recording, load_config(None), on_step=lambda s: states.append(frozen(s)))
    finally:
        recording.close()
    return states


class Tags(HTMLParser):
    """The start tags and the text of a page, as a browser's parser splits them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.code = False  # inside the page's own style or script
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        self.code = tag in ("style", "script")
        assert not any(name.startswith("on") for name, _ in attrs), (tag, attrs)

    def handle_data(self, data) -> None:
        if not self.code:
            self.text.append(data)

    def handle_endtag(self, tag) -> None:
        self.code = False


def drawing(draw: PageDraw | None) -> tuple[bytes, bytes]:
    """The page and its JSON that a LivePage.update's drawing draws."""
    assert draw is not None
    page = draw()
    assert page is not None
    return page


def drawn(draw: PageDraw | None) -> str:
    """The page a LivePage.update's drawing draws, as text."""
    return drawing(draw)[0].decode()


def parsed(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


@pytest.fixture
def hostile_state(tmp_path: Path) -> State:
    """A state whose subjects, summaries, host, cluster, processes, devices, paths and errors are all hostile text."""
    rules = tmp_path / "r.yaml"
    rules.write_text(TOPIC_RULE)
    signals = {"topic": {t: {"name": t, "leader_skew_ratio": 3.0} for t in HOSTILE}}
    diagnoses = Engine(load_catalog([rules])).evaluate(EngineState(), 0.0, signals).current()
    samples = []
    for i, text in enumerate(HOSTILE):
        samples += [sample("kdiag_process_info", 1, GAUGE, pid=i, comm=text, cmdline=f"java {text}", cwd=text),
                    sample("kdiag_process_is_broker", 1, GAUGE, pid=i, comm=text),
                    sample("kdiag_network_speed_bytes", 1.25e9, GAUGE, device=text),
                    sample("kdiag_network_queues", 8, GAUGE, device=text, direction="rx"),
                    sample("kdiag_kafka_log_dir_info", 1, GAUGE, device=text, mountpoint=text, path=text),
                    sample("kdiag_filesystem_info", 1, GAUGE, device=text, fstype=text, mountpoint=text)]
    health = {text: Health(False, 0.1, None, f"OSError: {text}") for text in HOSTILE}
    return State(HOSTILE[0], 1.0, samples, health, signals, diagnoses, cluster=HOSTILE[1], local_broker=1,
                 reporting=Reporting(False, Member(HOSTILE[2], 2)))


def assert_text_only(page: str, scripts: int) -> None:
    """No character a line split or a terminal acts on, no tag or handler but the page's own."""
    assert all(c.isprintable() or c == "\n" for c in page)
    assert page.replace(STYLE, "").replace(SCRIPT, "").count("\n") == 1 and page.endswith("\n")
    tags = parsed(page)
    assert tags.tags.count("script") == scripts and "img" not in tags.tags


def test_hostile_text_stays_text_on_the_live_page_and_its_json(hostile_state):
    page, data = drawing(LivePage(900).update(hostile_state, 5.0))
    text = page.decode()
    assert_text_only(text, scripts=1)
    shown = "".join(parsed(text).text)
    for t in HOSTILE:
        assert printable(t) in shown
        assert f"java {printable(t)}" not in shown  # a command line names no Kafka version: it is never shown
    assert f"reported_by {printable(HOSTILE[2])} (broker 2)" in shown
    main = json.loads(data)["main"]
    assert_text_only(main + "\n", scripts=0)
    assert main in text


def test_hostile_text_stays_text_in_the_report(hostile_state):
    later = State(hostile_state.host, 30.0, hostile_state.samples, hostile_state.health, hostile_state.signals,
                  hostile_state.diagnoses, cluster=hostile_state.cluster)
    page = recording_report(HOSTILE[3], [hostile_state, later])
    assert_text_only(page, scripts=0)
    shown = "".join(parsed(page).text)
    assert all(printable(t) in shown for t in HOSTILE)


def test_recording_report_shows_each_diagnosis_with_fix_units_and_no_fault_window():
    states = states_of("small-packet-storm")
    page = recording_report("small-packet-storm", states)
    shown = "".join(parsed(page).text)
    last = states[-1].diagnoses
    assert last and all(f'data-rule="{d.rule.id}"' in page for d in last)
    for d in last:
        assert f"Fix: {d.rule.remediation}" in shown and d.summary in shown
    assert "/s" in shown and " B" in shown  # packets per second, bytes
    assert 'class="fault"' not in page and "fault" not in shown and "fault window" not in page
    assert "Host small-packet-storm" in shown and "Gbit/s" in shown


def test_causes_come_first_with_the_symptoms_they_explain_nested(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text(TOPIC_RULE.replace("remediation:", "explains: [slow]\n  remediation:") + """\
- id: slow
  kind: symptom
  severity: critical
  each: topic
  when: it.leader_skew_ratio > 1.0
  summary: "{it.name} slow"
  remediation: see the cause
  source: tests
""")
    signals = {"topic": {"t1": {"name": "t1", "leader_skew_ratio": 3.0}}}
    state = State("h", 1.0, [], {}, signals, Engine(load_catalog([rules])).evaluate(EngineState(), 1.0, signals).current())
    page = drawn(LivePage(900).update(state, 5.0))
    cause = page.index('data-rule="skew"')
    symptom = page.index('data-rule="slow"')
    assert cause < symptom < page.index("</article>", cause)  # inside the cause's article


def test_a_symptom_nests_the_symptoms_it_explains_under_the_cause_that_explains_it():
    slow = {"name": "broker 3", "on_brokers": "3", "reaches_brokers": "1", "replica_probe_vs_peers": 8.4,
            "replica_probe_p90_seconds": 0.22, "gc_pause_longest_seconds": 2.5}
    churning = {b: {"name": f"broker {b}", "on_brokers": b, "isr_shrinks_per_second": 0.2} for b in ("1", "2")}
    signals = {"broker": {"3": slow, **churning}}
    engine = Engine(load_catalog([default_rules_dir()]))
    judged = engine.evaluate(engine.evaluate(EngineState(), 0.0, signals), 300.0, signals)
    page = drawn(LivePage(900).update(State("h", 300.0, [], {}, signals, judged.current()), 5.0))

    def article(rule: str, subject: str) -> int:
        return page.index(f'data-rule="{rule}" data-subject="{subject}"')

    cause = article("broker_gc_pause_long", "broker 3")
    replica = article("replica_slow", "broker 3")
    assert cause < replica < article("isr_shrinking", "broker 1") < page.index("Symptoms no known cause explains")
    assert page.index("Symptoms no known cause explains") < article("isr_shrinking", "broker 2")
    assert page.count('data-rule="replica_slow"') == 1 and page.count('data-rule="isr_shrinking"') == 2


def test_axes_are_the_data_min_and_max_and_a_flat_series_is_flat():
    moving = plot("await_seconds", [(0.0, 0.7312), (5.0, 0.7318), (10.0, 0.7315)], 0.0, 10.0)
    assert re.search(r'class="ymax">731.8 ms<', moving) and re.search(r'class="ymin">731.2 ms<', moving)
    flat = plot("queue_bytes", [(0.0, 2048.0), (5.0, 2048.0)], 0.0, 10.0)
    ys = set(re.findall(r"[ML][\d.]+,([\d.]+)", flat))
    assert len(ys) == 1 and "2 KiB" in flat and "ymin" not in flat
    assert 'class="fault"' not in flat and 'class="fault"' in plot("x", [(0.0, 1.0)], 0.0, 10.0, (2.0, 4.0))


def test_values_carry_the_unit_of_their_name():
    assert formatted("rx_packets_per_second", 420000.0) == "420k /s"
    assert formatted("dirty_ratio", 0.25) == "25 %"
    assert formatted("write_bytes_per_second", 3 * 2**20) == "3 MiB/s"
    assert formatted("await_seconds", 0.004) == "4 ms"


def test_the_live_history_keeps_its_window_and_follows_a_resolved_diagnosis(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text(TOPIC_RULE)
    engine = Engine(load_catalog([rules]))
    judged = EngineState()
    history = EvidenceHistory(window=20.0)
    for t in range(0, 60, 5):
        ratio = 3.0 if t < 30 else 1.0  # resolves at 30 s
        signals = {"topic": {"t1": {"name": "t1", "leader_skew_ratio": ratio + t / 100}}}
        judged = engine.evaluate(judged, float(t), signals)
        history.record(State("h", float(t), [], {}, signals, judged.current()))
        if t == 45:
            points = history.series[("skew", "t1")]["leader_skew_ratio"]
            assert [p[0] for p in points] == [25.0, 30.0, 35.0, 40.0, 45.0]  # evidence goes on after it resolved
            assert history.lanes[("skew", "t1")][-1] == (45.0, "")
    assert ("skew", "t1") not in history.series  # 20 s after it last held, it is forgotten


def test_the_kafka_version_comes_from_the_broker_jar_on_the_class_path(tmp_path):
    from kdiag.kafka.jars import kafka_version

    libs = tmp_path / "libs"
    libs.mkdir()
    for name in ("kafka-clients-4.4.0.jar", "kafka-server-common-4.4.0.jar", "kafka-server-4.4.0.jar", "zstd.jar"):
        (libs / name).write_text("")
    assert kafka_version(f"{tmp_path}/nothing/*:{libs}/*") == "4.4.0"
    assert kafka_version("/opt/kafka/libs/kafka_2.13-3.7.2.jar:/opt/x.jar") == "3.7.2"
    assert kafka_version(f"{libs}/kafka-clients-4.4.0.jar") == ""  # a client jar says nothing of the broker


def test_the_page_shows_the_worst_subjects_of_a_rule_and_counts_the_others():
    lags = {f"g{i:02d}": float(i) for i in range(40)}
    page = LivePage(900, max_subjects=5)
    first = drawn(page.update(State("h", 600.0, [], {}, {}, judged(lags, set(lags))), 5.0))
    assert re.findall(r'data-rule="consumer_lag_growing" data-subject="([^"]*)"', first) == [
        "g35", "g36", "g37", "g38", "g39"]
    assert "<b>consumer_lag_growing</b>: 40 subjects, 35 firing and 0 pending not shown" in first
    # One that is cut, still active, is not shown as resolved.
    lags["g00"] = 1000.0
    later = drawn(page.update(State("h", 605.0, [], {}, {}, judged(lags, set(lags))), 5.0))
    assert re.findall(r'data-subject="([^"]*)"', later) == ["g00", "g36", "g37", "g38", "g39"]
    assert 'class="badge resolved"' not in later
