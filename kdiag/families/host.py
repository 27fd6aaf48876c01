"""Host families: CPU, interrupts, softirqs, the network stack's per-CPU queues, load, scheduler waits, sysctls,
vmstat and meminfo."""

from __future__ import annotations

from kdiag.core.sample import GAUGE
from kdiag.families.family import counter, counter32, gauge, keyed, pattern

# stat
CONTEXT_SWITCHES_TOTAL = counter("kdiag_context_switches_total", "Context switches since boot.")
CPU_SECONDS_TOTAL = counter("kdiag_cpu_seconds_total", "Seconds each CPU spent in each mode.", "cpu", "mode")
FORKS_TOTAL = counter("kdiag_forks_total", "Processes and threads created since boot.")
PROCS_BLOCKED = gauge("kdiag_procs_blocked", "Threads blocked waiting for I/O now.")
PROCS_RUNNING = gauge("kdiag_procs_running", "Threads runnable or running now.")

# interrupts
INTERRUPTS_TOTAL = counter(
    "kdiag_interrupts_total",
    "Interrupts per IRQ and CPU since boot (CPUs that never handled the IRQ left out); interface is the NIC the"
    " IRQ serves, or ''.",
    "cpu",
    "device",
    "interface",
    "irq",
)

# softirqs
SOFTIRQS_TOTAL = counter("kdiag_softirqs_total", "Softirqs run per CPU and type since boot.", "cpu", "type")

# softnet
SOFTNET_DROPPED_TOTAL = counter32("kdiag_softnet_dropped_total", "Packets dropped because the CPU's backlog was full.", "cpu")
SOFTNET_PROCESSED_TOTAL = counter32("kdiag_softnet_processed_total", "Packets processed by the CPU's backlog.", "cpu")
SOFTNET_TIMES_SQUEEZED_TOTAL = counter32(
    "kdiag_softnet_times_squeezed_total", "NET_RX runs stopped with work left (budget or time exhausted).", "cpu"
)

# loadavg
LOAD1 = gauge("kdiag_load1", "1m load average.")
LOAD15 = gauge("kdiag_load15", "15m load average.")
LOAD5 = gauge("kdiag_load5", "5m load average.")

# schedstat
PROCESS_RUNQUEUE_WAIT_SECONDS_TOTAL = counter(
    "kdiag_process_runqueue_wait_seconds_total", "Seconds the process's threads were runnable but waited for a CPU.", "comm", "pid"
)
PROCESS_THREADS = gauge(
    "kdiag_process_threads",
    "Threads of the process by scheduler state (R running or runnable, D uninterruptible, other).",
    "comm",
    "pid",
    "state",
)

# sysctl
FILEFD_ALLOCATED = gauge("kdiag_filefd_allocated", "File descriptors allocated (fs.file-nr).")
FILEFD_MAXIMUM = gauge("kdiag_filefd_maximum", "Maximum file descriptors (fs.file-nr).")
SYSCTL = gauge("kdiag_sysctl", "Value of a sysctl; field names the value of multi-value ones.", "name", optional=("field",))

# vmstat
VMSTAT_OOM_KILL_TOTAL = counter("kdiag_vmstat_oom_kill_total", "Processes killed by the OOM killer.")
VMSTAT_PGFAULT_TOTAL = counter("kdiag_vmstat_pgfault_total", "Page faults.")
VMSTAT_PGMAJFAULT_TOTAL = counter("kdiag_vmstat_pgmajfault_total", "Major page faults (needing a read from storage).")
VMSTAT_PGPGIN_TOTAL = counter("kdiag_vmstat_pgpgin_total", "Kilobytes paged in from storage.")
VMSTAT_PGPGOUT_TOTAL = counter("kdiag_vmstat_pgpgout_total", "Kilobytes paged out to storage.")
VMSTAT_PGSCAN_DIRECT_TOTAL = counter("kdiag_vmstat_pgscan_direct_total", "Pages scanned directly by allocating processes.")
VMSTAT_PGSCAN_KSWAPD_TOTAL = counter("kdiag_vmstat_pgscan_kswapd_total", "Pages scanned by kswapd.")
VMSTAT_PGSTEAL_DIRECT_TOTAL = counter("kdiag_vmstat_pgsteal_direct_total", "Pages reclaimed directly by allocating processes.")
VMSTAT_PGSTEAL_KSWAPD_TOTAL = counter("kdiag_vmstat_pgsteal_kswapd_total", "Pages reclaimed by kswapd.")
VMSTAT_PSWPIN_TOTAL = counter("kdiag_vmstat_pswpin_total", "Pages swapped in.")
VMSTAT_PSWPOUT_TOTAL = counter("kdiag_vmstat_pswpout_total", "Pages swapped out.")

# meminfo
MEMORY_CACHED_BYTES = gauge("kdiag_memory_Cached_bytes", "Memory information field Cached.")
MEMORY_DIRTY_BYTES = gauge("kdiag_memory_Dirty_bytes", "Memory information field Dirty.")
MEMORY_MEMAVAILABLE_BYTES = gauge("kdiag_memory_MemAvailable_bytes", "Memory information field MemAvailable.")
MEMORY_MEMFREE_BYTES = gauge("kdiag_memory_MemFree_bytes", "Memory information field MemFree.")
MEMORY_MEMTOTAL_BYTES = gauge("kdiag_memory_MemTotal_bytes", "Memory information field MemTotal.")
MEMORY_SWAPFREE_BYTES = gauge("kdiag_memory_SwapFree_bytes", "Memory information field SwapFree.")
MEMORY_SWAPTOTAL_BYTES = gauge("kdiag_memory_SwapTotal_bytes", "Memory information field SwapTotal.")
MEMORY_WRITEBACK_BYTES = gauge("kdiag_memory_Writeback_bytes", "Memory information field Writeback.")
MEMINFO = (
    MEMORY_CACHED_BYTES, MEMORY_DIRTY_BYTES, MEMORY_MEMAVAILABLE_BYTES, MEMORY_MEMFREE_BYTES, MEMORY_MEMTOTAL_BYTES,
    MEMORY_SWAPFREE_BYTES, MEMORY_SWAPTOTAL_BYTES, MEMORY_WRITEBACK_BYTES,
)
MEMORY_BYTES = pattern("kdiag_memory_", "_bytes", GAUGE, "Memory information field {key}.")
MEMORY_COUNT = pattern("kdiag_memory_", "", GAUGE, "Memory information field {key}.")
SOFTNET = keyed("kdiag_softnet_", "_total", SOFTNET_PROCESSED_TOTAL, SOFTNET_DROPPED_TOTAL, SOFTNET_TIMES_SQUEEZED_TOTAL)
VMSTAT = keyed("kdiag_vmstat_", "_total", VMSTAT_PSWPIN_TOTAL, VMSTAT_PSWPOUT_TOTAL, VMSTAT_PGPGIN_TOTAL, VMSTAT_PGPGOUT_TOTAL,
               VMSTAT_PGMAJFAULT_TOTAL, VMSTAT_PGFAULT_TOTAL, VMSTAT_PGSTEAL_KSWAPD_TOTAL, VMSTAT_PGSTEAL_DIRECT_TOTAL,
               VMSTAT_PGSCAN_KSWAPD_TOTAL, VMSTAT_PGSCAN_DIRECT_TOTAL, VMSTAT_OOM_KILL_TOTAL)
LOAD = {1: LOAD1, 5: LOAD5, 15: LOAD15}
