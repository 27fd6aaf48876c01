"""Signals: named numbers per subject (host, cpu, nic, disk, proc, ...) derived from the history.

A subject kind is registered with `@subject(kind, schema)`; its function maps the history to
{subject id: {signal: value}}. A signal that cannot be computed is left out, never guessed; the
schema is what rules may name, checked when rules load.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kdiag.collectors.blockdev import is_stacked
from kdiag.history import History, window_rate

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


def compute_signals(history: History, window: float) -> dict[str, dict[str, Signals]]:
    """Signals of every subject of every registered kind at the history's latest time."""
    return {kind: sk.compute(history, window) for kind, sk in SUBJECT_KINDS.items()}


def rates_by(history: History, name: str, window: float, *label_names: str) -> dict[tuple[str, ...], float]:
    """Per-second rates of every series of one counter, summed per value of the given labels."""
    out: dict[tuple[str, ...], float] = {}
    for labels, points, kind in history.series(name):
        r = window_rate(points, window, kind)
        if r is not None:
            key = tuple(labels.get(n, "") for n in label_names)
            out[key] = out.get(key, 0.0) + r
    return out


def latest_by(history: History, name: str, *label_names: str) -> dict[tuple[str, ...], float]:
    """Latest value of every series of one gauge, keyed by the given labels."""
    return {tuple(labels.get(n, "") for n in label_names): pts[-1][1] for labels, pts, _ in history.series(name)}


def rates_per(history: History, name: str, window: float, label: str) -> dict[str, float]:
    """Per-second rates of one counter summed per value of one label."""
    return {k[0]: v for k, v in rates_by(history, name, window, label).items()}


def latest_per(history: History, name: str, label: str) -> dict[str, float]:
    """Latest values of one gauge keyed by one label."""
    return {k[0]: v for k, v in latest_by(history, name, label).items()}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is zero."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def put(signals: Signals, **values: float | str | None) -> Signals:
    """Add the known values to a signal dict, leaving unknown (None) ones out."""
    signals.update({k: (v if isinstance(v, str) else float(v)) for k, v in values.items() if v is not None})
    return signals


def cpu_mode_rates(history: History, window: float) -> dict[str, dict[str, float]]:
    """CPU seconds per second by cpu and mode."""
    out: dict[str, dict[str, float]] = {}
    for (cpu, mode), r in rates_by(history, "kdiag_cpu_seconds_total", window, "cpu", "mode").items():
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


def series_change(points: deque[tuple[float, float]], seconds: float) -> tuple[float, float] | None:
    """(latest value minus the oldest within the last `seconds`, seconds between them); None with one point."""
    if len(points) < 2:
        return None
    start_t, start = next((t, v) for t, v in points if t >= points[-1][0] - seconds)
    return points[-1][1] - start, points[-1][0] - start_t


