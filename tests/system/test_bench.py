"""kdiag bench: perf-test output lines, property mapping, live stats and what the daemon derives from them."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kdiag.tools.bench import client as bench_client
from kdiag.tools.bench import format as bench_format
from kdiag.collectors.host.loadgen import LoadgenCollector, fetch_loadgen_state, samples_from_loadgen_state
from kdiag.config.settings import Config
from kdiag.app.wiring import load_rules
from kdiag.runtime.pipeline import CollectorSet, Pipeline, State
from kdiag.core.root import Root
from kdiag.core.sample import format_samples
from tests.waiting import wait_until

NUMBER = r"[\d.]+"
WINDOW = re.compile(rf"^(\d+) records sent, ({NUMBER}) records/sec \(({NUMBER}) MB/sec\), ({NUMBER}) ms avg latency, "
                    rf"({NUMBER}) ms max latency\.$")
TOTAL = re.compile(rf"^(\d+) records sent, (\d+\.\d{{6}}) records/sec \(({NUMBER}) MB/sec\), (\d+\.\d\d) ms avg latency, "
                   r"(\d+\.\d\d) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
JAVA_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER_SUMMARY = re.compile(rf"^({JAVA_TIME}), ({JAVA_TIME}), (\d+\.\d{{4}}), (\d+\.\d{{4}}), (\d+), (\d+\.\d{{4}}), "
                              r"(\d+), (\d+), (\d+\.\d{4}), (\d+\.\d{4})$")


def test_window_line_is_producer_performance_format() -> None:
    line = bench_format.window_line(49940, 5.0, 49940 * 1024, 49940 * 15.3, 31.0)
    assert line == "49940 records sent, 9988.0 records/sec (9.75 MB/sec), 15.3 ms avg latency, 31.0 ms max latency."
    assert WINDOW.match(line)


def test_total_line_is_producer_performance_format() -> None:
    # The seed 003 run: 1000000 records of 1 KiB at 9997.600576 records/s.
    line = bench_format.total_line(1000000, 1000000 / 9997.600576, 1024 * 1000000, 20.20 * 1000000, 340.0, [16, 30, 168, 249])
    assert line == ("1000000 records sent, 9997.600576 records/sec (9.76 MB/sec), 20.20 ms avg latency, "
                    "340.00 ms max latency, 16 ms 50th, 30 ms 95th, 168 ms 99th, 249 ms 99.9th.")
    assert TOTAL.match(line)


def test_percentiles_pick_like_producer_performance() -> None:
    assert bench_format.percentiles(list(range(100, 0, -1))) == [51, 96, 100, 100]
    assert bench_format.percentiles([]) == [0, 0, 0, 0]


def test_consumer_lines_are_consumer_performance_format() -> None:
    assert bench_format.consumer_header(False) == CONSUMER_HEADER
    assert bench_format.consumer_header(True).startswith("time, threadId, data.consumed.in.MB")
    start = time.mktime((2022, 1, 20, 9, 58, 26, 0, 0, -1)) * 1000 + 171
    line = bench_format.consumer_summary(start, start + 7150, int(977.0166 * 1024 * 1024), 1000465, 415)
    m = CONSUMER_SUMMARY.match(line)
    assert m and m.group(1) == "2022-01-20 09:58:26:171" and m.group(2) == "2022-01-20 09:58:33:321"
    assert m.group(3, 5, 7, 8) == ("977.0166", "1000465", "415", "6735")
    assert m.group(4) == "136.6457"  # as the seed 003 run printed


def test_java_props_map_to_librdkafka() -> None:
    conf, warnings = bench_client.map_java_props(bench_client.parse_props([
        "acks=1", "batch.size=1048576", "linger.ms=20", "compression.type=lz4", "buffer.memory=268435456",
        "max.in.flight.requests.per.connection=5", "key.serializer=org.apache.kafka.common.serialization.ByteArraySerializer"]))
    assert conf == {"acks": "1", "batch.size": "1048576", "linger.ms": "20", "compression.type": "lz4",
                    "queue.buffering.max.kbytes": "262144", "max.in.flight": "5"}
    assert len(warnings) == 1 and "key.serializer" in warnings[0]
    with pytest.raises(ValueError, match="PROP-NAME=PROP-VALUE"):
        bench_client.parse_props(["acks"])


def test_properties_file_and_unknown_props_are_dropped_with_a_warning() -> None:
    props = bench_client.parse_properties_file(
        "# producer\nbootstrap.servers=127.0.0.1:9092\nacks: all\n\n! x\nnot.a.librdkafka.prop=1\n")
    assert props == {"bootstrap.servers": "127.0.0.1:9092", "acks": "all", "not.a.librdkafka.prop": "1"}
    from confluent_kafka import Producer

    warnings: list[str] = []
    producer = bench_client.make_client(Producer, props, warnings.append)
    # The client is built from the accepted props (its queue length depends on whether a broker answers).
    assert isinstance(producer, Producer)
    assert warnings == ["ignoring unknown property not.a.librdkafka.prop"]


STATE = {"version": 1, "processes": [{
    "pid": 42, "processes": 2, "time": 100.0, "topic": "t",
    "settings": {"linger.ms": 0.0, "batch.size": 16384, "acks": "1", "compression.type": "none", "record.size": 20},
    "records": {"sent": 1000, "acked": 900, "failed": 1}, "bytes": 18000,
    "latency_seconds": {"mean": 0.002, "p99": 0.01, "max": 0.02},
    "librdkafka": {"msg_cnt": 50, "msg_max": 100, "msg_size": 10, "msg_size_max": 1000, "batch_bytes_avg": 500,
                   "batch_records_avg": 20, "brokers": {"1": {
                       "rtt_avg_seconds": 0.001, "rtt_p99_seconds": 0.004, "int_latency_avg_seconds": None,
                       "int_latency_p99_seconds": None, "requests": 60, "request_bytes": 30000, "produce_requests": 59}}},
}]}


def test_samples_from_loadgen_state() -> None:
    text = format_samples(samples_from_loadgen_state(STATE))
    for line in ('kdiag_loadgen_queue_fill_ratio{pid="42"} 0.5', 'kdiag_loadgen_linger_seconds{pid="42"} 0.0',
                 'kdiag_loadgen_records_acked_total{pid="42"} 900.0', 'kdiag_loadgen_threads{pid="42"} 2.0',
                 'kdiag_loadgen_broker_rtt_seconds{broker_id="1",pid="42",quantile="0.99"} 0.004',
                 'kdiag_loadgen_broker_produce_requests_total{broker_id="1",pid="42"} 59.0',
                 'kdiag_loadgen_batch_records{pid="42"} 20.0'):
        assert line in text
    assert "internal_latency" not in text  # an empty librdkafka window is left out, not read as 0


def test_stale_and_foreign_stats_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(json.dumps({**STATE["processes"][0], "pid": 1, "time": 1000.0}))
    (tmp_path / "2.json").write_text(json.dumps({**STATE["processes"][0], "pid": 2, "time": 980.0}))
    (tmp_path / "3.json").write_text("{not json")
    assert [p["pid"] for p in fetch_loadgen_state(tmp_path, 1005.0)["processes"]] == [1]
    assert fetch_loadgen_state(tmp_path / "missing", 1005.0)["processes"] == []


# ---- live, against the lab ---------------------------------------------------------------------------------------

@pytest.fixture
def topic(kafka_lab: dict, request: pytest.FixtureRequest):
    """A fresh bench-* topic, deleted afterwards: one partition, or one per broker when parametrized "per-broker"."""
    name = f"bench-test-{uuid.uuid4().hex[:8]}"
    partitions = kafka_lab["brokers"] if getattr(request, "param", None) == "per-broker" else 1
    admin = AdminClient({"bootstrap.servers": kafka_lab["bootstrap"]})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    yield name
    admin.delete_topics([name])[name].result(timeout=30)


def kdiag(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kdiag", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


@pytest.mark.kafka
def test_produce_prints_perf_test_lines_and_consume_reads_them_back(kafka_lab: dict, topic: str, tmp_path: Path) -> None:
    proc = kdiag("bench", "produce", "--topic", topic, "--num-records", "20000", "--record-size", "100",
                 "--throughput", "10000", "--producer-props", f"bootstrap.servers={kafka_lab['bootstrap']}", "acks=1",
                 "--reporting-interval", "500", "--json", "--stats-dir", str(tmp_path))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if "records sent" in line]
    assert len(lines) >= 3 and all(WINDOW.match(line) for line in lines[:-1])
    total = TOTAL.match(lines[-1])
    assert total, lines[-1]
    summary = json.loads(out)
    assert summary["records"] == int(total.group(1)) == 20000
    assert f"{summary['records_per_second']:f}" == total.group(2)
    assert [summary[k] for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")] == [int(total.group(i)) for i in range(6, 10)]
    assert 5000 < summary["records_per_second"] < 12000  # the throttle holds it near 10000/s
    assert list(tmp_path.iterdir()) == []  # the stats file goes with the process

    proc = kdiag("bench", "consume", "--bootstrap-server", kafka_lab["bootstrap"], "--topic", topic,
                 "--messages", "20000", "--timeout", "20000")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    header, line = out.splitlines()
    assert header == CONSUMER_HEADER
    m = CONSUMER_SUMMARY.match(line)
    assert m and int(m.group(5)) == 20000 and float(m.group(3)) == pytest.approx(20000 * 100 / 1024 / 1024, abs=1e-4)


@pytest.mark.kafka
# A partition on every broker: the request rate is not capped by one leader on a busy machine.
@pytest.mark.parametrize("topic", ["per-broker"], indirect=True)
def test_tiny_records_without_linger_show_as_tiny_produce_requests(kafka_lab: dict, topic: str, tmp_path: Path) -> None:
    proc = kdiag("bench", "produce", "--topic", topic, "--num-records", "100000000", "--record-size", "20",
                 "--throughput", "-1", "--bootstrap-server", kafka_lab["bootstrap"], "--producer-props", "linger.ms=0",
                 # librdkafka batches on its own while the broker is slow (other tests load it): cap the batches.
                 "batch.size=256", "acks=1", "--stats-dir", str(tmp_path))
    pipeline = Pipeline(CollectorSet([LoadgenCollector(tmp_path)]), load_rules(Config()), "test", 900.0, 30.0)

    def diagnosed() -> State | None:
        time.sleep(1.0)
        state = pipeline.step(Root())
        return state if "tiny_produce_requests" in {d.rule.id for d in state.diagnoses} else None

    try:
        # A fresh topic's first seconds are slow (leaders, metadata): the rule must fire once the load runs.
        state = wait_until(diagnosed, 30, "tiny_produce_requests on a linger.ms=0 producer of 20 B records")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    (loadgen,) = state.signals["loadgen"].values()
    assert loadgen["record_size_bytes"] == 20.0 and loadgen["linger_seconds"] == 0.0
    assert loadgen["avg_request_bytes"] < 4096.0, loadgen
    assert loadgen["produce_requests_per_second"] > 1000.0, loadgen
    assert loadgen["cpu_cores"] > 0.0
    # Stopped with SIGTERM, it still prints its total and removes its stats file.
    assert TOTAL.match(out.splitlines()[-1]), out + err
    assert list(tmp_path.glob("*.json")) == []
