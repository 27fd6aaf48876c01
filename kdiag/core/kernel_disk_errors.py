"""Which disk a kernel log record reports an I/O error on, from the kernel's own error formats."""

from __future__ import annotations

import re

# block/blk-core.c blk_print_req_error: "%s error, dev %s, sector %llu op ..." (the %s from blk_errors: "I/O",
# "critical medium", "critical target", "timeout", ...); before 4.17 "blk_update_request: %s error, dev %s, sector",
# before 4.12 "end_request: I/O error, dev %s, sector". Not "Buffer I/O error on dev": that repeats an error above; not
# "operation not supported error": a command the disk does not offer (a discard), no fault of the disk.
_BLOCK = re.compile(r"(?:^|: )(?!operation not supported)[A-Za-z/ ]*error, dev (?P<dev>[^\s,]+), sector")
# drivers/scsi/constants.c via scsi_print_sense: "sd 2:0:0:0: [sdb] tag#0 Sense Key : Medium Error [current]".
# A Recovered Error (every ATA pass-through smartctl sends completes with one) is no error.
_SENSE = re.compile(r"\[(?P<dev>[^\]\s]+)\] (?:tag#\d+ )?Sense Key : (?:Medium Error|Hardware Error)")
# drivers/nvme/host/core.c nvme_log_error: "%s: %s(0x%x) @ LBA %llu, %u blocks, %s (sct 0x%x / sc 0x%x) %s%s".
_NVME_STATUS = re.compile(r"^(?P<dev>nvme\d+n\d+): .* \(sct 0x[0-9a-f]+ / sc 0x[0-9a-f]+\)")
# drivers/nvme/host/pci.c nvme_timeout: "nvme nvme0: I/O %d QID %d timeout, aborting" (newer: "I/O tag %d (%04x)").
_NVME_TIMEOUT = re.compile(r"^nvme (?P<ctrl>nvme\d+): I/O (?:tag )?\d+ .*QID \d+ timeout")


def message(record: str) -> str:
    """The text of one /dev/kmsg record ("prio,seq,usec,flags;text"), or the line itself when it has no prefix."""
    head, sep, text = record.partition(";")
    return text if sep and head.count(",") >= 3 else record


def error_devices(record: str, disks: list[str]) -> list[str]:
    """The disks among `disks` (or their partitions) that one kernel log record reports an I/O error on."""
    text = message(record)
    for pattern in (_BLOCK, _SENSE, _NVME_STATUS):
        if match := pattern.search(text):
            dev = match.group("dev")
            return [d for d in disks if dev == d or (dev.startswith(d) and dev[len(d):].lstrip("p").isdigit())]
    if match := _NVME_TIMEOUT.search(text):
        ctrl = match.group("ctrl")  # a controller's timeout stalls every namespace on it
        return [d for d in disks if re.fullmatch(rf"{ctrl}n\d+", d)]
    return []
