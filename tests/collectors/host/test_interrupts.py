import pytest
from tests.collectors.golden import FIXTURES, assert_golden, fixture_root

from kdiag.collectors.host.interrupts import Interrupt, InterruptsCollector, irq_interfaces, parse_interrupts


def interfaces_of(variant):
    samples = InterruptsCollector().collect(fixture_root(variant))
    return {dict(s.labels)["irq"]: dict(s.labels)["interface"] for s in samples}


@pytest.mark.parametrize("variant", ["host-vm2", "many-core"])
def test_golden(variant):
    assert_golden(f"interrupts-{variant}", InterruptsCollector().collect(fixture_root(variant)))


def test_host_vm2_virtio_queues_map_to_eth0_through_parent_msi_irqs():
    owner = interfaces_of("host-vm2")
    assert {irq for irq, name in owner.items() if name == "eth0"} == {"38", "39"}
    assert "37" not in owner  # virtio2-config never fired
    assert owner["41"] == ""  # virtio3-rx is not a NIC


def test_many_core_maps_txrx_by_name_and_mlx5_by_msi_irqs():
    owner = interfaces_of("many-core")
    assert {irq for irq, name in owner.items() if name == "eth0"} == {str(i) for i in range(41, 49)}
    assert {irq for irq, name in owner.items() if name == "ens2f0"} == {str(i) for i in range(60, 69)}  # async0 too
    # The root port above ens2f0 has MSI IRQs of its own: only a device without msi_irqs looks there.
    assert owner["25"] == ""
    assert "80" not in owner  # ens2f1's IRQs never fired


def test_parse_chip_device_and_named_rows():
    irqs = parse_interrupts((FIXTURES / "many-core/proc/interrupts").read_text())
    assert irqs["16"].info == "IR-IO-APIC  16-fasteoi"
    assert irqs["16"].devices == "ehci_hcd:usb1, i801_smbus"
    assert irqs["18"].devices == ""
    assert irqs["25"].info == "IR-PCI-MSI 491520-edge"
    assert irqs["25"].devices == "PCIe PME, aerdrv"
    assert irqs["61"].devices == "mlx5_comp0@pci:0000:3b:00.0"
    assert irqs["41"].counts["0"] > 1_000_000 and len(irqs["41"].counts) == 16
    assert irqs["ERR"].counts == {"0": 0}
    assert irqs["LOC"].info == "Local timer interrupts" and len(irqs["LOC"].counts) == 16


@pytest.mark.parametrize(
    ("rest", "info", "devices"),
    [
        ("  IO-APIC   2-edge      timer", "IO-APIC   2-edge", "timer"),
        ("  IO-APIC-edge      timer", "IO-APIC-edge", "timer"),
        ("  GICv3  30 Level     kvm guest ptimer", "GICv3  30 Level", "kvm guest ptimer"),
        ("  xen-pirq    -ioapic-edge  acpi", "xen-pirq    -ioapic-edge", "acpi"),
        ("  PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0", "PCI-MSIX-0000:00:03.0   1-edge", "virtio2-input.0"),
    ],
)
def test_chip_formats(rest, info, devices):
    irq = parse_interrupts(f"      CPU0\n  5:   7{rest}\n")["5"]
    assert (irq.info, irq.devices) == (info, devices)


def test_name_tokens_not_prefixes():
    irqs = {
        "1": Interrupt({}, "", "eth10-TxRx-0"),
        "2": Interrupt({}, "", "eth1-TxRx-0"),
        "3": Interrupt({}, "", "i40e-ens1f0-TxRx-7"),
        "4": Interrupt({}, "", "ens1f0np0-rx-0"),
    }
    assert irq_interfaces(irqs, ["eth1", "ens1f0"], {}) == {"2": "eth1", "3": "ens1f0"}


def test_msi_irqs_win_over_names():
    irqs = {"7": Interrupt({}, "", "eth0-TxRx-0")}
    assert irq_interfaces(irqs, ["eth0", "eth1"], {"eth1": ["7"]}) == {"7": "eth1"}


def test_truncated_line_names_file_and_line():
    with pytest.raises(ValueError, match=r"^/proc/interrupts line 4: 2 counts for 4 CPUs"):
        parse_interrupts((FIXTURES / "faults/proc/interrupts").read_text())


def test_truncated_line_from_collect():
    with pytest.raises(ValueError, match="line 4"):
        InterruptsCollector().collect(fixture_root("faults"))


def test_missing_header():
    with pytest.raises(ValueError, match=r"^/proc/interrupts line 1: expected a CPU header"):
        parse_interrupts("  0:   1   IO-APIC   2-edge   timer\n")


def test_missing_file_is_oserror():
    with pytest.raises(OSError):
        InterruptsCollector().collect(fixture_root("missing"))
