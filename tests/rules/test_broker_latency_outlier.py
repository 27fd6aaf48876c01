"""broker_latency_outlier through the shipped catalog on the probe's real histograms: a broker stalling part of every
second is named within two minutes; brokers slow together, or fast in absolute terms, are not."""

from __future__ import annotations

import random
from collections.abc import Callable

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis, Engine, EngineState
from kdiag.analysis.signals import Signals
from kdiag.analysis.subject_kinds import compute_signals
from kdiag.config.probe import DEFAULT_LATENCY_BUCKETS
from kdiag.core.history import History
from kdiag.core.sample import COUNTER, GAUGE, Sample, sample
from kdiag.probe.metrics import BrokerStats

STEP = 5.0
WINDOW = 30.0
START = 1764430000.0
Latency = Callable[[float, int, random.Random], float]  # (seconds since start, broker, rng) -> one probe latency


def healthy(_t: float, _b: int, rng: random.Random) -> float:
    """A lab broker's probe latency: 5-40 ms."""
    return rng.uniform(0.005, 0.04)


def stalls(broker: int, after: float, base: Latency = healthy) -> Latency:
    """`broker` stopped 300 ms of every second from `after` on: 30% of its sends wait out the rest of a stall."""
    def latency(t: float, b: int, rng: random.Random) -> float:
        if b == broker and t >= after and rng.random() < 0.3:
            return rng.uniform(0.0, 0.3) + base(t, b, rng)
        return base(t, b, rng)
    return latency


def run(latency: Latency, seconds: float, extra: Callable[[float], list[Sample]] = lambda t: []) -> list[Diagnosis]:
    """The probe sending once a second to 3 brokers, its samples fed every STEP seconds; the diagnoses at the end.

    Every broker must have been compared with its peers and its past at the end, so the quiet cases fail without
    the signals as the firing ones fail without the rule."""
    rng = random.Random(21)
    stats = {b: BrokerStats(DEFAULT_LATENCY_BUCKETS) for b in (1, 2, 3)}
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), None)
    judged = EngineState()
    diagnoses: list[Diagnosis] = []
    for i in range(int(seconds / STEP) + 1):
        t = i * STEP
        for b, s in stats.items():
            for _ in range(int(STEP)):
                value = latency(t, b, rng)
                s.produce.observe(value)
                s.end_to_end.observe(value + 0.002)
        snapshot = [sample("kdiag_probe_slo_seconds", 10.0, GAUGE), *extra(t)]
        for b, s in stats.items():
            snapshot += s.samples(b)
        history.add(START + t, snapshot)
        signals = compute_signals(history, WINDOW)
        judged = engine.evaluate(judged, START + t, signals)
        diagnoses = judged.current()
    for b in ("1", "2", "3"):
        assert {"probe_latency_vs_peers", "probe_latency_vs_history"} <= set(signals["broker"][b]), b
    return diagnoses


def outliers(diagnoses: list[Diagnosis]) -> list[tuple[str, str]]:
    return sorted((d.subject, d.state) for d in diagnoses if d.rule.id == "broker_latency_outlier")


def test_a_broker_stalling_300_ms_of_every_second_is_named_within_two_minutes():
    out = [d for d in run(stalls(3, after=600.0), 600.0 + 120.0) if d.rule.id == "broker_latency_outlier"]
    assert [(d.subject, d.state) for d in out] == [("broker 3", "firing")]
    assert float(out[0].evidence["probe_latency_vs_peers"]) > 4.0
    assert float(out[0].evidence["probe_p99_seconds"]) > 0.2


def test_ten_healthy_minutes_are_quiet():
    assert outliers(run(healthy, 600.0)) == []


def test_brokers_slow_together_are_not_an_outlier():
    # The whole host (or the network) slow: every broker 300 ms of every second.
    def together(t: float, b: int, rng: random.Random) -> float:
        return stalls(b, after=300.0)(t, b, rng)
    assert outliers(run(together, 480.0)) == []


