"""Signals of why a broker is slow as its host sees it: its threads waiting for a CPU or in D state, its cgroup's CPU
throttling and memory limit (added to the proc subject), and the journal and I/O errors of its log disks (added to the
disk subject)."""

from __future__ import annotations

import itertools
import re
import statistics

from kdiag.core.history import History, Points, counter_increase
from kdiag.analysis.signals import Signals, latest_by, latest_per, put, rates_by, rates_per, ratio
from kdiag.families.process import (
    KAFKA_LOG_DIR_INFO, PROCESS_IS_BROKER, PROCESS_CGROUP_CPU_PERIODS_TOTAL, PROCESS_CGROUP_CPU_QUOTA_CORES,
    PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL, PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL,
)
from kdiag.families.storage import (
    DISK_IO_ERRORS_TOTAL, FILESYSTEM_INFO, JBD2_COMMIT_SECONDS, JBD2_TRANSACTIONS_TOTAL, KERNEL_DISK_ERRORS_TOTAL,
    MD_MEMBER_ERRORS_TOTAL,
)
from kdiag.families.host import PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL, PROCESS_THREADS
from kdiag.families.kafka import KAFKA_REQUEST_TIME_SECONDS
from kdiag.families.process import (
    PROCESS_CGROUP_MEMORY_BYTES, PROCESS_CGROUP_MEMORY_LIMIT_BYTES, PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL,
    PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL, PROCESS_CGROUP_MEMORY_USAGE_BYTES,
)

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
    "memory_limit_bytes": "the smallest memory limit of the cgroups holding the process, page cache included",
    "memory_usage_share": "that cgroup's memory use over its limit (0-1)",
    "memory_anon_bytes": "that cgroup's anonymous memory (heap, stacks): what the page cache cannot take back",
    "memory_file_bytes": "that cgroup's page cache",
    "memory_cache_room_bytes": "the most page cache that cgroup can hold: its limit less its anonymous memory",
    "memory_limit_hits_per_second": "times per second that cgroup reached its limit and reclaimed (memory.events max, "
                                    "v1 memory.failcnt)",
    "memory_cgroup": "the cgroup whose memory limit is the smallest",
    "memory_where": "that cgroup as its path names it: a Kubernetes pod UID and container id, else the cgroup path",
    "memory_oom_kills_recent": f"processes the OOM killer killed in the cgroups holding the process in the last "
                               f"{ERRORS_SECONDS:.0f} s, the process's own predecessors in them included",
    "memory_oom_cgroup": "the cgroup where those OOM kills were counted",
    "memory_oom_where": "that cgroup as its path names it: a Kubernetes pod UID and container id, else the cgroup path",
    "broker_produce_p99_seconds": "for a broker process: the produce total time p99 of the broker kdiag reads by JMX "
                                  "whose latency moved most (the slowest, on a host with several)",
    "broker_produce_p99_vs_baseline": "that p99 over its own lower quartile in the history or over the other brokers' "
                                      "median, the larger (absent before 4 JMX reads)",
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


# Kubernetes' cgroups: the systemd driver's kubepods-<qos>-pod<uid with _>.slice/<runtime>-<id>.scope, the cgroupfs
# driver's kubepods/<qos>/pod<uid>/<id>.
POD = re.compile(r"(?:^|/)kubepods[^/]*?-pod([0-9a-f_]+)\.slice(?:/(?:cri-containerd|crio|docker)-([0-9a-f]+)\.scope)?"
                 r"|(?:^|/)kubepods(?:/[a-z]+)?/pod([0-9a-f-]+)(?:/([0-9a-f]+))?")


def where(cgroup: str) -> str:
    """A cgroup named as Kubernetes names it, "pod UID container ID (cgroup PATH)", else "cgroup PATH"."""
    m = POD.search(cgroup)
    if m is None:
        return f"cgroup {cgroup}"
    pod = (m.group(1) or "").replace("_", "-") or m.group(3)
    container = m.group(2) or m.group(4)
    return f"pod {pod}" + (f" container {container[:12]}" if container else "") + f" (cgroup {cgroup})"


