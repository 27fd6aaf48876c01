"""The broker's threads waiting: run-queue delay from /proc/PID/task/TID/schedstat, D state from task/TID/stat."""

from __future__ import annotations

from collections import Counter

from kdiag.collectors import Collector
from kdiag.collectors.host._util import reason, skipped_samples
from kdiag.collectors.host.brokerpids import BrokerPids, broker_pids
from kdiag.collectors.registry import Shared, registered
from kdiag.config.settings import Config
from kdiag.core.procfs import malformed, parse_stat, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL, PROCESS_THREADS
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES

MAX_THREADS = 4096

def parse_schedstat(text: str, source: str = "/proc/<pid>/schedstat") -> tuple[int, int]:
    """(nanoseconds on a CPU, nanoseconds runnable waiting for one) of a `RUN WAIT TIMESLICES` schedstat line."""
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise malformed(source, 1, text, "expected three counts")
    return int(fields[0]), int(fields[1])


@registered(after=("processes",))
class SchedstatCollector(Collector):
    """Run-queue wait and thread states of each broker process, summed over its threads."""

    name = "schedstat"
    families = (PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL, PROCESS_THREADS, COLLECTOR_SKIPPED_ENTRIES)

    def __init__(self, brokers: BrokerPids | None = None):
        self.brokers = brokers or BrokerPids()
        # Threads come and go: the total is kept here from each thread's growth, so an ended thread never looks like a
        # counter reset. (pid, start) -> (total ns, {tid: its last wait ns}).
        self._waits: dict[tuple[int, int], tuple[int, dict[str, int]]] = {}

    @classmethod
    def from_config(cls, config: Config, shared: Shared) -> SchedstatCollector:
        """Over the broker lookup the config's collectors share."""
        return cls(shared.get(broker_pids))

    def collect(self, root: Root) -> list[Sample]:
        """Series per broker pid; a broker whose threads cannot be listed is left out and counted."""
        samples: list[Sample] = []
        skipped: Counter[str] = Counter()
        waits = {}
        for broker in self.brokers.brokers(root):
            key = (broker.pid, broker.start_ticks)
            try:
                tids = root.listdir("proc", f"{broker.pid}/task")[:MAX_THREADS]
            except OSError as e:
                skipped[reason(e)] += 1
                continue
            total, before = self._waits.get(key, (0, {}))
            seen, states = {}, Counter({"R": 0, "D": 0, "other": 0})
            for tid in tids:
                try:
                    _, wait = parse_schedstat(*read_source(root, "proc", f"{broker.pid}/task/{tid}/schedstat"))
                    state = parse_stat(*read_source(root, "proc", f"{broker.pid}/task/{tid}/stat")).state
                except OSError:
                    continue  # the thread ended meanwhile
                except ValueError:
                    skipped["malformed"] += 1
                    continue
                # A thread first seen counts all its wait (the first run's total is the waits so far).
                total += wait - before.get(tid, 0) if wait >= before.get(tid, 0) else wait
                seen[tid] = wait
                states[state if state in ("R", "D") else "other"] += 1
            waits[key] = (total, seen)
            labels = {"pid": broker.pid, "comm": broker.comm}
            samples.append(PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL.sample(total / 1e9, **labels))
            samples += [PROCESS_THREADS.sample(n, **labels, state=s) for s, n in sorted(states.items())]
        self._waits = waits
        return samples + skipped_samples(self.name, skipped)