def test_a_broker_slower_only_in_milliseconds_is_not():
    # 10x its peers but at 20-50 ms: no client feels it.
    def fast(t: float, b: int, rng: random.Random) -> float:
        return rng.uniform(0.02, 0.05) if b == 3 and t >= 300 else rng.uniform(0.002, 0.005)
    assert outliers(run(fast, 480.0)) == []


def test_the_summary_says_which_request_part_is_slow():
    # Broker 3's JMX: follower fetches wait 40x longer locally than the other brokers'.
    def jmx(_t: float) -> list[Sample]:
        return [sample("kdiag_kafka_request_time_seconds", 0.4 if b == 3 else 0.01, GAUGE, broker_id=b,
                       request="FetchFollower", phase="local", quantile="0.99") for b in (1, 2, 3)]
    out = [d for d in run(stalls(3, after=600.0), 720.0, jmx) if d.rule.id == "broker_latency_outlier"]
    assert len(out) == 1
    assert "slow follower fetch reads (disk) (FetchFollower local time p99 0.400 s, 40.0x the other brokers')" \
        in out[0].summary


def gc_pauses(pause: float, collector: str = "G1 Young Generation", **more: float) -> tuple[list[Diagnosis], Signals]:
    """Broker 1 collecting once a minute for `pause` seconds at once (and once a minute with each of `more`,
    collector=pause), read over JMX every 10 s, for 5 minutes: the causes and broker 1's signals at the end."""
    history, engine = History(900.0), Engine(load_catalog([default_rules_dir()]), None)
    judged = EngineState()
    diagnoses: list[Diagnosis] = []
    signals: dict[str, dict[str, Signals]] = {}
    for i in range(31):
        t, collections = i * 10.0, 1 + i // 6
        snapshot = [sample("kdiag_kafka_broker_info", 1, GAUGE, broker_id=1, host="127.0.0.1", port=9092, rack="")]
        for name, seconds in {collector: pause, **{k.replace("_", " "): v for k, v in more.items()}}.items():
            snapshot += [sample("kdiag_jvm_gc_collections_total", collections, COUNTER, broker_id=1, gc=name),
                         sample("kdiag_jvm_gc_collection_seconds_total", collections * seconds, COUNTER, broker_id=1, gc=name)]
        history.add(START + t, snapshot)
        signals = compute_signals(history, WINDOW)
        judged = engine.evaluate(judged, START + t, signals)
        diagnoses = judged.current()
    return [d for d in diagnoses if d.rule.kind == "cause"], signals["broker"]["1"]


def test_a_1_2_s_gc_pause_once_a_minute_is_a_long_pause_though_its_share_is_small():
    out, _ = gc_pauses(1.2)
    assert [(d.rule.id, d.subject, d.state) for d in out] == [("broker_gc_pause_long", "broker 1", "firing")]
    assert abs(float(out[0].evidence["gc_pause_longest_seconds"]) - 1.2) < 1e-6
    assert float(out[0].evidence["gc_seconds_per_second"]) < 0.05


def test_a_500_ms_pause_a_sigstop_caught_is_not():
    causes, broker = gc_pauses(0.5)
    assert causes == [] and abs(float(broker["gc_pause_longest_seconds"]) - 0.5) < 1e-6


def test_seed_002s_30_ms_young_pauses_are_not():
    causes, broker = gc_pauses(0.03)
    assert causes == [] and abs(float(broker["gc_pause_longest_seconds"]) - 0.03) < 1e-6


def test_a_concurrent_collector_cycle_is_no_pause():
    # ZGC's cycles run beside the application: a 2 s cycle stops nothing; its pauses bean times the 2 ms pauses.
    causes, broker = gc_pauses(2.0, "ZGC Cycles", ZGC_Pauses=0.002)
    assert causes == [] and abs(float(broker["gc_pause_longest_seconds"]) - 0.002) < 1e-9
