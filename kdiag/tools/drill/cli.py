"""`kdiag drill list|run`: inject faults into a cluster and check kdiag names them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from kdiag.kafka.jars import lab_dir
from kdiag.tools.lab import lab
from kdiag.tools.lab.jars import LabError
from kdiag.tools.drill.faults import Target
from kdiag.tools.drill.catalog import BY_NAME, DRILLS, Drill
from kdiag.core.outfile import write_output
from kdiag.core.quote import printable_lines

if TYPE_CHECKING:
    from kdiag.tools.drill.results import DrillResult


def _say(message: str) -> None:
    print(printable_lines(message), file=sys.stderr, flush=True)


def lab_target() -> Target:
    """The kdiag lab (KDIAG_LAB_DIR), started with 3 brokers when absent."""
    info, pids = lab.status()
    if info is None or not all(pids.values()):
        _say(f"starting the kdiag lab in {lab_dir()} ...")
        with lab.locked(lab_dir()):
            info = lab.up(brokers=info["brokers"] if info else 3, containers=info.get("containers") if info else None)
    if info.get("security", "none") != "none":
        raise SystemExit(f"kdiag: the drills need a plaintext lab; the lab in {info['dir']} uses {info['security']}")
    dirs = [str(Path(info["dir"]) / f"node-{n}" / "data") for n in range(1, info["brokers"] + 1)]
    containers = "containers" in info
    return Target(info["bootstrap"], info["brokers"], list(info["jmx"].values()), Path(info["dir"]), dirs,
                  containers=containers)  # trusted without kafka.broker_user: root started the containers


def remote_target(bootstrap: str, jmx: list[str]) -> Target:
    """A cluster kdiag does not own: its broker count asked from the cluster."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # the one error line is ours
    brokers = len(admin.list_topics(timeout=15).brokers)
    return Target(bootstrap, brokers, jmx)


def cmd_list(args: argparse.Namespace) -> int:
    for d in DRILLS:
        print(f"{d.name:22} {','.join(d.expected):28} {d.summary}")
    return 0


def _chosen(args: argparse.Namespace) -> list[Drill] | None:
    names = [d.name for d in DRILLS] if args.all else args.names
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        _say(f"kdiag: unknown drill(s) {', '.join(unknown)}; `kdiag drill list` shows them" if unknown
             else "kdiag: name drills to run, or --all")
        return None
    return [BY_NAME[n] for n in names]


def cmd_run(args: argparse.Namespace) -> int:
    from kdiag.tools.drill.drill import Runner
    from kdiag.tools.drill.results import DrillResult, table
    from kdiag.report.html import render

    drills = _chosen(args)
    if drills is None:
        return 2
    live = any(not d.replay for d in drills)  # replays need no cluster: no lab is started for them
    try:
        target = None if not live else (
            lab_target() if args.against == "lab" else remote_target(args.against, args.jmx or []))
    except (LabError, KafkaException) as e:
        _say(f"kdiag: cannot reach the cluster to drill: {e}")
        return 1
    if target is not None and args.discover:
        target = dataclasses.replace(target, discover_procfs=args.procfs)
    if target is not None and args.against != "lab":
        _say(f"plan for {args.against} ({target.brokers} brokers): each drill changes exactly this, then reverts it:")
        for d in drills:
            _say(f"  {d.name}: {d.summary}" + (f" [refused: {r}]" if (r := d.refusal(target)) else ""))
        if not args.yes_inject_faults:
            _say("kdiag: not a kdiag lab: add --yes-inject-faults to inject these faults")
            return 2
    if args.all and target is not None and not target.containers:
        # --all: every drill this lab can run; the container ones need a lab of their own kind.
        drills = [d for d in drills if not d.containers]
    refused = {d.name: r for d in drills if target is not None and (r := d.refusal(target))}
    runner = Runner(target, args.timeout, _say, args.alertmanager or "", args.serial,
                    Path(args.record) if args.record else None)
    results = runner.run([d for d in drills if d.name not in refused])
    results += [DrillResult(n, BY_NAME[n].expected, reverted=True, error=f"refused: {r}") for n, r in refused.items()]
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=1))
    else:
        print(printable_lines(table(results)), end="")  # errors and subjects come from the cluster
    if args.html:
        sections = [(r.timeline, _note(r)) for r in results if r.timeline]
        write_output(args.html, render("kdiag drills", sections))
        _say(f"HTML report written to {args.html}")
    if runner.interrupted:
        _say("kdiag: interrupted: the drill in progress was reverted")
        return 130
    return 0 if all(r.passed for r in results) else 1


def _note(r: DrillResult) -> str:
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in (("pending", r.seconds_to_pending), ("firing", r.seconds_to_firing),
                                                       ("alert", r.seconds_to_alert), ("resolved", r.seconds_to_resolved))
                       if v is not None)
    verdict = "passed" if r.passed else "FAILED"
    extra = f"; false attributions: {', '.join(r.false_attributions)}" if r.false_attributions else ""
    return f"expected {', '.join(r.expected)}: {verdict} ({timing or 'not detected'}){extra}"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `drill` subcommand tree."""
    drill = subparsers.add_parser("drill", help="inject faults and check kdiag names them")
    sub = drill.add_subparsers(dest="drill_command", required=True)
    p = sub.add_parser("list", help="the drills and the rule ids each expects")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("run", help="run drills: inject, wait for the diagnosis, revert, wait for it to resolve")
    p.add_argument("names", nargs="*", metavar="NAME", help="drills to run (see `kdiag drill list`)")
    p.add_argument("--all", action="store_true", help="every drill")
    p.add_argument("--against", default="lab", metavar="lab|BOOTSTRAP",
                   help="the kdiag lab (default; KDIAG_LAB_DIR) or another cluster's bootstrap servers")
    p.add_argument("--jmx", action="append", help="with --against BOOTSTRAP: a broker's JMX URL (repeatable)")
    p.add_argument("--discover", action="store_true",
                   help="the drills' kdiag finds the brokers, their JMX and log dirs itself, as `kdiag run` with no config")
    p.add_argument("--procfs", default="/proc", help="with --discover: the procfs it discovers over (default /proc)")
    p.add_argument("--yes-inject-faults", action="store_true", help="required to inject faults into a non-lab cluster")
    p.add_argument("--json", action="store_true", help="one JSON object per drill on stdout")
    p.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report with a timeline per drill")
    p.add_argument("--alertmanager", metavar="URL", help="push diagnoses there and wait for each drill's alert")
    p.add_argument("--serial", action="store_true",
                   help="one drill at a time (by default drills on their own topics or groups run at once)")
    p.add_argument("--record", metavar="DIR", help="also record the Kafka and probe states the drills' monitor reads, "
                   "one snapshot a second, into DIR (new): a recording `kdiag diagnose --from` replays")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a diagnosis (default 300)")
    p.set_defaults(func=cmd_run)
