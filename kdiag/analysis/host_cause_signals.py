"""Signals of why a broker is slow as its host sees it: its threads waiting for a CPU or in D state, its cgroup's CPU
throttling (added to the proc subject), and the journal and I/O errors of its log disks (added to the disk subject)."""

from __future__ import annotations

import itertools
from collections import deque

from kdiag.core.history import History, counter_increase
from kdiag.analysis.signals import Signals, latest_by, put, rates_by, rates_per, ratio

ERRORS_SECONDS = 300.0

PROC_SCHEMA = {
    "threads": "threads of the process",
    "runqueue_wait_per_second": "seconds per second its threads spent runnable but waiting for a CPU (summed over "
                                "threads: 0.5 is half a thread always waiting)",
    "blocked_threads": "its threads in uninterruptible sleep (D state), averaged over the window",
    "cpu_quota_cores": "the smallest CPU quota of the cgroups holding the process, in cores",
    "cpu_throttled_share": "share of quota periods in which its most throttled cgroup ran out of quota (0-1)",
    "cpu_throttled_seconds_per_second": "seconds per second that cgroup's tasks were stopped for want of quota",
    "cgroup": "the cgroup (quota set there) that throttles the process most",
}
DISK_SCHEMA = {
    "io_errors_recent": f"I/O errors the kernel log reported on the disk, or its md member counted, in the last "
                        f"{ERRORS_SECONDS:.0f} s",
    "ioerr_cnt_recent": f"rise of the disk's SCSI ioerr_cnt in the last {ERRORS_SECONDS:.0f} s: corroboration only, "
                        "smartctl's pass-through commands raise it on a healthy disk",
    "journal": "the ext4 journal (jbd2, DEV-INODE) of a filesystem holding Kafka log dirs on this disk",
    "journal_commit_seconds": "that journal's running average time to commit one transaction",
    "journal_commits_per_second": "transactions that journal commits per second",
    "journal_busy_share": "share of the time that journal spends committing (commits/s x commit time, 0-1)",
}


def window_mean(points: deque[tuple[float, float]], window: float) -> float:
    """Mean of a gauge's points within the last `window` seconds (the latest point at least)."""
    start = points[-1][0] - window
    values = [v for t, v in points if t >= start]
    return sum(values) / len(values)


def increase_over(points: deque[tuple[float, float]], seconds: float) -> float:
    """A counter's increase over its points within the last `seconds` (resets counted as a restart from 0)."""
    start = points[-1][0] - seconds
    values = [v for t, v in points if t >= start]
    return sum(counter_increase(a, b, "counter") for a, b in itertools.pairwise(values))


def proc_wait_signals(history: History, window: float) -> dict[str, Signals]:
    """{pid: run-queue wait, D-state threads and cgroup CPU throttling} of the processes kdiag reads them for."""
    out: dict[str, Signals] = {}
    for pid, rate in rates_per(history, "kdiag_process_runqueue_wait_seconds_total", window, "pid").items():
        put(out.setdefault(pid, {}), runqueue_wait_per_second=rate)
    for labels, points, _ in history.series("kdiag_process_threads"):
        signals = out.setdefault(labels.get("pid", ""), {})
        signals["threads"] = float(signals.get("threads", 0.0)) + points[-1][1]
        if labels.get("state") == "D":
            signals["blocked_threads"] = window_mean(points, window)
    periods = rates_by(history, "kdiag_process_cgroup_cpu_periods_total", window, "pid", "cgroup")
    throttled = rates_by(history, "kdiag_process_cgroup_cpu_throttled_periods_total", window, "pid", "cgroup")
    stopped = rates_by(history, "kdiag_process_cgroup_cpu_throttled_seconds_total", window, "pid", "cgroup")
    for (pid, cgroup), quota in latest_by(history, "kdiag_process_cgroup_cpu_quota_cores", "pid", "cgroup").items():
        signals = out.setdefault(pid, {})
        if quota < float(signals.get("cpu_quota_cores", quota + 1)):
            signals["cpu_quota_cores"] = quota
        share = ratio(throttled.get((pid, cgroup)), periods.get((pid, cgroup)))
        if share is not None and share >= float(signals.get("cpu_throttled_share", -1.0)):
            put(signals, cpu_throttled_share=share, cpu_throttled_seconds_per_second=stopped.get((pid, cgroup)),
                cgroup=cgroup)
    return out


def disk_cause_signals(history: History, window: float) -> dict[str, Signals]:
    """{disk: recent I/O errors, and the journal of a log filesystem on it} for the disk subject."""
    out: dict[str, Signals] = {}
    for name, disk_label, signal in (("kdiag_kernel_disk_errors_total", "device", "io_errors_recent"),
                                     ("kdiag_md_member_errors_total", "disk", "io_errors_recent"),
                                     ("kdiag_disk_io_errors_total", "device", "ioerr_cnt_recent")):
        for labels, points, _ in history.series(name):
            signals = out.setdefault(labels.get(disk_label, ""), {})
            signals[signal] = float(signals.get(signal, 0.0)) + increase_over(points, ERRORS_SECONDS)
    log_disks: dict[str, set[str]] = {}  # mountpoint -> the disks its log dirs sit on
    for disk, mountpoint in latest_by(history, "kdiag_kafka_log_dir_info", "device", "mountpoint"):
        log_disks.setdefault(mountpoint, set()).add(disk)
    devices: dict[str, set[str]] = {}  # /dev path -> disks below its log dirs
    for device, mountpoint in latest_by(history, "kdiag_filesystem_info", "device", "mountpoint"):
        devices.setdefault(device, set()).update(log_disks.get(mountpoint, set()))
    commits = rates_per(history, "kdiag_jbd2_transactions_total", window, "journal")
    for (journal, device), seconds in latest_by(history, "kdiag_jbd2_commit_seconds", "journal", "device").items():
        for disk in devices.get(device, set()):
            signals = out.setdefault(disk, {})
            if seconds >= float(signals.get("journal_commit_seconds", -1.0)):
                busy = commits.get(journal, 0.0) * seconds
                put(signals, journal=journal, journal_commit_seconds=seconds,
                    journal_commits_per_second=commits.get(journal), journal_busy_share=min(busy, 1.0))
    return out

