"""The probe's samples as a recorded source: a drill's monitor records them (Kafka states only, no host files) and a
replay reads back the same samples, each checked against the probe's families."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdiag.app.wiring import replay
from kdiag.collectors.kafka.probe_samples import ProbeSamplesCollector, read_probe_state
from kdiag.config.settings import Config
from kdiag.core.archive import StateError
from kdiag.core.root import Root, SnapshotRoot
from kdiag.families.probe import PROBE_REPLICA_LATENCY_SECONDS, PROBE_UP
from kdiag.probe.metrics import Histogram
from kdiag.probe.replicas import PAIR_BUCKETS
from kdiag.recording.recording import Recorder, Recording
from kdiag.runtime.pipeline import CollectorSet


def probe_samples(latency: float):
    h = Histogram(PAIR_BUCKETS)
    h.observe(latency)
    return [PROBE_UP.sample(1.0), *h.samples(PROBE_REPLICA_LATENCY_SECONDS, broker_id=3, leader_id=1)]


def test_a_monitor_recording_keeps_the_probe_samples_and_a_replay_reads_them_back(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    out.mkdir()
    recorder = Recorder(out, 1.0, "drill", files=False)
    collectors = CollectorSet([ProbeSamplesCollector(lambda: probe_samples(0.3))])
    live = recorder.snapshot(Root(), collectors.run)
    assert not (out / "0000" / "proc").exists() and not (out / "0000" / "sys").exists()
    recording = Recording(out)
    assert recording.kafka_sources() == {"probe"}
    replayed = ProbeSamplesCollector.from_config(Config(), None).collect(SnapshotRoot(recording.snapshots[0]))
    assert replayed == live and len(live) == 1 + len(PAIR_BUCKETS) + 3  # up; the buckets, +Inf, _sum, _count
    state = replay(recording, Config())
    assert {s.name for s in state.samples} >= {"kdiag_probe_up", "kdiag_probe_replica_latency_seconds_bucket"}


@pytest.mark.parametrize(("entry", "problem"), [
    (["kdiag_cpu_seconds_total", {}, 1.0], "samples[0]: not a series of the probe's families"),
    (["kdiag_probe_up", {"broker_id": "3"}, 1.0], "samples[0]: family kdiag_probe_up: labels ['broker_id']"),
    (["kdiag_probe_replica_latency_seconds", {"broker_id": "3", "leader_id": "1"}, 1.0],
     "samples[0]: family 'kdiag_probe_replica_latency_seconds': no  series"),
    (["kdiag_probe_up", {}, float("nan")], "samples[0]: value: expected a finite number"),
    (["kdiag_probe_up", {}, True], "samples[0]: value: expected a finite number"),
    (["kdiag_probe_partitions", {"broker_id": "3\n"}, 1.0], "samples[0]: labels: expected printable texts"),
    ("kdiag_probe_up", "samples[0]: expected [name, {label: value}, value]"),
])
def test_a_recorded_probe_state_not_of_the_families_is_refused_naming_the_entry(entry, problem) -> None:
    with pytest.raises(StateError) as e:
        read_probe_state({"samples": [entry]}, 2)
    assert str(e.value).startswith(problem)


def test_a_bad_probe_state_fails_only_its_collector_naming_the_file(tmp_path: Path) -> None:
    snap = tmp_path / "0000"
    snap.mkdir()
    (snap / "meta.json").write_text('{"time": 1764430000}')
    (snap / "kafka.json").write_text(json.dumps({"version": 2, "sources": {"probe": {"samples": 3}}}))
    with pytest.raises(ValueError, match=r"0000/kafka.json: sources\.probe\.samples: expected a list"):
        ProbeSamplesCollector().collect(SnapshotRoot(snap))


def test_without_a_probe_running_live_it_fails_saying_so() -> None:
    with pytest.raises(LookupError, match="no probe runs in this process"):
        ProbeSamplesCollector().collect(Root())
