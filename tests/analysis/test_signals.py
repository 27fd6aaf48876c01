"""Signals computed from a History fed with hand-built samples; absent inputs give absent signals."""

from __future__ import annotations

import pytest

from kdiag.core.history import History
from kdiag.core.sample import COUNTER, COUNTER32, GAUGE, Sample, sample
from kdiag.analysis.subject_kinds import SUBJECT_KINDS, compute_signals

WINDOW = 30.0


def history_of(snapshots: dict[float, list[Sample]]) -> History:
    h = History()
    for t, samples in sorted(snapshots.items()):
        h.add(t, samples)
    return h


def counters(name: str, t0: float, t1: float, v0: float, v1: float, kind: str = COUNTER, **labels) -> dict:
    return {t0: [sample(name, v0, kind, **labels)], t1: [sample(name, v1, kind, **labels)]}


def merge(*parts: dict) -> dict[float, list[Sample]]:
    out: dict[float, list[Sample]] = {}
    for p in parts:
        for t, s in p.items():
            out.setdefault(t, []).extend(s)
    return out


def signals(snapshots: dict[float, list[Sample]]) -> dict:
    return compute_signals(history_of(snapshots), WINDOW)


def test_every_subject_kind_is_computed_even_on_an_empty_history():
    result = compute_signals(History(), WINDOW)
    assert set(result) == set(SUBJECT_KINDS) >= {"host", "cpu", "nic", "disk", "proc"}
    assert result["host"] == {"host": {"name": "host"}}  # nothing known: only the name
    assert result["nic"] == result["disk"] == result["proc"] == result["cpu"] == {}


def test_nic_packet_rates_and_average_size():
    snaps = merge(
        counters("kdiag_network_receive_packets_total", 0, 10, 0, 1_000_000, device="eth0"),
        counters("kdiag_network_receive_bytes_total", 0, 10, 0, 64_000_000, device="eth0"),
        counters("kdiag_network_transmit_packets_total", 0, 10, 0, 10_000, device="eth0"),
        counters("kdiag_network_transmit_bytes_total", 0, 10, 0, 15_000_000, device="eth0"),
        counters("kdiag_network_receive_packets_total", 0, 10, 0, 50, device="lo"),
        {0: [sample("kdiag_network_speed_bytes", 125_000_000, device="eth0")],
         10: [sample("kdiag_network_speed_bytes", 125_000_000, device="eth0"),
              sample("kdiag_network_queues", 4, device="eth0", direction="rx"),
              sample("kdiag_network_queues", 2, device="eth0", direction="tx")]},
    )
    nics = signals(snaps)["nic"]
    assert set(nics) == {"eth0"}  # lo is left out
    eth0 = nics["eth0"]
    assert eth0["name"] == "eth0"
    assert eth0["rx_packets_per_second"] == pytest.approx(100_000)
    assert eth0["rx_bytes_per_second"] == pytest.approx(6_400_000)
    assert eth0["rx_avg_packet_bytes"] == pytest.approx(64.0)
    assert eth0["tx_avg_packet_bytes"] == pytest.approx(1500.0)
    assert eth0["link_speed_bytes"] == 125_000_000
    assert eth0["link_utilization"] == pytest.approx(6_400_000 / 125_000_000)
    assert eth0["rx_queues"] == 4.0
    # No drops series, no interrupts: those signals are absent, not 0.
    for absent in ("rx_drops_per_second", "irq_count", "irqs_per_second", "irq_cpu0_share", "irq_top_cpu"):
        assert absent not in eth0


def test_nic_without_bytes_has_no_average_and_no_utilization():
    snaps = counters("kdiag_network_receive_packets_total", 0, 10, 0, 1000, device="eth1")
    eth1 = signals(snaps)["nic"]["eth1"]
    assert eth1["rx_packets_per_second"] == pytest.approx(100.0)
    for absent in ("rx_avg_packet_bytes", "rx_bytes_per_second", "link_utilization", "link_speed_bytes", "tx_packets_per_second"):
        assert absent not in eth1


def test_nic_idle_has_no_average_packet_size():
    snaps = merge(counters("kdiag_network_receive_packets_total", 0, 10, 5, 5, device="eth0"),
                  counters("kdiag_network_receive_bytes_total", 0, 10, 500, 500, device="eth0"))
    eth0 = signals(snaps)["nic"]["eth0"]
    assert eth0["rx_packets_per_second"] == 0.0
    assert "rx_avg_packet_bytes" not in eth0  # 0 B / 0 packets is unknown, not 0


