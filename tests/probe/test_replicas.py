"""The probe's replica pairs: their layout, and the service's pairs topic on the Kafka lab."""

from __future__ import annotations

from kdiag.probe.replicas import following, pair_assignment
from kdiag.probe.topic import Topology


def test_every_broker_leads_one_pair_and_follows_another():
    pairs = pair_assignment([3, 1, 2])
    assert pairs == [[2, 1], [3, 2], [1, 3]]
    assert sorted(p[0] for p in pairs) == sorted(p[1] for p in pairs) == [1, 2, 3]


def test_one_broker_has_no_pairs():
    assert pair_assignment([1]) == []


def test_following_reads_the_last_replica():
    topology = Topology({0: 2, 1: 3}, {0: [2, 1], 1: [3, 2]}, {0: [1, 2], 1: [2, 3]}, {1, 2, 3, 4})
    assert following(topology) == {1, 2}
