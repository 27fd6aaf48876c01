"""Samples: the label pool that keeps one labels object per series from batch to batch."""

from __future__ import annotations

from kdiag.core.sample import LabelPool, Sample, sample


def test_a_series_keeps_the_labels_object_of_its_first_batch():
    pool = LabelPool()
    first = pool.shared([sample("a", 1, group="g", topic="t"), sample("b", 1)])
    second = pool.shared([sample("a", 2, group="g", topic="t"), sample("a", 3, group="h", topic="t"), sample("b", 2)])
    assert second[0].labels is first[0].labels and second[0].value == 2.0
    assert second[2].labels is first[1].labels
    assert second[1].labels == (("group", "h"), ("topic", "t"))


def test_a_series_absent_from_a_batch_is_forgotten():
    pool = LabelPool()
    first = pool.shared([sample("a", 1, group="g")])
    pool.shared([sample("a", 1, group="h")])
    third = pool.shared([sample("a", 1, group="g")])
    assert third[0].labels == first[0].labels and third[0].labels is not first[0].labels


def test_a_series_made_with_the_canonical_labels_is_kept_as_it_is():
    pool = LabelPool()
    first = pool.shared([sample("a", 1, group="g")])
    labels = pool.canonical((("group", "g"),))
    made = Sample("a", labels, 2.0)
    assert labels is first[0].labels and pool.shared([made])[0] is made
    assert pool.canonical((("group", "new"),)) == (("group", "new"),)
