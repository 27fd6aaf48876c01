"""Block device queue settings from /sys/block/<dev>/queue: rotational and the active I/O scheduler."""

from __future__ import annotations

import re
from collections import Counter

from kdiag.collectors import Collector
from kdiag.collectors.host._util import reason, skipped_samples
from kdiag.collectors.registry import registered
from kdiag.core.procfs import is_virtual_block, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.families.storage import BLOCK_ROTATIONAL, BLOCK_SCHEDULER_INFO

_ACTIVE = re.compile(r"\[([^\]]+)\]")


def parse_scheduler(text: str, source: str = "queue/scheduler") -> str:
    """The active scheduler: the bracketed one in "none [mq-deadline] kyber", or the only one listed."""
    match = _ACTIVE.search(text)
    if match:
        return match.group(1)
    names = text.split()
    if len(names) != 1:
        raise malformed(source, 1, text, "no active scheduler in brackets")
    return names[0]


def parse_rotational(text: str, source: str = "queue/rotational") -> int:
    """1 for spinning disks, 0 for SSDs and virtual disks."""
    value = text.strip()
    if value not in ("0", "1"):
        raise malformed(source, 1, text, "expected 0 or 1")
    return int(value)



@registered()
class BlockCollector(Collector):
    """Rotational flag and active scheduler of each real block device."""

    name = "block"
    families = (BLOCK_ROTATIONAL, BLOCK_SCHEDULER_INFO, COLLECTOR_SKIPPED_ENTRIES)

    def collect(self, root: Root) -> list[Sample]:
        """Samples for every device in /sys/block with a request queue, without loop/ram/zram; a device whose queue
        cannot be read (removed meanwhile, refused) is left out and counted."""
        samples = []
        skipped: Counter[str] = Counter()
        for device in root.listdir("sys", "block"):
            queue = f"block/{device}/queue"
            if is_virtual_block(device) or not root.exists("sys", queue):
                continue
            try:
                scheduler = parse_scheduler(*read_source(root, "sys", f"{queue}/scheduler"))
                rotational = parse_rotational(*read_source(root, "sys", f"{queue}/rotational"))
            except OSError as e:
                skipped[reason(e)] += 1
                continue
            samples += [
                BLOCK_ROTATIONAL.sample(rotational, device=device),
                BLOCK_SCHEDULER_INFO.sample(1, device=device, scheduler=scheduler),
            ]
        return samples + skipped_samples(self.name, skipped)