def change_over(history: History, name: str, seconds: float) -> float | None:
    """Latest value minus the oldest value within the last `seconds` of one unlabelled gauge."""
    for _, points, _ in history.series(name):
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
})
def host_signals(history: History, window: float) -> dict[str, Signals]:
    """Host-wide CPU, softirq, swap, page cache and TCP signals."""
    cpus = cpu_mode_rates(history, window)
    softirqs = rates_by(history, "kdiag_softirqs_total", window, "type", "cpu")
    net_rx = {cpu: r for (kind, cpu), r in softirqs.items() if kind == "NET_RX"}
    cpu0_net_rx, top_net_rx, top_cpu = shares(net_rx)
    swap_total = total(latest_by(history, "kdiag_memory_SwapTotal_bytes"))
    swap_free = total(latest_by(history, "kdiag_memory_SwapFree_bytes"))
    out_segs = total(rates_by(history, "kdiag_netstat_Tcp_OutSegs_total", window))
    sysctl = latest_by(history, "kdiag_sysctl", "name")
    s: Signals = {"name": "host"}
    put(
        s,
        cpu_count=len(cpus) or None,
        cpu0_softirq_share=ratio(cpus.get("0", {}).get("softirq"), sum(cpus.get("0", {}).values())),
        cpu0_net_rx_share=cpu0_net_rx,
        net_rx_top_cpu_share=top_net_rx,
        net_rx_top_cpu=top_cpu,
        net_rx_softirqs_per_second=sum(net_rx.values()) if net_rx else None,
        swap_in_pages_per_second=total(rates_by(history, "kdiag_vmstat_pswpin_total", window)),
        swap_out_pages_per_second=total(rates_by(history, "kdiag_vmstat_pswpout_total", window)),
        swap_total_bytes=swap_total,
        swap_used_bytes=None if swap_total is None or swap_free is None else swap_total - swap_free,
        swappiness=one(sysctl, "vm.swappiness"),
        dirty_ratio=one(sysctl, "vm.dirty_ratio"),
        dirty_background_ratio=one(sysctl, "vm.dirty_background_ratio"),
        broker_processes=total(latest_by(history, "kdiag_process_is_broker", "pid")),
        memory_total_bytes=total(latest_by(history, "kdiag_memory_MemTotal_bytes")),
        rmem_max=one(sysctl, "net.core.rmem_max"),
        wmem_max=one(sysctl, "net.core.wmem_max"),
        nic_rx_queues_max=max((n for (dev, direction), n in latest_by(history, "kdiag_network_queues", "device", "direction").items()
                               if direction == "rx" and dev != "lo"), default=None),
        page_cache_bytes=total(latest_by(history, "kdiag_memory_Cached_bytes")),
        page_cache_change_bytes=change_over(history, "kdiag_memory_Cached_bytes", 300.0),
        memory_available_bytes=total(latest_by(history, "kdiag_memory_MemAvailable_bytes")),
        tcp_out_segments_per_second=out_segs,
        tcp_retransmit_ratio=ratio(total(rates_by(history, "kdiag_netstat_Tcp_RetransSegs_total", window)), out_segs),
        softnet_dropped_per_second=total(rates_by(history, "kdiag_softnet_dropped_total", window)),
        softnet_squeezed_per_second=total(rates_by(history, "kdiag_softnet_times_squeezed_total", window)),
    )
    return {"host": s}


@subject("nic", {
    "rx_packets_per_second": "packets received per second",
    "tx_packets_per_second": "packets sent per second",
    "rx_bytes_per_second": "bytes received per second",
    "tx_bytes_per_second": "bytes sent per second",
    "rx_avg_packet_bytes": "average received packet size",
    "tx_avg_packet_bytes": "average sent packet size",
    "rx_drops_per_second": "received packets dropped per second",
    "link_speed_bytes": "link speed in bytes per second",
    "link_utilization": "busier direction's bytes/s over link speed (0-1)",
    "rx_queues": "receive queues",
    "irq_count": "IRQs mapped to this NIC",
    "irqs_per_second": "interrupts per second of this NIC's IRQs",
    "irq_cpu0_share": "share of this NIC's interrupts handled on CPU0 (0-1)",
    "irq_top_cpu_share": "share of this NIC's interrupts handled on its busiest CPU (0-1)",
    "irq_top_cpu": "the CPU handling most of this NIC's interrupts",
})
def nic_signals(history: History, window: float) -> dict[str, Signals]:
    """Traffic, packet size, link use and IRQ spread per network interface (lo excluded)."""
    rx_packets = rates_per(history, "kdiag_network_receive_packets_total", window, "device")
    tx_packets = rates_per(history, "kdiag_network_transmit_packets_total", window, "device")
    rx_bytes = rates_per(history, "kdiag_network_receive_bytes_total", window, "device")
    tx_bytes = rates_per(history, "kdiag_network_transmit_bytes_total", window, "device")
    rx_drops = rates_per(history, "kdiag_network_receive_drop_total", window, "device")
    speeds = latest_by(history, "kdiag_network_speed_bytes", "device")
    queues = latest_by(history, "kdiag_network_queues", "device", "direction")
    irq_rates: dict[str, dict[str, float]] = {}
    for (nic, cpu), r in rates_by(history, "kdiag_interrupts_total", window, "interface", "cpu").items():
        irq_rates.setdefault(nic, {})[cpu] = r
    irq_ids: dict[str, set[str]] = {}
    for nic, irq in latest_by(history, "kdiag_interrupts_total", "interface", "irq"):
        irq_ids.setdefault(nic, set()).add(irq)
    out = {}
    for dev in sorted(set(rx_packets) | set(tx_packets)):
        if dev == "lo":
            continue
        speed = one(speeds, dev)
        busiest = max(rx_bytes.get(dev, 0.0), tx_bytes.get(dev, 0.0))
        irq_cpu0, irq_top, irq_top_cpu = shares(irq_rates.get(dev, {}))
        out[dev] = put(
            {"name": dev},
            rx_packets_per_second=rx_packets.get(dev),
            tx_packets_per_second=tx_packets.get(dev),
            rx_bytes_per_second=rx_bytes.get(dev),
            tx_bytes_per_second=tx_bytes.get(dev),
            rx_avg_packet_bytes=ratio(rx_bytes.get(dev), rx_packets.get(dev)),
            tx_avg_packet_bytes=ratio(tx_bytes.get(dev), tx_packets.get(dev)),
            rx_drops_per_second=rx_drops.get(dev),
            link_speed_bytes=speed,
            link_utilization=ratio(busiest, speed),
            rx_queues=one(queues, dev, "rx"),
            irq_count=len(irq_ids[dev]) if dev in irq_ids else None,
            irqs_per_second=sum(irq_rates[dev].values()) if dev in irq_rates else None,
            irq_cpu0_share=irq_cpu0,
            irq_top_cpu_share=irq_top,
            irq_top_cpu=irq_top_cpu,
        )
    return out


