"""Which rules a failing collector blinds: its families -> the subject kinds computed from them -> the rules naming a
signal of those kinds that is missing now (issue 35 item 4)."""

from __future__ import annotations

import pytest

from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.collectors.registry import discover
from kdiag.families.host import MEMORY_BYTES, MEMORY_MEMTOTAL_BYTES, SOFTIRQS_TOTAL
from kdiag.families.kafka import KAFKA_BROKER_CONFIG, KAFKA_LOG_FLUSH_SECONDS, KAFKA_LOG_FLUSHES_TOTAL
from kdiag.runtime.blindness import blinded, emits, kinds_fed

pytestmark = pytest.mark.unit

RULES = load_catalog([default_rules_dir()])
COLLECTORS = discover()
JMX = COLLECTORS["kafka_jmx"].families
ADMIN = COLLECTORS["kafka_admin"].families
# What the broker kind reads: the admin's configs and JMX's flushes (the real kinds read many more).
READS = {"broker": frozenset({KAFKA_BROKER_CONFIG.name, KAFKA_LOG_FLUSHES_TOTAL.name,
                              KAFKA_LOG_FLUSH_SECONDS.name}),
         "host": frozenset({SOFTIRQS_TOTAL.name, MEMORY_MEMTOTAL_BYTES.name})}
FORCED = {"name": "broker 1", "log_flush_interval_messages": 500.0, "log_flush_scheduler_interval_ms": 3000.0}


def test_a_collector_emits_its_families_histogram_series_and_patterns() -> None:
    assert emits(JMX, KAFKA_LOG_FLUSHES_TOTAL.name)
    assert not emits(ADMIN, KAFKA_LOG_FLUSHES_TOTAL.name)
    assert emits(COLLECTORS["kafka_jmx"].families, "kdiag_kafka_request_time_seconds") and emits(
        [KAFKA_LOG_FLUSH_SECONDS], KAFKA_LOG_FLUSH_SECONDS.name + "_bucket")
    assert emits([MEMORY_BYTES], MEMORY_MEMTOTAL_BYTES.name) and not emits([MEMORY_BYTES], SOFTIRQS_TOTAL.name)
    assert kinds_fed(JMX, READS) == {"broker"} and kinds_fed(COLLECTORS["meminfo"].families, READS) == {"host"}


def test_jmx_failing_blinds_the_flush_rules_not_the_admin_ones() -> None:
    signals = {"broker": {"1": {**FORCED, "leaders": 4000.0}},
               "host": {"host": {"name": "host", "broker_processes": 1.0, "memory_total_bytes": 8e9}}}
    found = blinded(RULES, {"kafka_jmx": JMX}, READS, signals)
    assert {"forced_flush_configured", "forced_fsync_broker", "unbatched_producers"} <= set(found["kafka_jmx"])
    # A rule over what the admin still answers is not blind; nor is one over a kind JMX does not feed.
    assert "partitions_per_broker_high" not in found["kafka_jmx"]
    assert not {"swap_in_use", "log_disk_saturated", "offline_partitions"} & set(found["kafka_jmx"])
    assert found["kafka_jmx"] == sorted(found["kafka_jmx"])


def test_a_signal_present_everywhere_is_not_blind() -> None:
    signals = {"broker": {"1": {**FORCED, "log_flushes_per_second": 2.0, "log_flushes_per_1k_messages": 0.4,
                                "log_flush_seconds_p99": 0.01}}}
    assert "forced_flush_configured" not in blinded(RULES, {"kafka_jmx": JMX}, READS, signals).get("kafka_jmx", [])


def test_a_kind_without_subjects_is_blind_and_a_collector_blinding_nothing_is_left_out() -> None:
    found = blinded(RULES, {"kafka_jmx": JMX, "loadavg": COLLECTORS["loadavg"].families}, READS, {})
    assert "forced_flush_configured" in found["kafka_jmx"] and "loadavg" not in found


def test_a_global_subject_read_blinds_the_rules_of_other_kinds() -> None:
    signals = {"host": {"host": {"name": "host", "cpu_count": 16.0}}, "nic": {"eth0": {"name": "eth0"}}}
    found = blinded(RULES, {"softirqs": COLLECTORS["softirqs"].families}, READS, signals)
    assert "nic_irq_single_core" in found["softirqs"]  # it reads host.net_rx_top_cpu
