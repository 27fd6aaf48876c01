"""Signals of the host's devices and processes: per NIC, per block device, per chosen process."""

from __future__ import annotations

from kdiag.core.blockdev import is_stacked
from kdiag.core.history import History
from kdiag.analysis.host_cause_signals import (DISK_SCHEMA, PROC_SCHEMA, disk_cause_signals, proc_memory_signals,
                                               proc_wait_signals)
from kdiag.analysis.signals import (Signals, cpu_mode_rates, latest_by, latest_per, one, put, rates_by, rates_per, ratio,
                                    series_change, shares, subject)
from kdiag.families.host import INTERRUPTS_TOTAL
from kdiag.families.network import (
    NETWORK_QUEUES, NETWORK_RECEIVE_BYTES_TOTAL, NETWORK_RECEIVE_DROP_TOTAL, NETWORK_RECEIVE_PACKETS_TOTAL,
    NETWORK_SPEED_BYTES, NETWORK_TRANSMIT_BYTES_TOTAL, NETWORK_TRANSMIT_PACKETS_TOTAL,
)
from kdiag.families.process import (
    KAFKA_LOG_DIR_INFO, PROCESS_CPU_SECONDS_TOTAL, PROCESS_GC_CPU_SECONDS_TOTAL, PROCESS_INFO, PROCESS_IS_BROKER,
    PROCESS_IS_LOAD_GENERATOR, PROCESS_JVM_MAX_HEAP_BYTES, PROCESS_MAX_FDS, PROCESS_OPEN_FDS,
    PROCESS_RCHAR_BYTES_TOTAL, PROCESS_READ_BYTES_TOTAL, PROCESS_TOUCHES_LOG_DIR, PROCESS_WRITTEN_BYTES_TOTAL,
)
from kdiag.families.storage import (
    BLOCK_ROTATIONAL, BLOCK_SCHEDULER_INFO, DISK_FLUSH_REQUESTS_TOTAL, DISK_IO_TIME_SECONDS_TOTAL,
    DISK_IO_TIME_WEIGHTED_SECONDS_TOTAL, DISK_READS_COMPLETED_TOTAL, DISK_READ_BYTES_TOTAL,
    DISK_READ_TIME_SECONDS_TOTAL, DISK_WRITES_COMPLETED_TOTAL, DISK_WRITE_TIME_SECONDS_TOTAL,
    DISK_WRITTEN_BYTES_TOTAL, FILESYSTEM_AVAIL_BYTES, FILESYSTEM_NOATIME, FILESYSTEM_SIZE_BYTES,
)


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
    "irq_top_cpu_softirq_share": "share of that CPU's time in softirq (0-1)",
})
def nic_signals(history: History, window: float) -> dict[str, Signals]:
    """Traffic, packet size, link use and IRQ spread per network interface (lo excluded)."""
    rx_packets = rates_per(history, NETWORK_RECEIVE_PACKETS_TOTAL, window, "device")
    tx_packets = rates_per(history, NETWORK_TRANSMIT_PACKETS_TOTAL, window, "device")
    rx_bytes = rates_per(history, NETWORK_RECEIVE_BYTES_TOTAL, window, "device")
    tx_bytes = rates_per(history, NETWORK_TRANSMIT_BYTES_TOTAL, window, "device")
    rx_drops = rates_per(history, NETWORK_RECEIVE_DROP_TOTAL, window, "device")
    speeds = latest_by(history, NETWORK_SPEED_BYTES, "device")
    queues = latest_by(history, NETWORK_QUEUES, "device", "direction")
    irq_rates: dict[str, dict[str, float]] = {}
    for (nic, cpu), r in rates_by(history, INTERRUPTS_TOTAL, window, "interface", "cpu").items():
        irq_rates.setdefault(nic, {})[cpu] = r
    irq_ids: dict[str, set[str]] = {}
    for nic, irq in latest_by(history, INTERRUPTS_TOTAL, "interface", "irq"):
        irq_ids.setdefault(nic, set()).add(irq)
    cpus = cpu_mode_rates(history, window)
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
            irq_top_cpu_softirq_share=ratio(cpus.get(irq_top_cpu or "", {}).get("softirq"),
                                            sum(cpus.get(irq_top_cpu or "", {}).values())),
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


FILL_SECONDS = 300.0