def irq(t0_counts: dict[str, float], t1_counts: dict[str, float], irq_id: str, interface: str) -> dict:
    out: dict[float, list[Sample]] = {0: [], 10: []}
    for t, counts in ((0, t0_counts), (10, t1_counts)):
        for cpu, n in counts.items():
            out[t].append(sample("kdiag_interrupts_total", n, COUNTER, irq=irq_id, cpu=cpu,
                                 device=f"virtio-{irq_id}", interface=interface))
    return out


def test_nic_irq_shares():
    snaps = merge(
        counters("kdiag_network_receive_packets_total", 0, 10, 0, 100, device="eth0"),
        counters("kdiag_network_receive_packets_total", 0, 10, 0, 100, device="eth1"),
        # eth0: two IRQs; CPU0 takes 9000 of 10000 interrupts in 10 s.
        irq({"0": 0, "1": 0}, {"0": 8000, "1": 500}, "38", "eth0"),
        irq({"0": 0, "1": 0}, {"0": 1000, "1": 500}, "39", "eth0"),
        # eth1: everything on CPU3.
        irq({"0": 0, "3": 0}, {"0": 0, "3": 2000}, "40", "eth1"),
        # Not a NIC IRQ: ignored.
        irq({"0": 0}, {"0": 99999}, "1", ""),
    )
    nics = signals(snaps)["nic"]
    eth0, eth1 = nics["eth0"], nics["eth1"]
    assert eth0["irq_count"] == 2.0
    assert eth0["irqs_per_second"] == pytest.approx(1000.0)
    assert eth0["irq_cpu0_share"] == pytest.approx(0.9)
    assert eth0["irq_top_cpu_share"] == pytest.approx(0.9)
    assert eth0["irq_top_cpu"] == "0"
    assert eth1["irq_cpu0_share"] == 0.0
    assert eth1["irq_top_cpu_share"] == 1.0
    assert eth1["irq_top_cpu"] == "3"


def test_nic_irqs_that_never_fired_have_no_shares():
    snaps = merge(counters("kdiag_network_receive_packets_total", 0, 10, 0, 100, device="eth0"),
                  irq({"0": 5, "1": 5}, {"0": 5, "1": 5}, "38", "eth0"))
    eth0 = signals(snaps)["nic"]["eth0"]
    assert eth0["irq_count"] == 1.0 and eth0["irqs_per_second"] == 0.0
    for absent in ("irq_cpu0_share", "irq_top_cpu_share", "irq_top_cpu"):
        assert absent not in eth0


def disk(device: str, t1: dict[str, float]) -> dict:
    return merge(*(counters(f"kdiag_disk_{name}", 0, 10, 0, v, device=device) for name, v in t1.items()))


def test_disk_util_await_and_throughput():
    snaps = disk("sda", {
        "io_time_seconds_total": 5.0,  # busy 5 of 10 s
        "reads_completed_total": 1000, "read_time_seconds_total": 2.0,  # 2 ms per read
        "writes_completed_total": 500, "write_time_seconds_total": 5.0,  # 10 ms per write
        "read_bytes_total": 40_960_000, "written_bytes_total": 10_240_000,
        "io_time_weighted_seconds_total": 15.0, "flush_requests_total": 20,
    })
    snaps[10].append(sample("kdiag_block_rotational", 1, GAUGE, device="sda"))
    sda = signals(snaps)["disk"]["sda"]
    assert sda["name"] == "sda"
    assert sda["util"] == pytest.approx(0.5)
    assert sda["reads_per_second"] == pytest.approx(100.0)
    assert sda["writes_per_second"] == pytest.approx(50.0)
    assert sda["read_await_seconds"] == pytest.approx(0.002)
    assert sda["write_await_seconds"] == pytest.approx(0.010)
    assert sda["read_bytes_per_second"] == pytest.approx(4_096_000)
    assert sda["write_bytes_per_second"] == pytest.approx(1_024_000)
    assert sda["queue_depth"] == pytest.approx(1.5)
    assert sda["flushes_per_second"] == pytest.approx(2.0)
    assert sda["rotational"] == 1.0


def test_disk_util_is_capped_at_one():
    sda = signals(disk("sda", {"io_time_seconds_total": 10.4}))["disk"]["sda"]
    assert sda["util"] == 1.0


