"""Chaos soak: three `kdiag run` daemons (a signed fleet) on a 3-broker lab while brokers are killed and frozen, the
cluster is cut off, a JmxTool hangs, processes with hostile names come and go, the config reloads and a hostile Kafka
client forges, floods and hijacks the election (hostile_client.py); exits, publish gaps, RSS and fd growth,
tracebacks and the exposition's validity per daemon, forged diagnoses shown and time without a reporter."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from hostile_client import HostileClient
from soak import load1, proc_figures

from kdiag.analysis.catalog import default_rules_dir
from kdiag.kafka.fleet_key import write_key
from kdiag.tools.lab import lab

# Process names (what /proc/PID/comm shows, its first 15 bytes) and arguments any local user can give a process.
HOSTILE_NAMES = [b"a \x1c# b", "x\u2028y}".encode(), b'n\nl# z{a="', b"<script>", b"q\"'\\{}=\r", b"bad\xff\xfe\x80"]
HOSTILE_ARGV = ["--x=\x1c# y", "\u2028\u2029\x85", "line\nbreak", "<script>alert(1)</script>", "\"'`\\", "\x1b[31mred",
                b"\xff\xfe\x80", "--password=chaos-secret"]
# A reader of a cached file: rchar grows (the processes collector's top readers), little CPU.
READER = "import sys, time\nwhile True:\n    open(sys.argv[1], 'rb').read()\n    time.sleep(0.25)\n"
LAST_CYCLE = re.compile(rb"^kdiag_last_cycle_timestamp_seconds (\S+)$", re.M)
TRACEBACK = "Traceback (most recent call last):"
# No daemon reporting during a hostile client's event: at most the fallback's two election intervals and a few looks.
NOBODY_REPORTS_LIMIT = 40.0
# A daemon restarted on purpose publishes again within this long of its SIGTERM: its stop, a Python start beside two
# others on a loaded host, and its first cycle.
RESTART_LIMIT = 30.0
KAFKA_TIMEOUT = 10.0  # the daemons' kafka.timeout: a JmxTool silent for 2 JMX polls plus this is replaced


@dataclass
class Daemon:
    """One `kdiag run` on broker `node`'s host: its process, log and what the scraper saw of it."""

    node: int
    port: int
    dir: Path
    interval: float
    proc: subprocess.Popen | None = None
    exits: list[str] = field(default_factory=list)
    last_cycle: float = 0.0
    seen_at: float = 0.0
    longest_gap: float = 0.0
    longest_cycle_gap: float = 0.0
    gap_when: str = ""  # when the longest publish gap ended, and the load average then
    failed_scrapes: int = 0
    start_figures: tuple[float, int, int] | None = None
    peak_rss: float = 0.0
    peak_fds: int = 0
    restarting: bool = False  # stopped on purpose (restart()): its exit is no exit
    # A restart on purpose is no publish gap: from its SIGTERM to the new process's first cycle is its own figure.
    terminated_at: float | None = None
    longest_restart: float = 0.0

    @property
    def config(self) -> Path:
        return self.dir / "kdiag.yaml"

    @property
    def log(self) -> Path:
        return self.dir / "kdiag.log"

    def url(self, path: str) -> str:
        """The daemon's URL of path."""
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        """Start `kdiag run` with its config, appending to its log."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(self.config),
                                          "--no-discover"], stdout=out, stderr=subprocess.STDOUT)

    def terminate(self) -> None:
        """SIGTERM it on purpose (it leaves the election's group): neither an exit nor a publish gap."""
        self.restarting = True
        if self.terminated_at is None:
            self.terminated_at = time.monotonic()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def restart(self) -> None:
        """SIGTERM it and start it again once it has exited."""
        self.terminate()
        try:
            if self.proc:
                self.proc.wait(60)
            self.start()
        finally:
            self.restarting = False

    def check_exit(self) -> None:
        """A daemon that exited is counted, with its status, and started again."""
        if self.proc and not self.restarting and (rc := self.proc.poll()) is not None:
            self.exits.append(f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}")
            print(f"DAEMON EXIT: daemon {self.node} {self.exits[-1]}: restarting it", flush=True)
            self.start()

    def scrape(self) -> None:
        """Read the last cycle's time from /metrics. The publish gap runs from the scrape that first showed a cycle to
        the one that showed the next (or to now): what a scraper sees. The cycle gap runs between cycles' start times."""
        try:
            with urllib.request.urlopen(self.url("/metrics"), timeout=5) as r:
                m = LAST_CYCLE.search(r.read())
            now = time.monotonic()
            if m and (t := float(m.group(1))) > self.last_cycle:
                if self.terminated_at is not None and not self.restarting:
                    self.longest_restart = max(self.longest_restart, now - self.terminated_at)
                    self.terminated_at = None
                elif self.last_cycle and self.terminated_at is None:
                    self.longest_cycle_gap = max(self.longest_cycle_gap, t - self.last_cycle)
                    self._gap(now - self.seen_at)
                self.last_cycle, self.seen_at = t, now
        except OSError:
            self.failed_scrapes += 1
        if self.last_cycle and self.terminated_at is None:
            self._gap(time.monotonic() - self.seen_at)
        if self.proc and self.proc.poll() is None:
            try:
                rss, fds, _ = proc_figures(self.proc.pid)
            except (OSError, KeyError, ValueError):
                return
            self.peak_rss, self.peak_fds = max(self.peak_rss, rss), max(self.peak_fds, fds)

    def restart_seconds(self) -> float:
        """The longest restart on purpose, SIGTERM to the new process's first publish; one still waiting counts so far."""
        pending = time.monotonic() - self.terminated_at if self.terminated_at is not None else 0.0
        return max(self.longest_restart, pending)

    def _gap(self, seconds: float) -> None:
        if seconds > self.longest_gap:
            self.longest_gap, self.gap_when = seconds, f"{time.strftime('%H:%M:%S')}, load {load1():.0f}"

    def figures(self) -> tuple[float, int, int]:
        """RSS MB, fds and threads now."""
        assert self.proc is not None
        return proc_figures(self.proc.pid)

    def tracebacks(self) -> list[str]:
        """The exception line of every traceback in the log."""
        lines = self.log.read_text(errors="replace").splitlines()
        found = []
        for i, line in enumerate(lines):
            if TRACEBACK in line:
                tail = next((lt for lt in lines[i + 1:] if lt and not lt.startswith((" ", TRACEBACK))), "?")
                found.append(tail[:200])
        return found

    def log_count(self, needle: str) -> int:
        """How often needle occurs in the log."""
        return self.log.read_text(errors="replace").count(needle)


def daemon_config(lab_dir: Path, info: dict, node: int, port: int, interval: float, rules: Path) -> dict:
    """Broker `node`'s host: its own broker's JMX, state dir, probe topic and group; Kafka and JMX read often."""
    lab_yaml = yaml.safe_load((lab_dir / "kdiag.yaml").read_text())["kafka"]
    return {
        "listen": f"127.0.0.1:{port}", "interval": f"{interval:g}s", "signal_window": "30s", "rules_dirs": [str(rules)],
        "state_dir": str(lab_dir.parent / f"chaos-state-{port}"),
        "processes": {"top_n": 10},
        "kafka": {"bootstrap_servers": info["bootstrap"], "jmx": [info["jmx"][str(node)]],
                  "jmx_classpath": lab_yaml["jmx_classpath"], "broker_user": "root", "local_broker_id": node,
                  "interval": f"{2 * interval:g}s", "jmx_interval": f"{interval:g}s", "timeout": f"{KAFKA_TIMEOUT:g}s"},
        "probe": {"topic": f"kdiag-chaos-probe-{node}", "group_id": f"kdiag-chaos-probe-{node}"},
    }


def restart_all(daemons: list[Daemon]) -> None:
    """Restart every daemon at once and wait until each answers again."""
    for d in daemons:
        d.terminate()
    for d in daemons:
        d.restart()
    for d in daemons:
        wait_for(lambda d=d: healthy(d), 180)


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    """Whether check() turned true within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def healthy(d: Daemon) -> bool:
    """Whether the daemon's /healthz answers 200."""
    with urllib.request.urlopen(d.url("/healthz"), timeout=5) as r:
        return r.status == 200


def exposition_problem(body: bytes, promtool: str | None) -> str:
    """Why /metrics is not valid exposition (promtool check metrics, prometheus_client's parser); "" when it is."""
    if promtool:
        out = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
        # Exit 3 is promtool's lint about metric names, not a format error.
        if out.returncode not in (0, 3) or b"error while linting" in out.stderr:
            return "promtool: " + out.stderr.decode(errors="replace").strip()[-300:]
    try:
        list(text_string_to_metric_families(body.decode()))
    except (ValueError, UnicodeDecodeError) as e:
        return f"prometheus_client: {e}"
    return ""


class Chaos:
    """The lab, the daemons and the faults, each fault undone before the next."""

    def __init__(self, lab_dir: Path, work: Path, daemons: list[Daemon], hold: float):
        self.lab_dir, self.work, self.daemons, self.hold = lab_dir, work, daemons, hold
        self.info = lab.read_lab(lab_dir) or {}
        self.promtool = shutil.which("promtool")
        self.cut_chain = f"KDIAG_CHAOS_{os.getpid()}"
        self.iptables = shutil.which("iptables") is not None and subprocess.run(
            ["iptables", "-S", "OUTPUT"], capture_output=True).returncode == 0
        self.exposition: list[str] = []  # one line per check: "" when valid
        self.hostile_seen: list[int] = []  # per hostile event: hostile processes seen in /metrics (summed over daemons)
        self.frozen: list[int] = []
        self.reloads = {"applied": 0, "refused": 0, "missed": 0}  # a missed one logged neither as it should
        self.round = 0

    def broker_pid(self, node: int) -> int | None:
        """The live pid of the lab's node, None when it is down."""
        return lab.status(self.lab_dir)[1].get(node)

    def node(self) -> int:
        """The node this round's broker fault hits."""
        return self.round % 3 + 1

    def kill_broker(self) -> str:
        """SIGKILL a broker, then start it again as `kdiag lab up` does."""
        node, pid = self.node(), self.broker_pid(self.node())
        if pid:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not self.broker_pid(node), 30)
        time.sleep(self.hold)
        lab.start_node(node, self.lab_dir, timeout=300)
        return f"node {node} SIGKILL (pid {pid}), restarted"

    def freeze_broker(self) -> str:
        """SIGSTOP a broker for --hold seconds."""
        node, pid = self.node(), self.broker_pid(self.node())
        if not pid:
            return f"node {node} not running"
        self.frozen.append(pid)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.hold)
        finally:
            os.kill(pid, signal.SIGCONT)
            self.frozen.remove(pid)
        return f"node {node} SIGSTOP {self.hold:g}s"

    def cut_ports(self) -> list[int]:
        """Every broker's client and JMX port."""
        return [p for node in self.info["nodes"].values() for p in (node["client"], node["jmx_port"])]

    def cut_cluster(self) -> str:
        """Drop every packet to the brokers on loopback for --hold seconds (without iptables: stop them all)."""
        if not self.iptables:
            subprocess.run([sys.executable, "-m", "kdiag", "lab", "down", "--dir", str(self.lab_dir)], check=True)
            time.sleep(self.hold)
            subprocess.run([sys.executable, "-m", "kdiag", "lab", "up", "--brokers", "3", "--base-port",
                            str(self.info["base_port"]), "--dir", str(self.lab_dir)], check=True, capture_output=True)
            return "all brokers stopped (no iptables), started again"
        subprocess.run(["iptables", "-N", self.cut_chain], check=True)
        try:
            for port in self.cut_ports():
                subprocess.run(["iptables", "-A", self.cut_chain, "-p", "tcp", "--dport", str(port), "-j", "DROP"],
                               check=True)
            subprocess.run(["iptables", "-I", "OUTPUT", "-o", "lo", "-j", self.cut_chain], check=True)
            time.sleep(self.hold)
        finally:
            self.uncut()
        return f"iptables DROP to ports {','.join(map(str, self.cut_ports()))} on lo for {self.hold:g}s"

    def uncut(self) -> None:
        """Remove the cut's chain, if any."""
        for args in (["-D", "OUTPUT", "-o", "lo", "-j"], ["-F"], ["-X"]):
            subprocess.run(["iptables", *args, self.cut_chain], capture_output=True)

    def hang_jmx(self) -> str:
        """SIGSTOP one daemon's JmxTool for longer than it waits for a row."""
        d = self.daemons[self.round % len(self.daemons)]
        assert d.proc is not None
        pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and child_java(int(e.name), d.proc.pid)]
        # Longer than the daemon waits for a row before it replaces the JmxTool.
        hold = 1.5 * (2 * d.interval + KAFKA_TIMEOUT)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(hold)
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # the daemon replaced the hung JmxTool
                    os.kill(pid, signal.SIGCONT)
        return f"daemon {d.node}: SIGSTOP of its JmxTool pid(s) {pids} for {hold:g}s"

    def hostile_processes(self) -> str:
        """Start the hostile processes, check each /metrics once they are listed and once they are gone."""
        bin_dir = self.work / "bin"
        bin_dir.mkdir(exist_ok=True)
        data = self.work / "hostile.data"
        if not data.exists():
            data.write_bytes(os.urandom(1 << 20))
        procs = []
        for name in HOSTILE_NAMES:
            link = os.path.join(os.fsencode(bin_dir), name)
            if not os.path.lexists(link):
                os.symlink(sys.executable, link)
            procs.append(subprocess.Popen([link, "-c", READER, str(data), *HOSTILE_ARGV], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        pids = {str(p.pid) for p in procs}
        seen = 0
        try:
            for d in self.daemons:  # until the processes collector picked them (a few cycles), then check
                def listed(d: Daemon = d) -> bool:
                    with urllib.request.urlopen(d.url("/metrics"), timeout=10) as r:
                        found = set(re.findall(r'^kdiag_process_info\{[^\n]*?pid="(\d+)"', r.read().decode(), re.M))
                    return pids <= found
                wait_for(listed, 6 * d.interval)
            for d in self.daemons:
                body = urllib.request.urlopen(d.url("/metrics"), timeout=10).read()
                seen += len(pids & set(re.findall(r'pid="(\d+)"', body.decode())))
                self.exposition.append(exposition_problem(body, self.promtool))
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
        time.sleep(2 * self.daemons[0].interval)
        for d in self.daemons:  # and once they are gone
            self.exposition.append(exposition_problem(urllib.request.urlopen(d.url("/metrics"), timeout=10).read(),
                                                      self.promtool))
        self.hostile_seen.append(seen)
        bad = [p for p in self.exposition[-2 * len(self.daemons):] if p]
        return (f"{len(procs)} hostile processes, seen {seen}/{len(procs) * len(self.daemons)} times in /metrics; "
                f"exposition {'INVALID: ' + bad[0] if bad else 'valid'}")

    def reload(self, broken: bool) -> str:
        """SIGHUP every daemon with a valid or a broken config, waiting for the log line each must write."""
        needle = "reload refused" if broken else "reloaded:"
        before = [d.log_count(needle) for d in self.daemons]
        for d in self.daemons:
            config = yaml.safe_load(d.config.read_text())
            config["signal_window"] = "31s" if config["signal_window"] == "30s" else "30s"
            text = yaml.safe_dump(config)
            d.config.write_text("interval: [\n" + text if broken else text)
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
        done = [wait_for(lambda d=d, n=n: d.log_count(needle) > n, 30) for d, n in zip(self.daemons, before, strict=True)]
        self.reloads["refused" if broken else "applied"] += sum(done)
        self.reloads["missed"] += done.count(False)
        if broken:
            for d in self.daemons:
                d.config.write_text(d.config.read_text().removeprefix("interval: [\n"))
        return f"SIGHUP with a {'broken' if broken else 'valid'} config: {'; '.join(map(str, done))} logged {needle!r}"

    def cleanup(self) -> None:
        """Undo whatever fault an interruption left in place."""
        for pid in self.frozen:
            os.kill(pid, signal.SIGCONT)
        if self.iptables:
            self.uncut()


def child_java(pid: int, parent: int) -> bool:
    """Whether pid is a JVM (the JmxTool) started by parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(" (", 1)[1].startswith("java)") and int(stat.rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, IndexError, ValueError):
        return False


def scraper(daemons: list[Daemon], stop: threading.Event) -> None:
    """Every second: each daemon's last cycle, RSS and fds; an exited daemon is counted and started again."""
    while not stop.wait(1.0):
        for d in daemons:
            d.check_exit()
            d.scrape()


def progress(start: float, events: int, daemons: list[Daemon], chaos: Chaos) -> str:
    """One perf-test-style line of the run so far."""
    exits = sum(len(d.exits) for d in daemons)
    gap = max(d.longest_gap / d.interval for d in daemons)
    invalid = sum(bool(p) for p in chaos.exposition)
    return (f"{time.monotonic() - start:.0f} s elapsed, {events} events, {exits} daemon exits, {gap:.2f} cycles max "
            f"publish gap, {len(chaos.exposition) - invalid}/{len(chaos.exposition)} expositions valid, "
            f"{max(d.peak_rss for d in daemons):.1f} MB max RSS, {max(d.peak_fds for d in daemons)} max fds, "
            f"load {load1():.1f}.")


def report(daemons: list[Daemon], chaos: Chaos, counts: dict[str, int], loads: list[float], seconds: float,
           hostile: dict) -> dict:
    """The figures per daemon and the verdict."""
    rows = []
    for d in daemons:
        end = d.figures() if d.proc and d.proc.poll() is None else (0.0, 0, 0)
        begin = d.start_figures or end
        rows.append({"daemon": d.node, "exits": d.exits, "longest_gap_seconds": round(d.longest_gap, 2),
                     "longest_gap_cycles": round(d.longest_gap / d.interval, 2), "gap_when": d.gap_when,
                     "longest_cycle_gap_seconds": round(d.longest_cycle_gap, 2), "failed_scrapes": d.failed_scrapes,
                     "longest_restart_seconds": round(d.restart_seconds(), 2),
                     "rss_mb": [round(begin[0], 1), round(end[0], 1), round(d.peak_rss, 1)],
                     "fds": [begin[1], end[1], d.peak_fds], "tracebacks": d.tracebacks(), "log": str(d.log)})
    result = {"seconds": round(seconds), "events": counts, "load1": [min(loads), round(sum(loads) / len(loads), 1),
                                                                      max(loads)] if loads else [],
              "iptables": chaos.iptables, "promtool": bool(chaos.promtool),
              "expositions": len(chaos.exposition), "invalid_expositions": [p for p in chaos.exposition if p],
              "hostile_seen": chaos.hostile_seen, "reloads": chaos.reloads, "hostile_client": hostile, "daemons": rows}
    result["passed"] = (all(not r["exits"] and r["longest_gap_cycles"] <= 2 and not r["tracebacks"]
                            and r["longest_restart_seconds"] <= RESTART_LIMIT for r in rows)
                        and not result["invalid_expositions"] and not chaos.reloads["missed"]
                        and not hostile["forged_shown"] and hostile["nobody_reported_seconds"] < NOBODY_REPORTS_LIMIT)
    return result


def table(result: dict) -> str:
    """The markdown table of a run."""
    lines = ["| daemon | exits | longest publish gap | longest gap between cycle starts | restart to first publish "
             "| RSS MB start / end / peak | fds start / end / peak | tracebacks |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["daemons"]:
        lines.append(f"| {r['daemon']} | {len(r['exits'])} | {r['longest_gap_seconds']:.1f} s "
                     f"({r['longest_gap_cycles']:.2f} cycles, {r['gap_when']}) | {r['longest_cycle_gap_seconds']:.1f} s | "
                     f"{r['longest_restart_seconds']:.1f} s | "
                     f"{' / '.join(map(str, r['rss_mb']))} | "
                     f"{' / '.join(map(str, r['fds']))} | {len(r['tracebacks'])} |")
    load = result["load1"]
    lines.append(f"\n{result['seconds']} s, events {result['events']}; expositions checked "
                 f"{result['expositions']}, invalid {len(result['invalid_expositions'])}; reloads {result['reloads']}; "
                 f"hostile processes seen "
                 f"{result['hostile_seen']}; load average min/mean/max {'/'.join(map(str, load))}")
    h = result["hostile_client"]
    lines.append(f"hostile Kafka client: forged diagnoses shown {len(h['forged_shown'])}, longest time no daemon "
                 f"reported during its events {h['nobody_reported_seconds']} s, foreign members seen "
                 f"{h['foreign_members_seen']}, records refused {h['refused']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the daemons and the faults for --duration seconds; print progress, the table and PASS/FAIL."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--duration", type=float, default=1800,
                   help="seconds of faults (default 1800); the first round of every fault runs whole")
    p.add_argument("--lab-dir", default=os.environ.get("KDIAG_LAB_DIR"),
                   help="a 3-broker lab of your own, which this breaks (default $KDIAG_LAB_DIR)")
    p.add_argument("--port", type=int, default=19761, help="listen port of daemon 1; daemon N uses port+N-1")
    p.add_argument("--interval", type=float, default=5.0, help="the daemons' cycle, seconds (default 5)")
    p.add_argument("--hold", type=float, default=15.0, help="how long each fault lasts, seconds (default 15)")
    p.add_argument("--pause", type=float, default=5.0, help="seconds between faults (default 5)")
    p.add_argument("--json", help="also write the result as JSON to this file")
    args = p.parse_args(argv)
    if not args.lab_dir or (lab.read_lab(args.lab_dir) or {}).get("brokers") != 3:
        print("needs a 3-broker lab of your own: KDIAG_LAB_DIR=DIR kdiag lab up --brokers 3 --base-port P --dir DIR",
              file=sys.stderr)
        return 2
    lab_dir = Path(args.lab_dir).expanduser()
    info = lab.read_lab(lab_dir)
    assert info is not None
    work = lab_dir.parent / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    daemons = [Daemon(n, args.port + n - 1, work / f"daemon-{n}", args.interval) for n in (1, 2, 3)]
    # The daemons' own copy of the catalog: a reload must not pick up a rule edited in the checkout meanwhile.
    rules = shutil.copytree(default_rules_dir(), work / "rules")
    key = work / "fleet.key"
    write_key(str(key))
    for d in daemons:
        d.dir.mkdir(parents=True)
        config = daemon_config(lab_dir, info, d.node, d.port, args.interval, rules)
        config["kafka"]["coordination_key_file"] = str(key)  # a signed fleet: no forged record is ever shown
        d.config.write_text(yaml.safe_dump(config))
        d.start()
    chaos = Chaos(lab_dir, work, daemons, args.hold)
    hostile = HostileClient(info["bootstrap"], [d.url("") for d in daemons], lambda: restart_all(daemons))
    # The hostile client's events come before the broker faults: the time without a reporter it measures is then its
    # own, not what is left of a cluster restart (after which the election takes its own time to form again).
    events: list[tuple[str, Callable[[], str]]] = [
        ("hostile_processes", chaos.hostile_processes), ("hostile_records", hostile.forge),
        ("hostile_flood", hostile.flood), ("coordination_deleted", hostile.delete_topics),
        ("group_hijack", hostile.hijack), ("reload_valid", lambda: chaos.reload(False)),
        ("reload_broken", lambda: chaos.reload(True)), ("jmx_hang", chaos.hang_jmx),
        ("broker_freeze", chaos.freeze_broker), ("broker_kill", chaos.kill_broker), ("cluster_cut", chaos.cut_cluster)]
    counts = {name: 0 for name, _ in events}
    stop, loads = threading.Event(), []
    thread = threading.Thread(target=scraper, args=(daemons, stop), daemon=True)
    watcher = threading.Thread(target=hostile.watch, args=(stop,), daemon=True)
    start = time.monotonic()
    try:
        for d in daemons:
            if not wait_for(lambda d=d: healthy(d), 180):
                print(f"daemon {d.node} not healthy after 180 s; see {d.log}", file=sys.stderr)
                return 1
        time.sleep(3 * args.interval)  # a few cycles before the faults: the Kafka sources and JmxTool are up
        for d in daemons:
            d.start_figures = d.figures()
        thread.start()
        watcher.start()
        print(f"chaos on {info['bootstrap']} with daemons on ports {args.port}-{args.port + 2}, work dir {work}; "
              f"cluster cut by {'iptables' if chaos.iptables else 'stopping all brokers'}", flush=True)
        start = time.monotonic()
        while time.monotonic() - start < args.duration or chaos.round < len(events):  # every fault at least once
            name, event = events[chaos.round % len(events)]
            what = event()
            counts[name] += 1
            chaos.round += 1
            loads.append(load1())
            print(f"{time.monotonic() - start:6.0f} s {name}: {what}", flush=True)
            print(progress(start, chaos.round, daemons, chaos), flush=True)
            time.sleep(args.pause)
        time.sleep(2 * args.interval)  # the last fault's aftermath is measured too
    finally:
        chaos.cleanup()
        stop.set()
        thread.join(30)
        watcher.join(30)
        result = report(daemons, chaos, counts, loads, time.monotonic() - start, hostile.summary())
        for d in daemons:
            if d.proc and d.proc.poll() is None:
                d.proc.send_signal(signal.SIGTERM)
                d.proc.wait(30)
    print(table(result))
    for r in result["daemons"]:
        for line in r["tracebacks"]:
            print(f"traceback in daemon {r['daemon']}: {line}")
    for problem in result["invalid_expositions"]:
        print(f"invalid exposition: {problem}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print("PASS" if result["passed"] else "FAIL", "(goals: 0 exits, publish gap <= 2 cycles, a restart on purpose "
          f"publishing again within {RESTART_LIMIT:g} s, no traceback, every "
          "exposition valid, every reload applied or refused as it should, no forged diagnosis shown, no daemon "
          f"reporting for under {NOBODY_REPORTS_LIMIT:g} s during a hostile client's events)")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