def disk_media(device: str, rotational: float | None) -> str:
    """What a block device is made of, as far as its name and rotational flag tell."""
    if is_stacked(device):
        return "stacked"
    if device.startswith("nvme"):
        return "nvme"
    # virtio and Xen disks report rotational=1 whatever is behind them.
    if device.startswith(("vd", "xvd")):
        return "virtual"
    return "hdd" if rotational == 1.0 else "ssd"


@subject("disk", {
    "util": "share of time the device was busy (0-1), iostat's %util",
    "reads_per_second": "reads completed per second",
    "writes_per_second": "writes completed per second",
    "read_bytes_per_second": "bytes read per second",
    "write_bytes_per_second": "bytes written per second",
    "read_await_seconds": "average time a read took, queueing included",
    "write_await_seconds": "average time a write took, queueing included",
    "queue_depth": "average requests in flight (iostat's aqu-sz)",
    "flushes_per_second": "flush requests per second (kernels 5.5+)",
    "rotational": "1 for a spinning disk",
    "scheduler": "the active I/O scheduler (/sys/block/DEV/queue/scheduler)",
    "holds_kafka_logs": "1 when a Kafka log dir lives on this device or on a volume stacked on it (LVM, md)",
    "stacked": "1 for a device-mapper (LVM) or md RAID device, whose disks below it are judged instead",
    "media": "hdd (rotational sd*/hd*), ssd, nvme, virtual (virtio, xen), or stacked",
    "log_fs_noatime": "1 when every filesystem holding a Kafka log dir on this device is mounted noatime, else 0",
})
def disk_signals(history: History, window: float) -> dict[str, Signals]:
    """iostat-style utilisation, throughput and latency per block device."""
    busy = rates_per(history, "kdiag_disk_io_time_seconds_total", window, "device")
    reads = rates_per(history, "kdiag_disk_reads_completed_total", window, "device")
    writes = rates_per(history, "kdiag_disk_writes_completed_total", window, "device")
    read_time = rates_per(history, "kdiag_disk_read_time_seconds_total", window, "device")
    write_time = rates_per(history, "kdiag_disk_write_time_seconds_total", window, "device")
    read_bytes = rates_per(history, "kdiag_disk_read_bytes_total", window, "device")
    written_bytes = rates_per(history, "kdiag_disk_written_bytes_total", window, "device")
    weighted = rates_per(history, "kdiag_disk_io_time_weighted_seconds_total", window, "device")
    flushes = rates_per(history, "kdiag_disk_flush_requests_total", window, "device")
    rotational = latest_by(history, "kdiag_block_rotational", "device")
    schedulers = {dev: sched for dev, sched in latest_by(history, "kdiag_block_scheduler_info", "device", "scheduler")}
    log_dirs = latest_by(history, "kdiag_kafka_log_dir_info", "device", "mountpoint")
    noatime = {m: v for (m,), v in latest_by(history, "kdiag_filesystem_noatime", "mountpoint").items()}
    out = {}
    for dev in sorted(busy):
        log_mounts = [m for d, m in log_dirs if d == dev]
        log_noatime = [noatime[m] for m in log_mounts if m in noatime]
        out[dev] = put(
            {"name": dev},
            util=min(busy[dev], 1.0),
            reads_per_second=reads.get(dev),
            writes_per_second=writes.get(dev),
            read_bytes_per_second=read_bytes.get(dev),
            write_bytes_per_second=written_bytes.get(dev),
            read_await_seconds=ratio(read_time.get(dev), reads.get(dev)) or (0.0 if dev in reads else None),
            write_await_seconds=ratio(write_time.get(dev), writes.get(dev)) or (0.0 if dev in writes else None),
            queue_depth=weighted.get(dev),
            flushes_per_second=flushes.get(dev),
            rotational=one(rotational, dev),
            scheduler=schedulers.get(dev),
            holds_kafka_logs=float(bool(log_mounts)) if log_dirs else None,
            stacked=float(is_stacked(dev)),
            media=disk_media(dev, one(rotational, dev)),
            log_fs_noatime=float(all(log_noatime)) if log_noatime else None,
        )
    return out


