"""Block device queue settings from /sys/block/<dev>/queue: rotational and the active I/O scheduler."""

from __future__ import annotations

import re
from collections import Counter

from kdiag.core.procfs import is_virtual_block, malformed, read_source
from kdiag.collectors.host._util import SKIPPED_HELP, reason, skipped_samples
from kdiag.core.root import Root
from kdiag.core.sample import GAUGE, Sample, sample
from kdiag.collectors import Collector
from kdiag.collectors.registry import registered

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


HELP = {
    "kdiag_block_rotational": "Whether the block device is rotational (1) or not (0).",
    "kdiag_block_scheduler_info": "The active I/O scheduler of the block device, value 1.",
    **SKIPPED_HELP,
}


@registered()
class BlockCollector(Collector):
    """Rotational flag and active scheduler of each real block device."""

    name = "block"
    help = HELP

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
                sample("kdiag_block_rotational", rotational, GAUGE, device=device),
                sample("kdiag_block_scheduler_info", 1, GAUGE, device=device, scheduler=scheduler),
            ]
        return samples + skipped_samples(self.name, skipped)