def test_disk_without_io_counters_has_no_await():
    sda = signals(disk("sda", {"io_time_seconds_total": 1.0}))["disk"]["sda"]
    for absent in ("read_await_seconds", "write_await_seconds", "reads_per_second", "queue_depth", "flushes_per_second",
                   "rotational"):
        assert absent not in sda


def test_disk_holds_kafka_logs():
    snaps = merge(disk("sda", {"io_time_seconds_total": 1.0}), disk("nvme0n1", {"io_time_seconds_total": 1.0}))
    snaps[10].append(sample("kdiag_kafka_log_dir_info", 1, GAUGE, path="/data", device="nvme0n1", mountpoint="/data"))
    disks = signals(snaps)["disk"]
    assert disks["nvme0n1"]["holds_kafka_logs"] == 1.0
    assert disks["sda"]["holds_kafka_logs"] == 0.0


def test_disk_scheduler_and_log_filesystem_atime():
    snaps = merge(disk("sdb", {"io_time_seconds_total": 1.0}), disk("sdc", {"io_time_seconds_total": 1.0}))
    snaps[10] += [sample("kdiag_kafka_log_dir_info", 1, GAUGE, path="/data/kafka-logs", device="sdb", mountpoint="/data"),
                  sample("kdiag_kafka_log_dir_info", 1, GAUGE, path="/data2/kafka-logs", device="sdb", mountpoint="/data2"),
                  sample("kdiag_filesystem_noatime", 1, GAUGE, device="/dev/sdb1", mountpoint="/data", fstype="xfs"),
                  sample("kdiag_filesystem_noatime", 0, GAUGE, device="/dev/sdb2", mountpoint="/data2", fstype="ext4"),
                  sample("kdiag_filesystem_noatime", 0, GAUGE, device="/dev/sdc1", mountpoint="/backup", fstype="ext4"),
                  sample("kdiag_block_scheduler_info", 1, GAUGE, device="sdb", scheduler="bfq")]
    disks = signals(snaps)["disk"]
    assert disks["sdb"]["scheduler"] == "bfq"
    assert disks["sdb"]["log_fs_noatime"] == 0.0  # one of its two log filesystems updates atime
    assert "log_fs_noatime" not in disks["sdc"] and "scheduler" not in disks["sdc"]  # no log dir; scheduler unknown


def test_disk_holds_kafka_logs_absent_when_log_dirs_unknown():
    sda = signals(disk("sda", {"io_time_seconds_total": 1.0}))["disk"]["sda"]
    assert "holds_kafka_logs" not in sda


def test_host_swap_and_tcp():
    gib = 2**30
    snaps = merge(
        {0: [sample("kdiag_memory_SwapTotal_bytes", 4 * gib), sample("kdiag_memory_SwapFree_bytes", 4 * gib)],
         10: [sample("kdiag_memory_SwapTotal_bytes", 4 * gib), sample("kdiag_memory_SwapFree_bytes", 3 * gib),
              sample("kdiag_memory_Cached_bytes", 8 * gib), sample("kdiag_sysctl", 60, name="vm.swappiness"),
              sample("kdiag_sysctl", 20, name="vm.dirty_ratio")]},
        counters("kdiag_vmstat_pswpin_total", 0, 10, 100, 600),
        counters("kdiag_vmstat_pswpout_total", 0, 10, 0, 2000),
        counters("kdiag_netstat_Tcp_OutSegs_total", 0, 10, 0, 100_000),
        counters("kdiag_netstat_Tcp_RetransSegs_total", 0, 10, 0, 2_500),
        counters("kdiag_softnet_dropped_total", 0, 10, 2**32 - 10, 10, COUNTER32, cpu="0"),
    )
    host = signals(snaps)["host"]["host"]
    assert host["swap_total_bytes"] == 4 * gib
    assert host["swap_used_bytes"] == 1 * gib
    assert host["swap_in_pages_per_second"] == pytest.approx(50.0)
    assert host["swap_out_pages_per_second"] == pytest.approx(200.0)
    assert host["swappiness"] == 60.0
    assert host["page_cache_bytes"] == 8 * gib
    assert host["tcp_out_segments_per_second"] == pytest.approx(10_000)
    assert host["tcp_retransmit_ratio"] == pytest.approx(0.025)
    assert host["softnet_dropped_per_second"] == pytest.approx(2.0)  # across the 32-bit wrap