def window_mean(points: Points, window: float) -> float:
    """Mean of a gauge's points within the last `window` seconds (the latest point at least)."""
    start = points[-1][0] - window
    values = [v for t, v in points if t >= start]
    return sum(values) / len(values)


def increase_over(points: Points, seconds: float) -> float:
    """A counter's increase over its points within the last `seconds` (resets counted as a restart from 0)."""
    start = points[-1][0] - seconds
    values = [v for t, v in points if t >= start]
    return sum(counter_increase(a, b, "counter") for a, b in itertools.pairwise(values))


def proc_wait_signals(history: History, window: float) -> dict[str, Signals]:
    """{pid: run-queue wait, D-state threads and cgroup CPU throttling} of the processes kdiag reads them for."""
    out: dict[str, Signals] = {}
    for pid, rate in rates_per(history, PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL, window, "pid").items():
        put(out.setdefault(pid, {}), runqueue_wait_per_second=rate)
    for labels, points, _ in history.series(PROCESS_THREADS.name):
        signals = out.setdefault(labels.get("pid", ""), {})
        signals["threads"] = float(signals.get("threads", 0.0)) + points[-1][1]
        if labels.get("state") == "D":
            signals["blocked_threads"] = window_mean(points, window)
    if (moved := produce_latency_moved(history)) is not None:
        for broker_pid, broker in latest_per(history, PROCESS_IS_BROKER, "pid").items():
            if broker == 1.0:
                put(out.setdefault(broker_pid, {}), broker_produce_p99_seconds=moved[0],
                    broker_produce_p99_vs_baseline=moved[1])
    periods = rates_by(history, PROCESS_CGROUP_CPU_PERIODS_TOTAL, window, "pid", "cgroup")
    throttled = rates_by(history, PROCESS_CGROUP_CPU_THROTTLED_PERIODS_TOTAL, window, "pid", "cgroup")
    stopped = rates_by(history, PROCESS_CGROUP_CPU_THROTTLED_SECONDS_TOTAL, window, "pid", "cgroup")
    for (pid, cgroup), quota in latest_by(history, PROCESS_CGROUP_CPU_QUOTA_CORES, "pid", "cgroup").items():
        signals = out.setdefault(pid, {})
        if quota < float(signals.get("cpu_quota_cores", quota + 1)):
            signals["cpu_quota_cores"] = quota
        share = ratio(throttled.get((pid, cgroup)), periods.get((pid, cgroup)))
        if share is not None and share >= float(signals.get("cpu_throttled_share", -1.0)):
            put(signals, cpu_throttled_share=share, cpu_throttled_seconds_per_second=stopped.get((pid, cgroup)),
                cgroup=cgroup)
    return out


PRODUCE_P99 = {"request": "Produce", "phase": "total", "quantile": "0.99"}


def produce_latency_moved(history: History) -> tuple[float, float] | None:
    """(p99, how far it moved) of the broker whose produce total time p99 moved most against its own lower quartile
    in the history or its peers' median; None without 4 reads of any broker."""
    now: dict[str, float] = {}
    baseline: dict[str, float] = {}
    for labels, points, _ in history.series(KAFKA_REQUEST_TIME_SECONDS.name):
        if all(labels.get(k) == v for k, v in PRODUCE_P99.items()) and len(points) >= 4:
            b = labels.get("broker_id", "")
            now[b], baseline[b] = points[-1][1], statistics.quantiles([v for _, v in points], n=4)[0]
    worst: tuple[float, float] | None = None
    for b, value in now.items():
        peers = [v for other, v in now.items() if other != b]
        moved = max((r for r in (ratio(value, baseline[b]), ratio(value, statistics.median(peers) if peers else None))
                     if r is not None), default=None)
        if moved is not None and (worst is None or moved > worst[1]):
            worst = (value, moved)
    return worst


