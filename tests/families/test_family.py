"""A family checks its own declaration and the labels of every sample made through it."""

from __future__ import annotations

import pytest

from kdiag.core.sample import COUNTER, GAUGE, HISTOGRAM
from kdiag.families import DECLARED, declared_family
from kdiag.families.family import Family, LabelError
from kdiag.families.host import MEMORY_BYTES
from kdiag.families.kafka import KAFKA_CONSUMERGROUP_LAG


def test_a_sample_carries_the_declared_name_kind_and_labels():
    s = KAFKA_CONSUMERGROUP_LAG.sample(7, group="g", topic="t")
    assert (s.name, s.kind, s.labels, s.value) == ("kdiag_kafka_consumergroup_lag", GAUGE, (("group", "g"), ("topic", "t")), 7.0)
    assert KAFKA_CONSUMERGROUP_LAG.sample(7, group="g").labels == (("group", "g"),)  # topic is optional


@pytest.mark.parametrize("labels", [{}, {"topic": "t"}, {"group": "g", "partition": "0"}])
def test_labels_the_family_does_not_declare_are_refused(labels):
    with pytest.raises(LabelError, match="kdiag_kafka_consumergroup_lag"):
        KAFKA_CONSUMERGROUP_LAG.sample(1, **labels)


@pytest.mark.parametrize(("name", "kind", "error"), [
    ("kdiag_x_bytes", COUNTER, "counters, and only counters, end in _total"),
    ("kdiag_x_total", GAUGE, "counters, and only counters, end in _total"),
    ("node_x", GAUGE, "a name is kdiag_"),
    ("kdiag_kafka_consumergroup_lag", GAUGE, "declared twice"),
])
def test_a_bad_declaration_is_refused_at_import(name, kind, error):
    with pytest.raises(ValueError, match=error):
        Family(name, kind, "help")


def test_units_come_from_the_name():
    assert DECLARED["kdiag_disk_read_time_seconds_total"].unit == "seconds"
    assert DECLARED["kdiag_memory_MemTotal_bytes"].unit == "bytes"
    assert DECLARED["kdiag_interrupts_total"].unit == ""


def test_histogram_series_and_pattern_families_resolve_to_their_declaration():
    probe = declared_family("kdiag_probe_produce_latency_seconds_bucket")
    assert probe is not None and probe.kind == HISTOGRAM
    assert probe.series("_bucket", 3, le="0.1", broker_id="1").name == "kdiag_probe_produce_latency_seconds_bucket"
    odd = declared_family("kdiag_memory_CmaFree_bytes")  # a field only some kernels have: the meminfo pattern's
    assert odd is not None and odd == MEMORY_BYTES.family("CmaFree") and odd.name not in DECLARED
    assert declared_family("kdiag_no_such_thing") is None
