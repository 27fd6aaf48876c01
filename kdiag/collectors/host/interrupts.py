"""Interrupts per IRQ and CPU from /proc/interrupts, with the network interface each IRQ serves."""

from __future__ import annotations

import re
from typing import NamedTuple

from kdiag.collectors import Collector
from kdiag.collectors.host._util import cpu_table, interfaces
from kdiag.collectors.registry import registered
from kdiag.core.procfs import malformed
from kdiag.core.root import Root
from kdiag.core.sample import Sample
from kdiag.families.host import INTERRUPTS_TOTAL

SOURCE = "/proc/interrupts"
# What the kernel prints before the action names: chip (" %8s"), hwirq when the IRQ has a domain,
# "Level"/"Edge" with GENERIC_IRQ_SHOW_LEVEL (arm), and "-handler" (x86 "-edge", "-fasteoi").
# Pre-3.x kernels print "IO-APIC-edge" as one chip token without hwirq.
_INFO = re.compile(r"\s*(?:\S+(?:\s+\d+(?=[\s-]|$))?(?:\s+(?:Level|Edge)\b)?(?:\s*-\S+)?)?")


class Interrupt(NamedTuple):
    """One /proc/interrupts row: counts per CPU number, chip/hwirq/handler or description, action names."""

    counts: dict[str, int]
    info: str
    devices: str


def parse_interrupts(text: str, source: str = SOURCE) -> dict[str, Interrupt]:
    """IRQ number or name (NMI, LOC, ...) -> its row; named rows have no devices."""
    cpus, rows = cpu_table(text, source)
    interrupts = {}
    for n, line, irq, counts, rest in rows:
        if irq.isdigit():
            if len(counts) != len(cpus):
                raise malformed(source, n, line, f"{len(counts)} counts for {len(cpus)} CPUs")
            info = _INFO.match(rest)
            assert info is not None  # every part of _INFO is optional: it matches any text
            interrupts[irq] = Interrupt(dict(zip(cpus, counts, strict=True)), info[0].strip(), rest[info.end() :].strip())
        else:
            # Named rows may be short: ERR and MIS hold one count.
            interrupts[irq] = Interrupt(dict(zip(cpus, counts, strict=False)), rest.strip(), "")
    return interrupts


def irq_interfaces(interrupts: dict[str, Interrupt], names: list[str], msi_irqs: dict[str, list[str]]) -> dict[str, str]:
    """IRQ -> interface: one whose device lists it in msi_irqs, else one named as a token of its devices."""
    owner: dict[str, str] = {}
    for name in names:
        for irq in msi_irqs.get(name, ()):
            owner.setdefault(irq, name)
    for irq, interrupt in interrupts.items():
        for name in names:
            if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", interrupt.devices):
                owner.setdefault(irq, name)
    return {irq: owner[irq] for irq in interrupts if irq in owner}


def _msi_irqs(root: Root, name: str) -> list[str]:
    """IRQ numbers of the (PCI) device behind an interface, [] when it has none."""
    device = f"class/net/{name}/device"
    # A virtio NIC's device is the virtio device; its MSI-X vectors belong to the parent PCI function.
    for rel in (f"{device}/msi_irqs", f"{device}/../msi_irqs"):
        if root.exists("sys", rel):
            try:
                return root.listdir("sys", rel)
            except OSError:
                return []  # the interface went away since the listing
    return []



@registered()
class InterruptsCollector(Collector):
    """Interrupts per numeric IRQ and CPU; pairs still at zero are left out (a 128-CPU host would have ~40k series)."""

    name = "interrupts"
    families = (INTERRUPTS_TOTAL,)

    def collect(self, root: Root) -> list[Sample]:
        """Samples of the nonzero (IRQ, CPU) counts of numeric IRQs, labelled with their network interface."""
        irqs = {
            irq: i for irq, i in parse_interrupts(root.read_proc("interrupts")).items() if irq.isdigit() and any(i.counts.values())
        }
        names = interfaces(root)
        owner = irq_interfaces(irqs, names, {name: _msi_irqs(root, name) for name in names})
        return [
            INTERRUPTS_TOTAL.sample(n, irq=irq, cpu=cpu, device=i.devices, interface=owner.get(irq, ""))
            for irq, i in irqs.items()
            for cpu, n in i.counts.items()
            if n
        ]
