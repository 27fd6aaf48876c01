"""ext4's journal (jbd2) per filesystem from /proc/fs/jbd2/DEV-INODE/info: commits and how long one takes.

The journal thread's commit of a transaction (with data=ordered, writing the data it covers first) is what appends
wait on when the journal is slow; its kernel thread need not be found: the kernel reports each journal here.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.host._util import reason, skipped_samples
from kdiag.collectors.registry import registered
from kdiag.core.procfs import lines, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.families.storage import JBD2_COMMIT_SECONDS, JBD2_PHASE_SECONDS, JBD2_TRANSACTIONS_TOTAL

_FIRST = re.compile(r"(\d+) transactions?,? (?:\((\d+) requested\), )?each up to \d+ blocks")
_AVERAGE = re.compile(r"(\d+)(ms|us) (.+)")
# The since-mount averages worth keeping, by their line's text (fs/jbd2/journal.c jbd2_seq_info_show).
PHASES = {
    "waiting for transaction": "wait",
    "transaction was being locked": "locked",
    "flushing data (in ordered mode)": "flushing",
    "logging transaction": "logging",
}

class Journal(NamedTuple):
    """What one /proc/fs/jbd2/*/info says; the averages are absent before the first commit."""

    transactions: int
    commit_seconds: float | None
    phases: dict[str, float]


def parse_jbd2_info(text: str, source: str = "/proc/fs/jbd2/<dev>/info") -> Journal:
    """The transaction count, the average commit time and the per-phase averages of one journal."""
    numbered = lines(text)
    first = _FIRST.fullmatch(numbered[0][1].strip()) if numbered else None
    if first is None:
        raise malformed(source, numbered[0][0] if numbered else 1, numbered[0][1] if numbered else "",
                        "expected 'N transactions ...'")
    commit, phases = None, {}
    for _, line in numbered[1:]:
        if line.strip() == "average:":
            continue
        m = _AVERAGE.fullmatch(line.strip())
        if m is None:
            continue  # handles and blocks per transaction
        seconds = int(m[1]) / (1e3 if m[2] == "ms" else 1e6)
        if m[3] == "average transaction commit time":
            commit = seconds
        elif m[3] in PHASES:
            phases[PHASES[m[3]]] = seconds
    return Journal(int(first[1]), commit, phases)


def journal_device(name: str) -> str:
    """The block device of a journal directory DEV-INODE (sda1-8, dm-0-8, nvme0n1p2-8), as /sys/block names it."""
    device, sep, inode = name.rpartition("-")
    return device if sep and inode.isdigit() and device else name


@registered()
class Jbd2Collector(Collector):
    """Commits and commit time of every mounted ext4 (jbd2) journal; none without ext4 or jbd2."""

    name = "jbd2"
    families = (JBD2_TRANSACTIONS_TOTAL, JBD2_COMMIT_SECONDS, JBD2_PHASE_SECONDS, COLLECTOR_SKIPPED_ENTRIES)

    def collect(self, root: Root) -> list[Sample]:
        """Series per journal, labelled with the journal and its device's /dev path (as /proc/mounts shows it)."""
        if not root.exists("proc", "fs/jbd2"):
            return []
        samples: list[Sample] = []
        skipped: Counter[str] = Counter()
        for name in root.listdir("proc", "fs/jbd2"):
            try:
                journal = parse_jbd2_info(*read_source(root, "proc", f"fs/jbd2/{name}/info"))
                labels = {"journal": name, "device": dev_path(root, journal_device(name))}
            except OSError as e:
                skipped[reason(e)] += 1
                continue
            except ValueError:
                skipped["malformed"] += 1
                continue
            samples.append(JBD2_TRANSACTIONS_TOTAL.sample(journal.transactions, **labels))
            if journal.commit_seconds is not None:
                samples.append(JBD2_COMMIT_SECONDS.sample(journal.commit_seconds, **labels))
            samples += [JBD2_PHASE_SECONDS.sample(s, **labels, phase=p) for p, s in journal.phases.items()]
        return samples + skipped_samples(self.name, skipped)


def dev_path(root: Root, device: str) -> str:
    """/dev/DEVICE, or /dev/mapper/NAME for a device-mapper volume whose name /sys/block shows."""
    if device.startswith("dm-") and root.exists("sys", f"block/{device}/dm/name"):
        return f"/dev/mapper/{root.read('sys', f'block/{device}/dm/name').strip()}"
    return f"/dev/{device.replace('!', '/')}"  # the kernel writes a device name's "/" as "!" (cciss!c0d0p1)