def disk_cause_signals(history: History, window: float) -> dict[str, Signals]:
    """{disk: recent I/O errors, and the journal of a log filesystem on it} for the disk subject."""
    out: dict[str, Signals] = {}
    for family, disk_label, signal in ((KERNEL_DISK_ERRORS_TOTAL, "device", "io_errors_recent"),
                                       (MD_MEMBER_ERRORS_TOTAL, "disk", "io_errors_recent"),
                                       (DISK_IO_ERRORS_TOTAL, "device", "ioerr_cnt_recent")):
        for labels, points, _ in history.series(family.name):
            signals = out.setdefault(labels.get(disk_label, ""), {})
            signals[signal] = float(signals.get(signal, 0.0)) + increase_over(points, ERRORS_SECONDS)
    log_disks: dict[str, set[str]] = {}  # mountpoint -> the disks its log dirs sit on
    for disk, mountpoint in latest_by(history, KAFKA_LOG_DIR_INFO, "device", "mountpoint"):
        log_disks.setdefault(mountpoint, set()).add(disk)
    devices: dict[str, set[str]] = {}  # /dev path -> disks below its log dirs
    for device, mountpoint in latest_by(history, FILESYSTEM_INFO, "device", "mountpoint"):
        devices.setdefault(device, set()).update(log_disks.get(mountpoint, set()))
    commits = rates_per(history, JBD2_TRANSACTIONS_TOTAL, window, "journal")
    for (journal, device), seconds in latest_by(history, JBD2_COMMIT_SECONDS, "journal", "device").items():
        for disk in devices.get(device, set()):
            signals = out.setdefault(disk, {})
            if seconds >= float(signals.get("journal_commit_seconds", -1.0)):
                busy = commits.get(journal, 0.0) * seconds
                put(signals, journal=journal, journal_commit_seconds=seconds,
                    journal_commits_per_second=commits.get(journal), journal_busy_share=min(busy, 1.0))
    return out



def proc_memory_signals(history: History, window: float) -> dict[str, Signals]:
    """{pid: the smallest memory limit holding it and that cgroup's use, and recent OOM kills in its cgroups}."""
    out: dict[str, Signals] = {}
    usage = latest_by(history, PROCESS_CGROUP_MEMORY_USAGE_BYTES, "pid", "cgroup")
    kinds = latest_by(history, PROCESS_CGROUP_MEMORY_BYTES, "pid", "cgroup", "type")
    hits = rates_by(history, PROCESS_CGROUP_MEMORY_LIMIT_HITS_TOTAL, window, "pid", "cgroup")
    for (pid, cgroup), limit in latest_by(history, PROCESS_CGROUP_MEMORY_LIMIT_BYTES, "pid", "cgroup").items():
        signals = out.setdefault(pid, {})
        if limit >= float(signals.get("memory_limit_bytes", limit + 1)):
            continue
        anon = kinds.get((pid, cgroup, "anon"))
        put(signals, memory_limit_bytes=limit, memory_usage_share=ratio(usage.get((pid, cgroup)), limit),
            memory_anon_bytes=anon, memory_file_bytes=kinds.get((pid, cgroup, "file")),
            memory_cache_room_bytes=None if anon is None else max(limit - anon, 0.0),
            memory_limit_hits_per_second=hits.get((pid, cgroup)), memory_cgroup=cgroup, memory_where=where(cgroup))
    # A killed broker's series end with it; its successor in the same cgroup starts at the count that includes the
    # kill: the cgroup's count over every pid's points, the gone ones' included, tells it.
    name = PROCESS_CGROUP_MEMORY_OOM_KILLS_TOTAL.name
    by_cgroup: dict[str, list[tuple[float, float]]] = {}
    for labels, points in history.recent_series(name):
        by_cgroup.setdefault(labels.get("cgroup", ""), []).extend(points)
    for labels, _, _ in history.series(name):
        cgroup = labels.get("cgroup", "")
        merged = by_cgroup[cgroup]
        start = max(t for t, _ in merged) - ERRORS_SECONDS
        values = [v for t, v in merged if t >= start]
        kills = max(values) - min(values)
        signals = out.setdefault(labels.get("pid", ""), {})
        if kills >= float(signals.get("memory_oom_kills_recent", 0.0)):
            put(signals, memory_oom_kills_recent=kills, memory_oom_cgroup=cgroup, memory_oom_where=where(cgroup))
    return out