def test_host_absent_inputs_are_absent():
    # Swap total without swap free, no TCP segments sent, no sysctl: those signals are left out.
    snaps = merge({0: [sample("kdiag_memory_SwapTotal_bytes", 1000)], 10: [sample("kdiag_memory_SwapTotal_bytes", 1000)]},
                  counters("kdiag_netstat_Tcp_OutSegs_total", 0, 10, 500, 500),
                  counters("kdiag_netstat_Tcp_RetransSegs_total", 0, 10, 0, 0))
    host = signals(snaps)["host"]["host"]
    assert host["swap_total_bytes"] == 1000
    assert host["tcp_out_segments_per_second"] == 0.0
    for absent in ("swap_used_bytes", "tcp_retransmit_ratio", "swappiness", "swap_in_pages_per_second", "cpu_count",
                   "cpu0_softirq_share", "memory_available_bytes", "page_cache_bytes", "softnet_dropped_per_second"):
        assert absent not in host, absent


def test_host_cpu_and_net_rx_shares():
    modes = {"0": {"user": 2, "system": 2, "softirq": 4, "idle": 2}, "1": {"user": 1, "idle": 9}}
    parts = [counters("kdiag_cpu_seconds_total", 0, 10, 0, v, cpu=cpu, mode=mode)
             for cpu, m in modes.items() for mode, v in m.items()]
    parts += [counters("kdiag_softirqs_total", 0, 10, 0, 3000, type="NET_RX", cpu="0"),
              counters("kdiag_softirqs_total", 0, 10, 0, 1000, type="NET_RX", cpu="1"),
              counters("kdiag_softirqs_total", 0, 10, 0, 50000, type="TIMER", cpu="1")]
    result = signals(merge(*parts))
    host = result["host"]["host"]
    assert host["cpu_count"] == 2.0
    assert host["cpu0_softirq_share"] == pytest.approx(0.4)
    assert host["cpu0_net_rx_share"] == pytest.approx(0.75)
    assert host["net_rx_top_cpu"] == "0"
    assert host["net_rx_softirqs_per_second"] == pytest.approx(400.0)
    cpu0 = result["cpu"]["0"]
    assert cpu0["name"] == "cpu0"
    assert cpu0["softirq_share"] == pytest.approx(0.4)
    assert cpu0["busy_share"] == pytest.approx(0.8)
    assert result["cpu"]["1"]["busy_share"] == pytest.approx(0.1)


def test_page_cache_change_over_five_minutes():
    h = History()
    for t, cached in ((0, 20e9), (100, 18e9), (200, 12e9), (400, 9e9)):
        h.add(t, [sample("kdiag_memory_Cached_bytes", cached)])
    host = compute_signals(h, WINDOW)["host"]["host"]
    assert host["page_cache_change_bytes"] == pytest.approx(9e9 - 18e9)  # from t=100, the oldest within 300 s


def test_page_cache_change_absent_with_one_point():
    host = signals({0: [sample("kdiag_memory_Cached_bytes", 8e9)]})["host"]["host"]
    assert host["page_cache_bytes"] == 8e9
    assert "page_cache_change_bytes" not in host


def proc(pid: str, comm: str, t: float, read: float, rchar: float, **gauges: float) -> list[Sample]:
    labels = {"pid": pid, "comm": comm}
    out = [sample("kdiag_process_read_bytes_total", read, COUNTER, **labels),
           sample("kdiag_process_rchar_bytes_total", rchar, COUNTER, **labels),
           sample("kdiag_process_info", 1, GAUGE, **labels, cmdline=f"{comm} -c /data/kafka-logs", cwd="/")]
    out += [sample(f"kdiag_process_{name}", v, GAUGE, **labels) for name, v in gauges.items()]
    return out


def test_proc_signals():
    snaps = {
        0: [*proc("4711", "tar", 0, 0, 0), sample("kdiag_process_cpu_seconds_total", 1.0, COUNTER, pid="4711", comm="tar")],
        10: [*proc("4711", "tar", 10, 1.8e9, 2.0e9, open_fds=12, max_fds=1024, is_broker=0, touches_log_dir=1),
             sample("kdiag_process_cpu_seconds_total", 6.0, COUNTER, pid="4711", comm="tar")],
    }
    p = signals(snaps)["proc"]["4711"]
    assert p["name"] == "pid 4711 tar"
    assert p["pid"] == 4711.0 and p["comm"] == "tar"
    assert p["cmdline"] == "tar -c /data/kafka-logs"
    assert p["read_bytes_per_second"] == pytest.approx(1.8e8)
    assert p["rchar_bytes_per_second"] == pytest.approx(2.0e8)
    assert p["cpu_cores"] == pytest.approx(0.5)
    assert (p["open_fds"], p["max_fds"], p["is_broker"], p["touches_log_dir"]) == (12.0, 1024.0, 0.0, 1.0)
    assert "write_bytes_per_second" not in p


