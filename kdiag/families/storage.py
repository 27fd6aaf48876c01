"""Storage families: disks, block queues, disk errors, ext4 journals, mounts and filesystems."""

from __future__ import annotations

from kdiag.families.family import counter, gauge

# diskstats
DISK_FLUSH_REQUESTS_TIME_SECONDS_TOTAL = counter(
    "kdiag_disk_flush_requests_time_seconds_total", "Seconds spent by all flush requests.", "device"
)
DISK_FLUSH_REQUESTS_TOTAL = counter("kdiag_disk_flush_requests_total", "Flush requests completed successfully.", "device")
DISK_IO_NOW = gauge("kdiag_disk_io_now", "I/Os currently in progress.", "device")
DISK_IO_TIME_SECONDS_TOTAL = counter("kdiag_disk_io_time_seconds_total", "Seconds spent doing I/Os.", "device")
DISK_IO_TIME_WEIGHTED_SECONDS_TOTAL = counter(
    "kdiag_disk_io_time_weighted_seconds_total", "Weighted seconds spent doing I/Os.", "device"
)
DISK_READ_BYTES_TOTAL = counter("kdiag_disk_read_bytes_total", "Bytes read.", "device")
DISK_READ_TIME_SECONDS_TOTAL = counter("kdiag_disk_read_time_seconds_total", "Seconds spent by all reads.", "device")
DISK_READS_COMPLETED_TOTAL = counter("kdiag_disk_reads_completed_total", "Reads completed successfully.", "device")
DISK_WRITE_TIME_SECONDS_TOTAL = counter("kdiag_disk_write_time_seconds_total", "Seconds spent by all writes.", "device")
DISK_WRITES_COMPLETED_TOTAL = counter("kdiag_disk_writes_completed_total", "Writes completed successfully.", "device")
DISK_WRITTEN_BYTES_TOTAL = counter("kdiag_disk_written_bytes_total", "Bytes written.", "device")

# block
BLOCK_ROTATIONAL = gauge("kdiag_block_rotational", "Whether the block device is rotational (1) or not (0).", "device")
BLOCK_SCHEDULER_INFO = gauge(
    "kdiag_block_scheduler_info", "The active I/O scheduler of the block device, value 1.", "device", "scheduler"
)

# blockerrors
DISK_IO_ERRORS_TOTAL = counter(
    "kdiag_disk_io_errors_total", "Commands to a SCSI/SATA disk that completed with a non-zero result (device/ioerr_cnt), "
    "including ATA pass-through commands that succeeded, as smartctl's do.", "device"
)
KERNEL_DISK_ERRORS_TOTAL = counter(
    "kdiag_kernel_disk_errors_total", "I/O errors the kernel log reported on the disk since kdiag started (block layer "
    "errors, SCSI medium or hardware errors, NVMe status errors and timeouts).", "device")
MD_MEMBER_ERRORS_TOTAL = counter(
    "kdiag_md_member_errors_total",
    "Read errors on an md RAID member that were corrected or ignored without failing it (md/dev-X/errors); disk"
    " is the member's whole disk.",
    "device",
    "member",
    "disk",
)

# jbd2
JBD2_COMMIT_SECONDS = gauge(
    "kdiag_jbd2_commit_seconds",
    "The journal's running average time to commit one transaction (recent commits weigh most).",
    "journal",
    "device",
)
JBD2_PHASE_SECONDS = gauge(
    "kdiag_jbd2_phase_seconds",
    "Average seconds per transaction since mount in one phase: handles waiting for a transaction, the "
    "transaction locked, data flushed (data=ordered), the log written.",
    "journal",
    "device",
    "phase",
)
JBD2_TRANSACTIONS_TOTAL = counter(
    "kdiag_jbd2_transactions_total", "Transactions the journal has committed since the filesystem was mounted.", "journal", "device"
)

# mounts
FILESYSTEM_INFO = gauge("kdiag_filesystem_info", "A mounted block device filesystem, value 1.", "device", "fstype", "mountpoint")
FILESYSTEM_NOATIME = gauge(
    "kdiag_filesystem_noatime", "Whether the filesystem is mounted noatime (1) or updates atime (0).", "device", "fstype", "mountpoint"
)

# statvfs
FILESYSTEM_AVAIL_BYTES = gauge(
    "kdiag_filesystem_avail_bytes", "Filesystem space available to non-root users in bytes.", "device", "fstype", "mountpoint"
)
FILESYSTEM_SIZE_BYTES = gauge("kdiag_filesystem_size_bytes", "Filesystem size in bytes.", "device", "fstype", "mountpoint")
