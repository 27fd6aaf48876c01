"""The lab brokers' heap and open files limit for the partitions and groups asked, and what is said when the limit
cannot be raised."""

from __future__ import annotations

import resource

import pytest

from kdiag.tools.lab import sizing


@pytest.fixture
def limits(monkeypatch, tmp_path):
    """This process's open files limits and whether it may raise them, as the test sets them."""
    nr_open = tmp_path / "nr_open"
    nr_open.write_text("1048576\n")
    monkeypatch.setattr(sizing, "NR_OPEN", nr_open)

    def set_limits(hard: int, root: bool, ceiling: int = 1048576) -> None:
        monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, hard))
        monkeypatch.setattr(sizing, "can_raise", lambda: root)
        nr_open.write_text(f"{ceiling}\n")
    return set_limits


def test_a_small_lab_keeps_the_default_heap_and_its_inherited_limit(limits):
    limits(20_000, root=False)
    assert sizing.size(1_000, 100, 1) == sizing.Sizing(512, 20_000, 2048 + 1_050)


def test_the_lab_that_died_at_20000_partitions_gets_the_files_and_heap_it_lacked(limits):
    limits(20_000, root=True)
    got = sizing.size(20_000, 5_000, 1)
    assert got.nofile == got.wanted_nofile > 20_000 and not got.note
    assert got.heap_mb >= 1024 and got.heap_mb % 256 == 0


def test_three_brokers_share_the_partitions_and_groups(limits):
    limits(20_000, root=True)
    one, three = sizing.size(90_000, 9_000, 1), sizing.size(90_000, 9_000, 3)
    assert three.wanted_nofile < one.wanted_nofile / 2 and three.heap_mb < one.heap_mb


def test_without_cap_sys_resource_the_limit_stays_and_the_note_says_how_to_raise_it(limits):
    limits(20_000, root=False)
    got = sizing.size(20_000, 0, 1)
    assert got.nofile == 20_000 < got.wanted_nofile and "CAP_SYS_RESOURCE" in got.note


def test_past_fs_nr_open_even_root_gets_the_ceiling_and_is_told(limits):
    limits(20_000, root=True, ceiling=21_000)
    got = sizing.size(20_000, 0, 1)
    assert got.nofile == 21_000 and "fs.nr_open" in got.note


def test_the_note_names_the_brokers_that_fit_100000_partitions_under_the_limit(limits):
    limits(20_000, root=False)
    got = sizing.size(100_000, 10_000, 3)
    assert got.nofile == 20_000 < got.wanted_nofile and "with 6 brokers" in got.note
    six = sizing.size(100_000, 10_000, 6)
    assert six.wanted_nofile <= 20_000 and not six.note and six.heap_mb >= 1280
