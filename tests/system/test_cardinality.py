"""Cardinality controls (partition/group series filters, the Kafka series cap) and the flat-cost machinery around them:
the exporter's per-family render cache, the engine skipping unchanged subjects, the stretched background period."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdiag.collectors import Collector
from kdiag.core.cardinality import SeriesFilter, cap_kafka_series, top_groups
from kdiag.collectors.kafka.admin_samples import samples_from_admin_state
from kdiag.config.settings import ConfigError, load_config
from kdiag.app.background import Background
from kdiag.analysis.catalog import load_catalog
from kdiag.analysis.engine import Engine, EngineState
from kdiag.serve.exporter import FamilyCache, Published, render_metrics
from kdiag.runtime.pipeline import State
from kdiag.core.root import Root
from kdiag.core.sample import COUNTER, GAUGE, HISTOGRAM, Sample, sample
from kdiag.families.kafka import KAFKA_TOPIC_PARTITIONS
from tests.paths import FIXTURES

STATE = FIXTURES / "kafka" / "admin-state.json"


def admin_state() -> dict:
    """The admin state captured from the 3-broker lab: admintest-skew, admintest-balanced, group admintest-lag."""
    return json.loads(STATE.read_text())


def names(samples: list[Sample], prefix: str) -> set[tuple]:
    return {(s.name, dict(s.labels).get("topic"), dict(s.labels).get("group")) for s in samples if s.name.startswith(prefix)}


# --- filters --------------------------------------------------------------------------------------------------------


def test_filter_matches_whole_names_and_ignore_wins():
    f = SeriesFilter(allow=["orders.*", "payments"], ignore=["orders-dlq"])
    assert f.matches("orders") and f.matches("orders-eu") and f.matches("payments")
    assert not f.matches("orders-dlq")  # ignored
    assert not f.matches("payments-v2") and not f.matches("my-orders")  # regexes match the whole name
    assert SeriesFilter().matches("anything") and not SeriesFilter(allow=[]).matches("anything")


def test_partition_series_only_for_allowed_topics():
    state = admin_state()
    samples = samples_from_admin_state(state, partition_series=SeriesFilter(allow=["admintest-skew"]))
    partition_topics = {t for _, t, _ in names(samples, "kdiag_kafka_partition_")}
    assert partition_topics == {"admintest-skew"}
    # Topic granularity for every topic, allowed or not: the rules keep seeing them all.
    assert {t for _, t, _ in names(samples, "kdiag_kafka_topic_partitions")} == {"admintest-skew", "admintest-balanced"}
    ignored = samples_from_admin_state(state, partition_series=SeriesFilter(ignore=["admintest-.*"]))
    assert not names(ignored, "kdiag_kafka_partition_")


def test_group_series_per_topic_only_for_allowed_groups():
    state = admin_state()
    detailed = samples_from_admin_state(state)
    coarse = samples_from_admin_state(state, group_series=SeriesFilter(ignore=["admintest-lag"]))

    def lag(samples: list[Sample]) -> dict:
        return {s.labels: s.value for s in samples if s.name == "kdiag_kafka_consumergroup_lag"}

    assert lag(detailed) == {(("group", "admintest-lag"), ("topic", "admintest-balanced")): 80.0}
    assert lag(coarse) == {(("group", "admintest-lag"),): 80.0}  # one series per group, no topic label
    members = [s for s in coarse if s.name == "kdiag_kafka_consumergroup_members"]
    assert members and members == [s for s in detailed if s.name == "kdiag_kafka_consumergroup_members"]


@pytest.mark.parametrize("text, message", [
    ("kafka: {partition_series: {allow: ['orders', '(']}}",
     r"kafka\.partition_series\.allow\[1\]: '\(' is not a regular expression \(missing \), unterminated subpattern"),
    ("kafka: {group_series: {ignore: ['[a-']}}", r"kafka\.group_series\.ignore\[0\]: '\[a-' is not a regular expression"),
    ("kafka: {group_series: {alow: ['x']}}", r"kafka\.group_series\.alow: unknown key \(expected one of allow, ignore\)"),
    ("kafka: {partition_series: {allow: 'x'}}", r"kafka\.partition_series\.allow: expected a list, got str"),
    ("kafka: {max_series: -1}", r"kafka\.max_series: -1 is out of range"),
])
def test_bad_filter_config_names_the_key(tmp_path, text, message):
    path = tmp_path / "kdiag.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


@pytest.mark.integration
def test_bad_regex_stops_kdiag_run_with_one_line(tmp_path):
    path = tmp_path / "kdiag.yaml"
    path.write_text("kafka: {bootstrap_servers: '127.0.0.1:1', partition_series: {ignore: ['*']}}\n")
    run = subprocess.run([sys.executable, "-m", "kdiag", "run", "--config", str(path), "--listen", "127.0.0.1:9"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "kafka.partition_series.ignore[0]: '*' is not a regular expression" in run.stderr


def test_defaults():
    kafka = load_config(None).kafka
    # Sane at 100,000 partitions: no per-partition series, group series for the 500 groups lagging most, partition
    # lag seconds for the 100 partitions lagging most.
    assert kafka.partition_series == SeriesFilter(allow=[], ignore=[]) and kafka.group_series == SeriesFilter()
    assert kafka.top_groups == 500 and kafka.top_partitions == 100
    assert kafka.max_series == 100_000 and kafka.configs_interval == 60.0


def group_samples(lags: dict[str, tuple[float | None, float]]) -> list[Sample]:
    """Per group: members, lag seconds (when given) and largest lag in messages, as the admin collector emits them."""
    out = [sample("kdiag_kafka_topic_partitions", 1, GAUGE, topic="a")]
    for group, (seconds, messages) in lags.items():
        out.append(sample("kdiag_kafka_consumergroup_members", 1, GAUGE, group=group))
        out.append(sample("kdiag_kafka_consumergroup_lag_max", messages, GAUGE, group=group, topic="a"))
        if seconds is not None:
            out.append(sample("kdiag_consumer_lag_seconds", seconds, GAUGE, group=group))
    return out


def test_top_groups_keeps_the_groups_lagging_most_in_seconds_then_messages():
    samples = group_samples({"slow": (600.0, 10.0), "busy": (5.0, 10**6), "idle": (None, 0.0), "new": (None, 50.0)})
    kept = top_groups(samples, 3)
    assert {dict(s.labels).get("group") for s in kept} == {None, "slow", "busy", "new"}
    assert kept[0].name == "kdiag_kafka_topic_partitions"  # series without a group stay
    assert top_groups(samples, 4) is samples and top_groups(samples, 0) is samples


@pytest.mark.integration
def test_published_exports_the_top_groups_a_carried_batch_ranked_once_and_the_state_keeps_every_group():
    published = Published(top_groups=1)
    samples = group_samples({"g1": (10.0, 1.0), "g2": (20.0, 1.0)})
    state = State("testhost", 1000.0, samples, {}, {}, [], sources=[samples])
    published.publish(state)
    text = published.metrics.decode()
    assert 'group="g2"' in text and 'group="g1"' not in text
    assert len(state.samples) == len(samples)  # what the rules see is untouched
    kept = published._top[0][1]
    published.publish(state)
    assert published._top[0][1] is kept  # the same batch: not ranked again, its render cache stays warm


# --- the cap ----------------------------------------------------------------------------------------------------------


def kafka_samples() -> list[Sample]:
    """Host, topic, per-topic group lag and partition series, interleaved as the collectors emit them."""
    return [
        sample("kdiag_load1", 1.0),
        sample("kdiag_kafka_partition_leader", 1, GAUGE, topic="a", partition=0),
        sample("kdiag_kafka_consumergroup_lag", 5, GAUGE, group="g", topic="a"),
        sample("kdiag_kafka_topic_partitions", 1, GAUGE, topic="a"),
        sample("kdiag_kafka_consumergroup_lag", 5, GAUGE, group="h"),
        sample("kdiag_kafka_partition_leader", 1, GAUGE, topic="b", partition=0),
        sample("kdiag_kafka_topic_partitions", 1, GAUGE, topic="b"),
    ]


def test_cap_drops_partitions_first_then_per_topic_lag():
    samples = kafka_samples()
    assert cap_kafka_series(samples, 6) == (samples, 0)
    kept, dropped = cap_kafka_series(samples, 4)
    assert dropped == 2 and kept[0].name == "kdiag_load1"  # host series never count
    assert not [s for s in kept if s.name == "kdiag_kafka_partition_leader"]
    kept, dropped = cap_kafka_series(samples, 2)
    assert dropped == 4
    # Among the coarse series, the collectors' order decides: the same ones are kept from cycle to cycle.
    assert [s.labels for s in kept if s.name.startswith("kdiag_kafka_")] == [(("topic", "a"),), (("group", "h"),)]
    assert cap_kafka_series(samples, 0)[0] == [samples[0]]


def state_of(samples: list[Sample]) -> State:
    return State("testhost", 1000.0, samples, {}, {}, [])


@pytest.mark.integration
def test_published_caps_metrics_and_counts_drops_but_the_state_keeps_everything():
    published = Published(max_kafka_series=3)
    state = state_of(kafka_samples())
    published.publish(state)
    fams = {f.name: f for f in text_string_to_metric_families(published.metrics.decode())}
    exported = [s for f in fams.values() for s in f.samples if s.name.startswith("kdiag_kafka_")]
    assert len(exported) == 3
    assert fams["kdiag_series_dropped"].samples[0].value == 3
    assert len(state.samples) == 7  # what the rules saw is untouched
    published.publish(state)
    fams = {f.name: f for f in text_string_to_metric_families(published.metrics.decode())}
    assert fams["kdiag_series_dropped"].samples[0].value == 6  # a counter: summed over cycles
    assert fams["kdiag_series_dropped"].type == "counter"


@pytest.mark.integration
def test_uncapped_exports_a_zero_drop_counter():
    published = Published()
    published.publish(state_of(kafka_samples()))
    assert b"kdiag_series_dropped_total 0.0" in published.metrics


# --- render cache, engine memo, stretched period ----------------------------------------------------------------------


@pytest.mark.integration
def test_family_cache_renders_what_a_fresh_render_does_and_follows_changes():
    cache = FamilyCache()
    first = render_metrics(state_of(kafka_samples()), cache)
    assert cache.render([kafka_samples()]) == FamilyCache().render([kafka_samples()])
    assert f"# HELP kdiag_kafka_topic_partitions {KAFKA_TOPIC_PARTITIONS.help}".encode() in first
    changed = [s._replace(value=9.0) if s.name == "kdiag_kafka_topic_partitions" else s for s in kafka_samples()]
    text = cache.render([changed]).decode()
    assert 'kdiag_kafka_topic_partitions{topic="a"} 9.0' in text
    assert 'kdiag_kafka_topic_partitions{topic="a"} 1.0' not in text
    assert cache.render([changed[:1]]).decode().count("kdiag_kafka") == 0  # a family gone is gone


def test_new_values_on_the_same_series_render_as_a_fresh_render_does():
    def snapshot(v: float) -> list[Sample]:
        return [sample("kdiag_kafka_topic_partitions", v, GAUGE, topic='a b"c\\d'),
                sample("kdiag_kafka_topic_partitions", v * 2, GAUGE, topic="e"),
                sample("kdiag_probe_latency_seconds_bucket", v, HISTOGRAM, le="+Inf"),
                sample("kdiag_probe_latency_seconds_sum", v / 3, HISTOGRAM),
                sample("kdiag_probe_latency_seconds_count", v, HISTOGRAM),
                sample("kdiag_kafka_bytes_in_total", v, COUNTER, broker_id=1)]
    cache = FamilyCache()
    cache.render([snapshot(1.0)], "c1")
    assert all(text.prefixes for text in cache._rendered.values())  # every family can take new values by prefix
    for v in (2.0, float("nan"), float("inf"), 1e21, -0.0):
        assert cache.render([snapshot(v)], "c1") == FamilyCache().render([snapshot(v)], "c1"), v
    fewer = snapshot(3.0)[1:]  # a series gone: rendered anew
    assert cache.render([fewer], "c1") == FamilyCache().render([fewer], "c1")


def test_a_family_split_over_sources_renders_as_one_and_a_carried_source_is_grouped_once():
    samples = kafka_samples()
    whole = FamilyCache().render([samples])
    cache = FamilyCache()
    fresh, carried = samples[:3], samples[3:]
    assert cache.render([fresh, carried]) == whole
    groups = cache.groups([list(fresh), carried])[1]
    assert cache.groups([list(fresh), carried])[1] is groups  # the same list again: its grouping is reused
    assert cache.render([list(fresh), carried]) == whole


def write_rule(tmp_path: Path, when: str) -> list:
    (tmp_path / "r.yaml").write_text(
        "- id: busy_topic\n  kind: symptom\n  severity: warning\n  each: topic\n"
        f"  when: {when}\n  summary: 'topic {{it.name}}'\n  remediation: none\n  source: test\n")
    return load_catalog([tmp_path])


def test_engine_reevaluates_a_subject_only_when_its_inputs_change(tmp_path):
    engine = Engine(write_rule(tmp_path, "it.messages_per_second > cluster.brokers"))
    judged = EngineState()
    topic = {"name": "a", "messages_per_second": 10.0}
    judged = engine.evaluate(judged, 1, {"topic": {"a": topic}, "cluster": {"c": {"brokers": 3.0}}})
    assert [d.subject for d in judged.current()] == ["a"]
    judged = engine.evaluate(judged, 2, {"topic": {"a": dict(topic)}, "cluster": {"c": {"brokers": 3.0}}})
    assert judged.current()  # same inputs
    # A change of a global subject the rule reads counts as a change of the topic's inputs.
    judged = engine.evaluate(judged, 3, {"topic": {"a": topic}, "cluster": {"c": {"brokers": 20.0}}})
    assert not judged.current()
    judged = engine.evaluate(judged, 4, {"topic": {"a": {**topic, "messages_per_second": 30.0}}, "cluster": {"c": {"brokers": 20.0}}})
    assert judged.current()
    judged = engine.evaluate(judged, 5, {"topic": {"a": {**topic, "messages_per_second": 1.0}}, "cluster": {"c": {"brokers": 20.0}}})
    assert not judged.current()
    assert [d.subject for d in judged.resolved] == ["a"]


class SlowCollector(Collector):
    """Takes `seconds` per collect, as a big cluster's admin fetch does: asleep, busy (`busy`), or in a child process
    (`child_cpu_seconds`, as KafkaAdminCollector reports its AdminClient process's)."""

    name = "slow"

    def __init__(self, seconds: float, busy: bool = False):
        self.families = ()
        self.seconds = seconds
        self.busy = busy
        self.runs = 0
        self.child_cpu_seconds = 0.0

    def collect(self, root: Root) -> list[Sample]:
        self.runs += 1
        if self.busy:
            start = time.thread_time()
            while time.thread_time() - start < self.seconds:
                pass
        else:
            time.sleep(self.seconds)
        return [sample("kdiag_slow", self.runs)]


def test_a_background_collector_with_nothing_new_is_not_run_and_its_samples_stay():
    slow = SlowCollector(0.0)
    slow.ready = lambda: slow.runs == 0  # news only before its first run, as a JmxTool reader before its next row
    background = Background([slow], Root(), every=1.0, timeout=10.0)
    background.run()
    first = background.latest()[0]
    background._at -= 2 * 1.0 + 10.0 + 1  # as old as a stale job's
    background.run()
    assert slow.runs == 1 and background.latest()[0] is first  # the same list: carried, not added again
    assert background.collectors.health["slow"].success


@pytest.mark.parametrize("timeout", [10.0, None])
def test_a_costly_background_run_stretches_the_period_by_its_cpu(timeout):
    costly = SlowCollector(0.0)
    background = Background([costly], Root(), every=1.0, timeout=timeout, adaptive=True)
    background.run()
    costly.child_cpu_seconds = 0.005  # its child process spent 5 ms: twice the 0.25% budget of a 1 s period
    background._next = 0.0
    background.run()
    assert background.collectors.health["slow"].cpu >= 0.005 and 2.0 <= background.period < 4.0
    costly.child_cpu_seconds, costly.seconds, costly.busy = 0.0, 0.0075, True  # its own thread spent 7.5 ms
    background._next = 0.0
    background.run()
    assert background.collectors.health["slow"].cpu >= 0.0075 and 3.0 <= background.period < 6.0


def test_a_slow_background_run_stretches_the_period_and_staleness_follows():
    slow = SlowCollector(0.2)
    background = Background([slow], Root(), every=1.0, timeout=10.0, adaptive=True)
    background.run()
    assert background.period == 1.0  # the first run pays for connecting: it does not count
    background._next = 0.0
    background.run()
    assert 4.0 <= background.period < 4.5  # 20 x 0.2 s, within the 6 intervals at most
    for _ in range(3):  # the scheduler keeps firing every second: the runs in between are skipped
        background.run()
    assert slow.runs == 2
    background._at -= 2 * 1.0 + 10.0 + 1  # older than 2 x every + timeout, but not 2 x period + timeout
    assert background.latest()[0] == [sample("kdiag_slow", 2)]
    slow.seconds = 1.0
    background._next = 0.0
    background.run()
    assert background.period == 6.0  # 20 x 1 s, but at most 6 intervals
    background.retime(0.5)  # now it fails (times out): retried at the normal pace
    background._next = 0.0
    background.run()
    assert background.period == 1.0
    fixed = SlowCollector(0.2)
    background = Background([fixed], Root(), every=1.0, timeout=10.0)
    for _ in range(3):  # not adaptive: every call the scheduler makes runs
        background.run()
    assert background.period == 1.0 and fixed.runs == 3


def test_carried_samples_are_present_without_a_staircase_of_repeated_points():
    from kdiag.core.history import History
    from kdiag.core.sample import COUNTER

    history = History(900)
    fetch = [sample("kdiag_kafka_topic_log_end_offset_total", 0, COUNTER, topic="a")]
    history.add(0, [sample("kdiag_load1", 1.0)], [fetch])  # first seen: a point
    for t in (5, 10, 15):  # cycles between fetches carry the same samples
        history.add(t, [sample("kdiag_load1", 1.0)], [fetch])
    assert history.latest("kdiag_kafka_topic_log_end_offset_total", topic="a") == 0
    history.add(20, [sample("kdiag_load1", 1.0)], [])  # the next fetch had no such series: absent now
    assert history.latest("kdiag_kafka_topic_log_end_offset_total", topic="a") is None
    history.add(60, [sample("kdiag_kafka_topic_log_end_offset_total", 600, COUNTER, topic="a")])
    for t in (65, 70, 75):
        history.add(t, [], [[sample("kdiag_kafka_topic_log_end_offset_total", 600, COUNTER, topic="a")]])
        # 600 messages between the fetches at 0 and 60 s, whatever the cycle: not 0, not 600 over 30 s.
        assert history.rate("kdiag_kafka_topic_log_end_offset_total", 30, topic="a") == pytest.approx(10.0)
    assert [len(p) for _, p, _ in history.series("kdiag_kafka_topic_log_end_offset_total")] == [2]


def test_a_carried_series_whose_points_aged_out_is_absent_until_it_gets_one_again():
    from kdiag.core.history import History

    history = History(retention=60)
    fetch = [sample("kdiag_kafka_brokers", 3)]
    history.add(0, [], [fetch])
    history.add(30, [], [fetch])
    assert history.latest("kdiag_kafka_brokers") == 3
    history.add(61, [], [fetch])  # its only point (t=0) aged out in this add
    assert history.latest("kdiag_kafka_brokers") is None and list(history.series("kdiag_kafka_brokers")) == []
    history.add(65, [], [fetch])  # still carried: a point again
    assert history.latest("kdiag_kafka_brokers") == 3
