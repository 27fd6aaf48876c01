"""Moving a broker's leaderships away: the replica order that makes it nobody's preferred leader."""

from kdiag.tools.drill.leadership import last


def test_the_broker_goes_last_and_the_others_keep_their_order():
    assert last([3, 1, 2], 3) == [1, 2, 3]
    assert last([1, 3, 2], 3) == [1, 2, 3]


def test_a_partition_without_the_broker_is_unchanged():
    assert last([1, 2], 3) == [1, 2]
