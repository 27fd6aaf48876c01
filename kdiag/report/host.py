"""The host section of the page: CPUs, memory, NICs, log disks, the local broker and each collector's health."""

from __future__ import annotations

from collections.abc import Sequence

from kdiag.core.sample import Sample
from kdiag.kafka.jars import KAFKA_JAR
from kdiag.report.plots import clock, formatted, shown
from kdiag.runtime.pipeline import State
from kdiag.families.family import Family
from kdiag.families.host import (
    CPU_SECONDS_TOTAL, MEMORY_MEMAVAILABLE_BYTES, MEMORY_MEMTOTAL_BYTES, MEMORY_SWAPTOTAL_BYTES,
)
from kdiag.families.kafka import KAFKA_BROKERS, KAFKA_CONTROLLER_ID
from kdiag.families.network import NETWORK_MTU_BYTES, NETWORK_QUEUES, NETWORK_SPEED_BYTES, NETWORK_UP
from kdiag.families.process import KAFKA_LOG_DIR_INFO, PROCESS_BROKER_STARTED_BY, PROCESS_INFO, PROCESS_IS_BROKER
from kdiag.families.storage import BLOCK_ROTATIONAL, FILESYSTEM_INFO, FILESYSTEM_NOATIME

# Every family this section reads: the page filters a cycle's samples (70,000 at 100,000 partitions) once.
_READ = (CPU_SECONDS_TOTAL, MEMORY_MEMAVAILABLE_BYTES, MEMORY_MEMTOTAL_BYTES, MEMORY_SWAPTOTAL_BYTES, KAFKA_BROKERS,
            KAFKA_CONTROLLER_ID, NETWORK_MTU_BYTES, NETWORK_QUEUES, NETWORK_SPEED_BYTES, NETWORK_UP, KAFKA_LOG_DIR_INFO,
            PROCESS_BROKER_STARTED_BY, PROCESS_INFO, PROCESS_IS_BROKER, BLOCK_ROTATIONAL, FILESYSTEM_INFO,
            FILESYSTEM_NOATIME)
_NAMES = frozenset(f.name for f in _READ)


def _by(samples: list[Sample], family: Family) -> list[Sample]:
    return [s for s in samples if s.name == family.name]


def _one(samples: list[Sample], family: Family, **labels: str) -> float | None:
    return next((s.value for s in samples if s.name == family.name and all(dict(s.labels).get(k) == v
                                                                    for k, v in labels.items())), None)


def _table(head: list[str], rows: list[list[str]], cls: str) -> str:
    """A table of already-escaped cells."""
    if not rows:
        return '<p class="none">none seen</p>'
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr></thead><tbody>{cells}</tbody></table></div>")


def version_on_cmdline(samples: list[Sample]) -> str:
    """The local broker's Kafka version from its class path, '' when its command line does not name it."""
    brokers = {dict(s.labels).get("pid") for s in _by(samples, PROCESS_IS_BROKER) if s.value}
    for s in _by(samples, PROCESS_INFO):
        labels = dict(s.labels)
        if labels.get("pid") in brokers and (m := KAFKA_JAR.search(labels.get("cmdline", ""))):
            return m.group(1)
    return ""


def _nics(samples: list[Sample]) -> list[list[str]]:
    devices = sorted({dict(s.labels)["device"] for s in _by(samples, NETWORK_SPEED_BYTES)
                      + _by(samples, NETWORK_QUEUES) + _by(samples, NETWORK_UP)})
    rows = []
    for d in devices:
        speed = _one(samples, NETWORK_SPEED_BYTES, device=d)
        queues = [f"{dict(s.labels).get('direction', '')} {s.value:.0f}" for s in _by(samples, NETWORK_QUEUES)
                  if dict(s.labels)["device"] == d]
        up = _one(samples, NETWORK_UP, device=d)
        mtu = _one(samples, NETWORK_MTU_BYTES, device=d)
        rows.append([shown(d), "unknown" if speed is None else f"{speed * 8 / 1e9:.3g} Gbit/s",
                     shown(", ".join(queues) or "unknown"), "?" if up is None else ("up" if up else "down"),
                     "?" if mtu is None else f"{mtu:.0f}"])
    return rows