@subject("proc", {
    "pid": "process id",
    "comm": "process name",
    "cmdline": "command line (truncated)",
    "read_bytes_per_second": "bytes per second this process made the block layer read (/proc/PID/io read_bytes)",
    "rchar_bytes_per_second": "bytes per second this process read through read(2), page cache hits included",
    "write_bytes_per_second": "bytes per second this process caused to be written",
    "cpu_cores": "CPU seconds per second (1.0 = one core)",
    "open_fds": "open file descriptors",
    "max_fds": "soft RLIMIT_NOFILE",
    "is_broker": "1 for a Kafka broker process",
    "touches_log_dir": "1 when its command line, cwd or open files reach into a Kafka log dir",
})
def proc_signals(history: History, window: float) -> dict[str, Signals]:
    """Per-process I/O and identity for the broker and the top readers."""
    reads = rates_per(history, "kdiag_process_read_bytes_total", window, "pid")
    rchar = rates_per(history, "kdiag_process_rchar_bytes_total", window, "pid")
    written = rates_per(history, "kdiag_process_written_bytes_total", window, "pid")
    cpu = rates_per(history, "kdiag_process_cpu_seconds_total", window, "pid")
    open_fds = latest_per(history, "kdiag_process_open_fds", "pid")
    max_fds = latest_per(history, "kdiag_process_max_fds", "pid")
    is_broker = latest_per(history, "kdiag_process_is_broker", "pid")
    touches = latest_per(history, "kdiag_process_touches_log_dir", "pid")
    out = {}
    for labels, _, _ in history.series("kdiag_process_info"):
        pid = labels["pid"]
        out[pid] = put(
            {"name": f"pid {pid} {labels.get('comm', '')}".strip()},
            pid=float(pid),
            comm=labels.get("comm", ""),
            cmdline=labels.get("cmdline", ""),
            read_bytes_per_second=reads.get(pid),
            rchar_bytes_per_second=rchar.get(pid),
            write_bytes_per_second=written.get(pid),
            cpu_cores=cpu.get(pid),
            open_fds=open_fds.get(pid),
            max_fds=max_fds.get(pid),
            is_broker=is_broker.get(pid),
            touches_log_dir=touches.get(pid),
        )
    return out

# Kafka and probe subject kinds register themselves on import.
import kdiag.kafka_signals  # noqa: E402
import kdiag.loadgen_signals  # noqa: E402, F401