def filesystem_space(history: History) -> dict[str, tuple[float, float, float | None]]:
    """{mountpoint: (free share, available bytes, seconds until full at the recent growth or None)}."""
    sizes = {m: v for (m,), v in latest_by(history, FILESYSTEM_SIZE_BYTES, "mountpoint").items()}
    out = {}
    for labels, points, _ in history.series(FILESYSTEM_AVAIL_BYTES.name):
        mountpoint, avail = labels.get("mountpoint", ""), points[-1][1]
        if not sizes.get(mountpoint):
            continue
        change = series_change(points, FILL_SECONDS)
        filling = change is not None and change[0] < 0 and change[1] > 0
        until_full = avail / (-change[0] / change[1]) if change is not None and filling else None
        out[mountpoint] = (avail / sizes[mountpoint], avail, until_full)
    return out


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
    "log_fs_free_share": "free share of the fullest filesystem holding a Kafka log dir on this device (0-1)",
    "log_fs_avail_bytes": "bytes available on that filesystem",
    "log_fs_seconds_to_full": f"seconds until that filesystem is full at its growth over the last {FILL_SECONDS:.0f} s",
    **DISK_SCHEMA,
})
def disk_signals(history: History, window: float) -> dict[str, Signals]:
    """iostat-style utilisation, throughput and latency per block device."""
    busy = rates_per(history, DISK_IO_TIME_SECONDS_TOTAL, window, "device")
    reads = rates_per(history, DISK_READS_COMPLETED_TOTAL, window, "device")
    writes = rates_per(history, DISK_WRITES_COMPLETED_TOTAL, window, "device")
    read_time = rates_per(history, DISK_READ_TIME_SECONDS_TOTAL, window, "device")
    write_time = rates_per(history, DISK_WRITE_TIME_SECONDS_TOTAL, window, "device")
    read_bytes = rates_per(history, DISK_READ_BYTES_TOTAL, window, "device")
    written_bytes = rates_per(history, DISK_WRITTEN_BYTES_TOTAL, window, "device")
    weighted = rates_per(history, DISK_IO_TIME_WEIGHTED_SECONDS_TOTAL, window, "device")
    flushes = rates_per(history, DISK_FLUSH_REQUESTS_TOTAL, window, "device")
    rotational = latest_by(history, BLOCK_ROTATIONAL, "device")
    schedulers = {dev: sched for dev, sched in latest_by(history, BLOCK_SCHEDULER_INFO, "device", "scheduler")}
    log_dirs = latest_by(history, KAFKA_LOG_DIR_INFO, "device", "mountpoint")
    noatime = {m: v for (m,), v in latest_by(history, FILESYSTEM_NOATIME, "mountpoint").items()}
    space = filesystem_space(history)
    causes = disk_cause_signals(history, window)
    out = {}
    for dev in sorted(busy):
        log_mounts = [m for d, m in log_dirs if d == dev]
        log_noatime = [noatime[m] for m in log_mounts if m in noatime]
        fullest = min((space[m] for m in log_mounts if m in space), default=None)
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
            log_fs_free_share=fullest[0] if fullest else None,
            log_fs_avail_bytes=fullest[1] if fullest else None,
            log_fs_seconds_to_full=fullest[2] if fullest else None,
        )
        out[dev].update(causes.get(dev, {}))
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
    "heap_max_bytes": "the JVM's -Xmx",
    "is_load_generator": "1 for a Kafka perf-test tool (kafka-producer-perf-test and friends)",
    "gc_cpu_share": "share of this JVM's CPU time spent by its garbage collector threads (0-1)",
    **PROC_SCHEMA,
})
def proc_signals(history: History, window: float) -> dict[str, Signals]:
    """Per-process I/O and identity for the broker and the top readers."""
    reads = rates_per(history, PROCESS_READ_BYTES_TOTAL, window, "pid")
    rchar = rates_per(history, PROCESS_RCHAR_BYTES_TOTAL, window, "pid")
    written = rates_per(history, PROCESS_WRITTEN_BYTES_TOTAL, window, "pid")
    cpu = rates_per(history, PROCESS_CPU_SECONDS_TOTAL, window, "pid")
    open_fds = latest_per(history, PROCESS_OPEN_FDS, "pid")
    max_fds = latest_per(history, PROCESS_MAX_FDS, "pid")
    is_broker = latest_per(history, PROCESS_IS_BROKER, "pid")
    touches = latest_per(history, PROCESS_TOUCHES_LOG_DIR, "pid")
    heap = latest_per(history, PROCESS_JVM_MAX_HEAP_BYTES, "pid")
    load_generator = latest_per(history, PROCESS_IS_LOAD_GENERATOR, "pid")
    gc_cpu = rates_per(history, PROCESS_GC_CPU_SECONDS_TOTAL, window, "pid")
    waits = proc_wait_signals(history, window)
    memory = proc_memory_signals(history, window)
    out = {}
    for labels, _, _ in history.series(PROCESS_INFO.name):
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
            heap_max_bytes=heap.get(pid),
            is_load_generator=load_generator.get(pid),
            gc_cpu_share=ratio(gc_cpu.get(pid), cpu.get(pid)),
        )
        out[pid].update(waits.get(pid, {}))
        out[pid].update(memory.get(pid, {}))
    return out