def _disks(samples: list[Sample]) -> list[list[str]]:
    filesystems = {dict(s.labels).get("mountpoint"): dict(s.labels) for s in _by(samples, FILESYSTEM_INFO)}
    rows = []
    for s in _by(samples, KAFKA_LOG_DIR_INFO):
        labels = dict(s.labels)
        device = labels.get("device", "")
        rotational = _one(samples, BLOCK_ROTATIONAL, device=device)
        media = "unknown" if rotational is None else ("rotating (HDD)" if rotational else "solid state")
        fs = filesystems.get(labels.get("mountpoint"), {})
        noatime = _one(samples, FILESYSTEM_NOATIME, mountpoint=labels.get("mountpoint", ""))
        mount = f"{fs.get('fstype', '?')} on {fs.get('device', '?')}" + (", noatime" if noatime else "")
        rows.append([shown(labels.get("path", "")), shown(device), media, shown(labels.get("mountpoint", "")),
                     shown(mount)])
    return rows


def _broker(state: State, samples: list[Sample], classpath_version: str) -> str:
    controller = _one(samples, KAFKA_CONTROLLER_ID)
    if state.local_broker is None:
        who = "no local broker found"
    else:
        role = "broker, active controller" if controller == state.local_broker else "broker"
        who = f"id {state.local_broker}, {role}"
    version = version_on_cmdline(samples) or classpath_version or "unknown (its jars are not on the command line or class path)"
    count = _one(samples, KAFKA_BROKERS)
    facts = [shown(who), f"Kafka {shown(version)}"]
    if state.cluster:
        facts.append(f"cluster {shown(state.cluster)}")
    if count is not None:
        facts.append(f"{count:.0f} brokers" + ("" if controller is None else f", controller {controller:.0f}"))
    started = [dict(s.labels) for s in _by(samples, PROCESS_BROKER_STARTED_BY)]
    items = [f"<li>pid {shown(b.get('pid', ''))} ({shown(b.get('comm', ''))}): {shown(b.get('reason', ''))}</li>"
             for b in started]
    items += [f"<li>pid {r['pid']} ({shown(r['comm'])}) is not taken for a broker: {shown(r['why'])}</li>"
              for r in state.refused_brokers()]
    return f"<p>{'; '.join(facts)}</p>" + (f'<ul class="brokers">{"".join(items)}</ul>' if items else "")


def _health(state: State, off: Sequence[str]) -> list[list[str]]:
    rows = []
    for name, h in sorted(state.health.items()):
        last = clock(h.last_success) if h.last_success else "never"
        status = '<span class="ok">ok</span>' if h.success else '<span class="bad">failing</span>'
        rows.append([shown(name), status, f"{h.duration * 1000:.3g} ms", last, shown(h.error)])
    return rows + [[shown(name), "off", "", "", ""] for name in sorted(off)]


def host_section(state: State, kafka_version: str = "", off: Sequence[str] = ()) -> str:
    """The host, its broker (the Kafka version from its command line, else `kafka_version`) and its collectors (those
    `off` listed as off) as HTML (every outside string escaped)."""
    samples = [s for s in state.samples if s.name in _NAMES]
    cpus = {dict(s.labels).get("cpu") for s in _by(samples, CPU_SECONDS_TOTAL)} - {None, "", "all"}
    total = _one(samples, MEMORY_MEMTOTAL_BYTES)
    available = _one(samples, MEMORY_MEMAVAILABLE_BYTES)
    swap = _one(samples, MEMORY_SWAPTOTAL_BYTES)
    memory = "unknown" if total is None else formatted("bytes", total) + (
        f" ({formatted('bytes', available)} available)" if available is not None else "") + (
        f", swap {formatted('bytes', swap)}" if swap else ", no swap")
    return ('<section id="host"><h2>Host ' + shown(state.host) + "</h2>"
            f'<p class="facts">{len(cpus) or "unknown"} CPUs; memory {shown(memory)}</p>'
            "<h3>Network interfaces</h3>"
            + _table(["device", "speed", "queues", "link", "MTU"], _nics(samples), "nics")
            + "<h3>Kafka log disks</h3>"
            + _table(["log dir", "device", "media", "mount", "filesystem"], _disks(samples), "disks")
            + "<h3>Local broker</h3>" + _broker(state, samples, kafka_version)
            + "<h3>Collectors</h3>"
            + _table(["collector", "status", "last run", "last success", "last error"], _health(state, off), "health")
            + "</section>")
