"""Signals: named numbers per subject (host, cpu, nic, disk, proc, ...) derived from the history.

A subject kind is registered with `@subject(kind, schema)`; its function maps the history to
{subject id: {signal: value}}. A signal that cannot be computed is left out, never guessed; the
schema is what rules may name, checked when rules load.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from kdiag.core.history import History, Points, window_rate
from kdiag.families.family import Family
from kdiag.families.host import (
    CPU_SECONDS_TOTAL, MEMORY_CACHED_BYTES, MEMORY_MEMAVAILABLE_BYTES, MEMORY_MEMTOTAL_BYTES, MEMORY_SWAPFREE_BYTES,
    MEMORY_SWAPTOTAL_BYTES, SOFTIRQS_TOTAL, SOFTNET_DROPPED_TOTAL, SOFTNET_TIMES_SQUEEZED_TOTAL, SYSCTL,
    VMSTAT_PSWPIN_TOTAL, VMSTAT_PSWPOUT_TOTAL,
)
from kdiag.families.network import NETSTAT_TCP_OUTSEGS_TOTAL, NETSTAT_TCP_RETRANSSEGS_TOTAL, NETWORK_QUEUES
from kdiag.families.process import PROCESS_IS_BROKER

Signals = dict[str, float | str]
SubjectFunction = Callable[[History, float], dict[str, Signals]]


@dataclass(frozen=True)
class SubjectKind:
    """One kind of subject: its signal names with descriptions and the function computing them."""

    name: str
    schema: dict[str, str]
    compute: SubjectFunction


SUBJECT_KINDS: dict[str, SubjectKind] = {}


def subject(kind: str, schema: dict[str, str]) -> Callable[[SubjectFunction], SubjectFunction]:
    """Register a subject kind; every subject also has a string `name`."""

    def register(fn: SubjectFunction) -> SubjectFunction:
        SUBJECT_KINDS[kind] = SubjectKind(kind, {"name": "what the subject is called", **schema}, fn)
        return fn

    return register


def rates_by(history: History, family: Family, window: float, *label_names: str,
             where: dict[str, str] | None = None, suffix: str = "") -> dict[tuple[str, ...], float]:
    """Per-second rates of every series of one counter (or a histogram's `suffix` series; those with the `where`
    labels), summed per value of label_names."""
    out: dict[tuple[str, ...], float] = {}
    for labels, points, kind in history.series(family.name + suffix):
        if where and any(labels.get(k) != v for k, v in where.items()):
            continue
        r = window_rate(points, window, kind)
        if r is not None:
            key = tuple(labels.get(n, "") for n in label_names)
            out[key] = out.get(key, 0.0) + r
    return out


def latest_by(history: History, family: Family, *label_names: str) -> dict[tuple[str, ...], float]:
    """Latest value of every series of one gauge, keyed by the given labels."""
    return {tuple(labels.get(n, "") for n in label_names): pts[-1][1] for labels, pts, _ in history.series(family.name)}


def rates_per(history: History, family: Family, window: float, label: str, where: dict[str, str] | None = None) -> dict[str, float]:
    """Per-second rates of one counter (those with the `where` labels) summed per value of one label."""
    return {k[0]: v for k, v in rates_by(history, family, window, label, where=where).items()}


def latest_per(history: History, family: Family, label: str) -> dict[str, float]:
    """Latest values of one gauge keyed by one label."""
    return {value: points[-1][1] for value, points in history.series_of(family.name, label)}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is zero."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def per_1k(events: float | None, messages: float | None) -> float | None:
    """Events per 1,000 messages (both per second), None while no message flows."""
    r = ratio(events, messages)
    return None if r is None else 1000.0 * r


def put(signals: Signals, **values: float | str | None) -> Signals:
    """Add the known values to a signal dict, leaving unknown (None) ones out."""
    signals.update({k: (v if isinstance(v, str) else float(v)) for k, v in values.items() if v is not None})
    return signals


def cpu_mode_rates(history: History, window: float) -> dict[str, dict[str, float]]:
    """CPU seconds per second by cpu and mode (shared by the cpu and host subjects: do not change the result)."""
    history.note_read(CPU_SECONDS_TOTAL.name)  # the second caller gets the cached result without reading
    return _cpu_mode_rates(history, window, history.latest_time)


@functools.lru_cache(maxsize=1)
def _cpu_mode_rates(history: History, window: float, _at: float | None) -> dict[str, dict[str, float]]:
    # Asked twice per cycle (cpu and host subjects); 1,024 series on a 128-CPU host.
    out: dict[str, dict[str, float]] = {}
    for (cpu, mode), r in rates_by(history, CPU_SECONDS_TOTAL, window, "cpu", "mode").items():
        out.setdefault(cpu, {})[mode] = r
    return out


def shares(values: dict[str, float]) -> tuple[float | None, float | None, str | None]:
    """(share of cpu "0", share of the busiest key, busiest key) of a per-CPU breakdown."""
    total = sum(values.values())
    if not total:
        return None, None, None
    top = max(values, key=values.__getitem__)
    return values.get("0", 0.0) / total, values[top] / total, top


CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@subject("cpu", {
    **{f"{m}_share": f"share of this CPU's time in {m} (0-1)" for m in CPU_MODES},
    "busy_share": "share of this CPU's time not idle or iowait (0-1)",
})
def cpu_signals(history: History, window: float) -> dict[str, Signals]:
    """Mode shares per CPU."""
    out = {}
    for cpu, modes in cpu_mode_rates(history, window).items():
        total = sum(modes.values())
        s: Signals = {"name": f"cpu{cpu}"}
        put(s, **{f"{m}_share": ratio(modes.get(m, 0.0), total) for m in CPU_MODES})
        put(s, busy_share=ratio(total - modes.get("idle", 0.0) - modes.get("iowait", 0.0), total))
        out[cpu] = s
    return out


def one(values: dict[tuple[str, ...], float], *key: str) -> float | None:
    """The value at one key of a rates_by/latest_by result, None when absent."""
    return values.get(tuple(key))


def total(values: dict[tuple[str, ...], float]) -> float | None:
    """Sum of a rates_by/latest_by result, None when it is empty."""
    return sum(values.values()) if values else None


def series_change(points: Points, seconds: float) -> tuple[float, float] | None:
    """(latest value minus the oldest within the last `seconds`, seconds between them); None with one point."""
    if len(points) < 2:
        return None
    start_t, start = next((t, v) for t, v in points if t >= points[-1][0] - seconds)
    return points[-1][1] - start, points[-1][0] - start_t


def change_over(history: History, family: Family, seconds: float) -> float | None:
    """Latest value minus the oldest value within the last `seconds` of one unlabelled gauge."""
    for _, points, _ in history.series(family.name):
        change = series_change(points, seconds)
        return change[0] if change else None
    return None


@subject("host", {
    "cpu_count": "online CPUs",
    "cpu0_softirq_share": "share of CPU0's time in softirq (0-1)",
    "cpu0_net_rx_share": "share of all NET_RX softirqs handled on CPU0 (0-1)",
    "net_rx_top_cpu_share": "share of all NET_RX softirqs handled on the busiest CPU (0-1)",
    "net_rx_top_cpu": "the CPU handling most NET_RX softirqs",
    "net_rx_softirqs_per_second": "NET_RX softirqs per second, all CPUs",
    "swap_in_pages_per_second": "pages swapped in per second",
    "swap_out_pages_per_second": "pages swapped out per second",
    "swap_total_bytes": "configured swap",
    "swap_used_bytes": "swap in use",
    "swappiness": "vm.swappiness",
    "dirty_ratio": "vm.dirty_ratio: % of memory dirty before writers are throttled to write back themselves",
    "dirty_background_ratio": "vm.dirty_background_ratio: % of memory dirty before background write-back starts",
    "broker_processes": "Kafka broker processes running on this host",
    "memory_total_bytes": "MemTotal",
    "busy_share": "share of all CPUs' time not idle or iowait (0-1)",
    "rmem_max": "net.core.rmem_max: the largest receive buffer a socket may ask for",
    "wmem_max": "net.core.wmem_max: the largest send buffer a socket may ask for",
    "nic_rx_queues_max": "receive queues of the NIC with the most (lo excluded)",
    "page_cache_bytes": "page cache (Cached)",
    "page_cache_change_bytes": "change of the page cache over the last 5 minutes",
    "memory_available_bytes": "MemAvailable",
    "tcp_out_segments_per_second": "TCP segments sent per second",
    "tcp_retransmit_ratio": "TCP segments retransmitted per segment sent (0-1)",
    "softnet_dropped_per_second": "packets dropped per second because a CPU's backlog was full",
    "softnet_squeezed_per_second": "NET_RX runs per second that ran out of budget with work left",
    "steal_share": "share of all CPUs' time the hypervisor gave to other guests while this one had work (0-1)",
})
def host_signals(history: History, window: float) -> dict[str, Signals]:
    """Host-wide CPU, softirq, swap, page cache and TCP signals."""
    cpus = cpu_mode_rates(history, window)
    net_rx = rates_per(history, SOFTIRQS_TOTAL, window, "cpu", where={"type": "NET_RX"})
    cpu0_net_rx, top_net_rx, top_cpu = shares(net_rx)
    swap_total = total(latest_by(history, MEMORY_SWAPTOTAL_BYTES))
    swap_free = total(latest_by(history, MEMORY_SWAPFREE_BYTES))
    out_segs = total(rates_by(history, NETSTAT_TCP_OUTSEGS_TOTAL, window))
    sysctl = latest_by(history, SYSCTL, "name")
    s: Signals = {"name": "host"}
    put(
        s,
        cpu_count=len(cpus) or None,
        cpu0_softirq_share=ratio(cpus.get("0", {}).get("softirq"), sum(cpus.get("0", {}).values())),
        cpu0_net_rx_share=cpu0_net_rx,
        net_rx_top_cpu_share=top_net_rx,
        net_rx_top_cpu=top_cpu,
        net_rx_softirqs_per_second=sum(net_rx.values()) if net_rx else None,
        swap_in_pages_per_second=total(rates_by(history, VMSTAT_PSWPIN_TOTAL, window)),
        swap_out_pages_per_second=total(rates_by(history, VMSTAT_PSWPOUT_TOTAL, window)),
        swap_total_bytes=swap_total,
        swap_used_bytes=None if swap_total is None or swap_free is None else swap_total - swap_free,
        swappiness=one(sysctl, "vm.swappiness"),
        dirty_ratio=one(sysctl, "vm.dirty_ratio"),
        dirty_background_ratio=one(sysctl, "vm.dirty_background_ratio"),
        broker_processes=total(latest_by(history, PROCESS_IS_BROKER, "pid")),
        memory_total_bytes=total(latest_by(history, MEMORY_MEMTOTAL_BYTES)),
        busy_share=ratio(sum(sum(m.values()) - m.get("idle", 0.0) - m.get("iowait", 0.0) for m in cpus.values()),
                         sum(sum(m.values()) for m in cpus.values())),
        rmem_max=one(sysctl, "net.core.rmem_max"),
        wmem_max=one(sysctl, "net.core.wmem_max"),
        nic_rx_queues_max=max((n for (dev, direction), n in latest_by(history, NETWORK_QUEUES, "device", "direction").items()
                               if direction == "rx" and dev != "lo"), default=None),
        page_cache_bytes=total(latest_by(history, MEMORY_CACHED_BYTES)),
        page_cache_change_bytes=change_over(history, MEMORY_CACHED_BYTES, 300.0),
        memory_available_bytes=total(latest_by(history, MEMORY_MEMAVAILABLE_BYTES)),
        tcp_out_segments_per_second=out_segs,
        tcp_retransmit_ratio=ratio(total(rates_by(history, NETSTAT_TCP_RETRANSSEGS_TOTAL, window)), out_segs),
        softnet_dropped_per_second=total(rates_by(history, SOFTNET_DROPPED_TOTAL, window)),
        softnet_squeezed_per_second=total(rates_by(history, SOFTNET_TIMES_SQUEEZED_TOTAL, window)),
        steal_share=ratio(sum(m.get("steal", 0.0) for m in cpus.values()), sum(sum(m.values()) for m in cpus.values())),
    )
    return {"host": s}
