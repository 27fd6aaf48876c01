"""I/O errors of each disk: those the kernel log reports (/dev/kmsg), each md RAID member's md/dev-X/errors
(Documentation/admin-guide/md.rst), and a SCSI/SATA disk's device/ioerr_cnt, which also counts commands that succeeded
with a sense (smartctl's ATA pass-through): corroboration only. NVMe's media_errors is in its SMART log, not in sysfs.
"""

from __future__ import annotations

from collections import Counter

from kdiag.collectors import Collector
from kdiag.collectors.host._util import reason, skipped_samples
from kdiag.collectors.registry import registered
from kdiag.core.blockdev import whole_disk
from kdiag.core.kernel_disk_errors import error_devices
from kdiag.core.procfs import is_virtual_block, malformed, read_source
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.own import COLLECTOR_SKIPPED_ENTRIES
from kdiag.families.storage import DISK_IO_ERRORS_TOTAL, KERNEL_DISK_ERRORS_TOTAL, MD_MEMBER_ERRORS_TOTAL


def parse_count(text: str, source: str, base: int = 10) -> int:
    """One integer of a sysfs attribute: ioerr_cnt is hexadecimal (0x1a), md's errors decimal."""
    try:
        return int(text.strip(), base if base == 10 else 0)
    except ValueError:
        raise malformed(source, 1, text, "expected a count") from None


@registered()
class BlockErrorsCollector(Collector):
    """I/O error counts of every disk and md member that reports them."""

    name = "blockerrors"
    families = (DISK_IO_ERRORS_TOTAL, KERNEL_DISK_ERRORS_TOTAL, MD_MEMBER_ERRORS_TOTAL, COLLECTOR_SKIPPED_ENTRIES)

    def __init__(self) -> None:
        self.kernel_errors: Counter[str] = Counter()

    def collect(self, root: Root) -> list[Sample]:
        """A counter per disk of kernel-logged errors and of ioerr_cnt, and per md member; an unreadable one is left
        out and counted."""
        samples: list[Sample] = []
        skipped: Counter[str] = Counter()
        disks = [d for d in root.listdir("sys", "block") if not is_virtual_block(d)]
        try:
            for record in root.kernel_log():
                self.kernel_errors.update(error_devices(record, disks))
            # Every disk from the start: the first error is then an increase, not a new series.
            samples += [KERNEL_DISK_ERRORS_TOTAL.sample(self.kernel_errors[d], device=d) for d in disks]
        except OSError as e:
            skipped[reason(e)] += 1
        for device in disks:
            try:
                if root.exists("sys", f"block/{device}/device/ioerr_cnt"):
                    count = parse_count(*read_source(root, "sys", f"block/{device}/device/ioerr_cnt"), base=16)
                    samples.append(DISK_IO_ERRORS_TOTAL.sample(count, device=device))
                if root.exists("sys", f"block/{device}/md"):
                    samples += md_member_samples(root, device)
            except OSError as e:
                skipped[reason(e)] += 1
            except ValueError:
                skipped["malformed"] += 1
        return samples + skipped_samples(self.name, skipped)


def md_member_samples(root: Root, md: str) -> list[Sample]:
    """kdiag_md_member_errors_total of each dev-X member of one md array."""
    samples = []
    for entry in root.listdir("sys", f"block/{md}/md"):
        if entry.startswith("dev-") and root.exists("sys", f"block/{md}/md/{entry}/errors"):
            member = entry.removeprefix("dev-")
            count = parse_count(*read_source(root, "sys", f"block/{md}/md/{entry}/errors"))
            samples.append(MD_MEMBER_ERRORS_TOTAL.sample(count, device=md, member=member, disk=whole_disk(root, member)))
    return samples
