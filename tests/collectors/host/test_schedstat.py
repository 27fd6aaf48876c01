import shutil

import pytest
from tests.collectors.golden import FIXTURES, fixture_root

from kdiag.collectors.host.schedstat import SchedstatCollector, parse_schedstat
from kdiag.core.root import Root


def values(samples):
    return {(s.name, dict(s.labels).get("state", "")): s.value for s in samples}


def test_run_queue_wait_and_thread_states_of_the_broker():
    got = values(SchedstatCollector().collect(fixture_root("slow-broker-v2")))
    assert got[("kdiag_process_runqueue_wait_seconds_total", "")] == pytest.approx(6.600116235 + 2.95 + 0.0012)
    assert got[("kdiag_process_threads", "D")] == 1 and got[("kdiag_process_threads", "R")] == 1
    assert got[("kdiag_process_threads", "other")] == 1


def test_an_ended_thread_never_makes_the_total_fall(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    root = Root(tmp_path / "proc", tmp_path / "sys")
    collector = SchedstatCollector()
    first = values(collector.collect(root))[("kdiag_process_runqueue_wait_seconds_total", "")]
    shutil.rmtree(tmp_path / "proc/4242/task/4250")
    (tmp_path / "proc/4242/task/4242/schedstat").write_text("1793536626 6700116235 2820\n")
    second = values(collector.collect(root))[("kdiag_process_runqueue_wait_seconds_total", "")]
    assert second == pytest.approx(first + 0.1)


def test_parse_schedstat():
    assert parse_schedstat("1793536626 6600116235 2816\n") == (1793536626, 6600116235)
    with pytest.raises(ValueError, match=r"^x line 1: expected three counts"):
        parse_schedstat("1 2\n", "x")


def test_a_malformed_thread_is_counted_and_left_out(tmp_path):
    shutil.copytree(FIXTURES / "slow-broker-v2/proc", tmp_path / "proc")
    (tmp_path / "proc/4242/task/4251/schedstat").write_text("oops\n")
    samples = SchedstatCollector().collect(Root(tmp_path / "proc", tmp_path / "sys"))
    assert values(samples)[("kdiag_collector_skipped_entries", "")] == 1
    assert values(samples)[("kdiag_process_threads", "D")] == 0