def test_proc_gone_from_latest_snapshot_is_not_a_subject():
    snaps = {0: proc("1", "a", 0, 0, 0) + proc("2", "b", 0, 0, 0), 10: proc("1", "a", 10, 100, 100)}
    assert set(signals(snaps)["proc"]) == {"1"}


def test_proc_first_snapshot_has_identity_but_no_rates():
    p = signals({0: proc("7", "du", 0, 5, 5, is_broker=0)})["proc"]["7"]
    assert p["name"] == "pid 7 du" and p["is_broker"] == 0.0
    assert "read_bytes_per_second" not in p and "rchar_bytes_per_second" not in p and "touches_log_dir" not in p


def test_signal_values_are_floats_or_strings():
    snaps = merge(counters("kdiag_network_receive_packets_total", 0, 10, 0, 10, device="eth0"),
                  {0: proc("9", "x", 0, 0, 0), 10: proc("9", "x", 10, 10, 10)})
    for subjects in signals(snaps).values():
        for sig in subjects.values():
            assert all(isinstance(v, float | str) and not isinstance(v, bool) for v in sig.values()), sig


def test_kdiags_own_topics_are_no_topic_subject():
    """The replica pairs topic has min.insync.replicas equal to its 2 replicas on purpose: no topic rule judges it."""
    shaped = [sample("kdiag_kafka_topic_partitions", 3, GAUGE, topic=t) for t in ("orders", "kdiag-probe-replicas")]
    shaped += [sample("kdiag_kafka_topic_replication_factor", 2, GAUGE, topic=t) for t in ("orders", "kdiag-probe-replicas")]
    result = signals({10: [*shaped, sample("kdiag_kafka_topic_kdiag_own", 1, GAUGE, topic="kdiag-probe-replicas")]})
    assert set(result["topic"]) == {"orders"}


def test_topic_and_probe_subjects_name_the_brokers_they_concern():
    snaps = merge(
        {10: [sample("kdiag_kafka_topic_partitions", 3, GAUGE, topic="orders"),
              sample("kdiag_kafka_topic_broker_leaders", 2, GAUGE, topic="orders", broker_id="10"),
              sample("kdiag_kafka_topic_broker_leaders", 1, GAUGE, topic="orders", broker_id="2"),
              sample("kdiag_kafka_topic_broker_leaders", 0, GAUGE, topic="orders", broker_id="3"),
              sample("kdiag_probe_availability_ratio", 1, GAUGE, broker_id="3")]},
    )
    result = signals(snaps)
    assert result["topic"]["orders"]["on_brokers"] == "2,10"  # leaders only, in node id order
    assert result["probe"]["3"]["on_brokers"] == "3"


def test_consumer_group_lag_and_its_growth_over_two_minutes():
    snaps: dict[float, list[Sample]] = {}
    for t in range(0, 181, 30):  # the AdminClient's interval; the first minute is outside the growth span
        snaps[float(t)] = [
            sample("kdiag_kafka_consumergroup_members", 2, GAUGE, group="orders-app"),
            sample("kdiag_kafka_consumergroup_idle_members", 0, GAUGE, group="orders-app"),
            sample("kdiag_kafka_consumergroup_lag", 5000 + 10 * t, GAUGE, group="orders-app", topic="orders"),
            sample("kdiag_kafka_consumergroup_lag", 300 - t, GAUGE, group="orders-app", topic="refunds"),
            sample("kdiag_kafka_consumergroup_members", 1, GAUGE, group="quiet")]
    groups = signals(snaps)["group"]
    g = groups["orders-app"]
    assert g["members"] == 2.0 and g["idle_members"] == 0.0
    assert g["lag_messages"] == (5000 + 1800) + (300 - 180)
    assert g["lag_growth_per_second"] == pytest.approx(10.0 - 1.0)
    assert groups["quiet"] == {"name": "quiet", "members": 1.0, "membership_changes_per_minute": 0.0}  # no lag: nothing guessed
