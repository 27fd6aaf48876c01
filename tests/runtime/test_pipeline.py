"""CollectorSet's worker threads: one for all runs, a new one only while a hung run keeps the old."""

from __future__ import annotations

import threading

from tests.waiting import wait_until

from kdiag.collectors import Collector
from kdiag.runtime.pipeline import CollectorSet
from kdiag.core.root import Root
from kdiag.core.sample import GAUGE, sample


class Counting(Collector):
    """A collector that returns one sample, or blocks while `gate` is closed."""

    def __init__(self, name: str):
        self.name = name
        self.families = ()
        self.gate = threading.Event()
        self.gate.set()

    def collect(self, root: Root):
        self.gate.wait()
        return [sample(f"kdiag_test_{self.name}", 1, GAUGE)]


def workers() -> int:
    return sum(t.name == "collector-worker" for t in threading.enumerate())


def test_runs_share_one_worker_thread():
    before = workers()
    collectors = CollectorSet([Counting("a"), Counting("b"), Counting("c")])
    for _ in range(50):
        assert len(collectors.run(Root(), 30)) == 3
    assert workers() == before + 1


def test_a_hung_run_keeps_its_thread_the_others_go_on_and_it_comes_back_when_it_ends():
    before = workers()
    hung, fine = Counting("hung"), Counting("fine")
    collectors = CollectorSet([hung, fine])
    hung.gate.clear()
    assert [s.name for s in collectors.run(Root(), 0.5)] == ["kdiag_test_fine"]
    assert [s.name for s in collectors.run(Root(), 0.5)] == ["kdiag_test_fine"]
    assert "still hangs" in collectors.health["hung"].error
    assert workers() == before + 2  # the hung run's thread and the one serving the others
    hung.gate.set()
    wait_until(lambda: len(collectors.run(Root(), 0.5)) == 2, 30, "the hung collector back once its run ended")
    wait_until(lambda: workers() == before + 1, 30, "the hung run's thread gone")


def test_a_collector_gets_the_optional_parts_from_the_protocol():
    plain = Counting("plain")
    assert (plain.ready(), plain.close(), plain.child_cpu_seconds) == (True, None, 0.0)


def test_the_set_closes_every_collector_and_counts_a_childs_cpu():
    closed: list[str] = []

    class WithChild(Counting):
        child_cpu_seconds = 2.5

        def close(self) -> None:
            closed.append(self.name)

    collectors = CollectorSet([WithChild("child"), Counting("plain")])
    collectors.run(Root())
    assert collectors.health["child"].cpu >= 2.5 > collectors.health["plain"].cpu
    collectors.run(Root())
    assert 5.0 <= collectors.health["child"].cpu_total < 5.0 + 2 * (collectors.health["child"].cpu - 2.5) + 0.5
    collectors.close()
    assert closed == ["child"]
