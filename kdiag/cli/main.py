"""The `kdiag` command: run, diagnose, record, rules and lab."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from kdiag.collectors import Collector
from kdiag.core.finite import dumps
from kdiag import __version__
from kdiag.alerting import rules as alerts
from kdiag.core import logsafe, malloc
from kdiag.config.settings import Config, ConfigError, load_config
from kdiag.core.errors import KdiagError
from kdiag.core.outfile import write_output
from kdiag.core.units import parse_duration
from kdiag.core.quote import printable_lines, quote
from kdiag.recording.recording import MAX_INTERVAL, MIN_INTERVAL, Recording, record


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _interval(text: str) -> float:
    seconds = _duration(text)
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration from {MIN_INTERVAL:g}s to {MAX_INTERVAL:g}s")
    return seconds


def _config(args: argparse.Namespace) -> Config:
    overrides = {
        "listen": getattr(args, "listen", None),
        "web_config": getattr(args, "web_config", None),
        "procfs": args.procfs,
        "sysfs": args.sysfs,
        "interval": getattr(args, "interval", None),
        "rules_dirs": args.rules_dir or None,
        "kafka.bootstrap_servers": getattr(args, "bootstrap_servers", None),
        "kafka.jmx": getattr(args, "jmx", None),
    }
    overrides |= {f"collectors.{name}": on for name, on in getattr(args, "collector_switches", None) or []}
    config = load_config(args.config, overrides)
    from kdiag.collectors.registry import switches

    try:
        switches(config)  # a name no collector has stops the start, and a reload keeps the running config
    except ConfigError as e:
        raise ConfigError(f"{args.config}: {e}" if args.config else str(e)) from None
    return config


def _collector_switch(on: bool) -> Callable[[str], tuple[str, bool]]:
    """The argparse type of --collector (on) or --no-collector: a registered collector's name."""
    def switch(name: str) -> tuple[str, bool]:
        from kdiag.collectors.registry import discover

        known = discover()
        if name not in known:
            raise argparse.ArgumentTypeError(f"unknown collector {quote(name, 40)} (expected one of {', '.join(sorted(known))})")
        return name, on
    return switch


def _collectors(p: argparse.ArgumentParser) -> None:
    for flag, on, text in (("--no-collector", False, "switch a collector off (repeatable; over `collectors:`)"),
                           ("--collector", True, "switch a collector on (repeatable; over `collectors:`)")):
        p.add_argument(flag, dest="collector_switches", action="append", type=_collector_switch(on), metavar="NAME",
                       help=text)


def _kafka(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (host:port,...); unset: no Kafka collectors")
    p.add_argument("--jmx", action="append", help="a broker's JMX URL or host:port (repeatable)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file (every key has a default)")
    p.add_argument("--procfs", help="procfs root (default /proc)")
    p.add_argument("--sysfs", help="sysfs root (default /sys)")
    p.add_argument("--rules-dir", action="append", help="rule directory or file (repeatable; default: the shipped catalog)")


def _run_config(args: argparse.Namespace) -> Config:
    """The config of `kdiag run`: live, its unset Kafka items filled from the broker process on this host."""
    config = _config(args)
    if args.from_ or args.no_discover:
        return config
    from kdiag.runtime.discovery import discover
    from kdiag.core.root import Root

    return discover(config, Root(config.procfs, config.sysfs))


def cmd_run(args: argparse.Namespace) -> int:
    # Until the daemon can reload, a SIGHUP (systemctl reload right after start) must not kill it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    malloc.limit_arenas()  # before any thread starts
    config = _run_config(args)
    from kdiag.app.build import build
    from kdiag.app.daemon import Daemon

    recording = Recording(args.from_) if args.from_ else None
    daemon = Daemon(build(config, recording), reload_config=lambda: _run_config(args))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: daemon.stop())
    signal.signal(signal.SIGHUP, lambda *_: daemon.request_reload())
    # What start-up made (modules, compiled rules) lives as long as the process: full collections need not scan it
    # each time (one took 60 ms at 10,000 partitions, 3 ms without it). A fetch allocates ~10^5 objects (a 10,000
    # partition admin state): collecting every 700 of them doubled its CPU (94 ms against 42 without collections).
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    print(f"kdiag {__version__}: serving {daemon.services.exporter.scheme}://{config.listen}/metrics "
          f"{'replaying ' + str(args.from_) if recording else 'from ' + config.procfs}", flush=True)
    daemon.serve_forever()
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from kdiag.app.wiring import load_rules, recorded_collectors, replay
    from kdiag.runtime.pipeline import CollectorSet, Pipeline
    from kdiag.report.text import render_text
    from kdiag.report.html import frozen
    from kdiag.core.root import Root

    config = _config(args)
    if args.format == "html" and not (args.from_ and args.output):
        print("kdiag: --format html needs --from RECORDING and -o PATH", file=sys.stderr)
        return 2
    if args.from_:
        recording = Recording(args.from_)
        states = []
        try:
            state = replay(recording, config, on_step=lambda s: states.append(frozen(s)))
        finally:
            recording.close()
        if args.format == "html":
            from kdiag.report.html import recording_report

            write_output(args.output, recording_report(str(args.from_), states))
            if args.output != "-":
                print(f"HTML report written to {args.output}")
            return 0
    else:
        # Live: sample a short window so rates and `for` durations have something to stand on.
        pipeline = Pipeline(CollectorSet(recorded_collectors(config, args.step)), load_rules(config), socket.gethostname(),
                            config.history, min(config.signal_window, args.duration), config.kafka.cluster_name,
                            config.kafka.local_broker_id)
        root = Root(config.procfs, config.sysfs)
        steps = max(2, int(args.duration // args.step) + 1)
        print(f"sampling {steps} times, every {args.step:g}s, for about {(steps - 1) * args.step:g}s: "
              f"{describe_sources(pipeline.collectors.collectors, config)} ...", file=sys.stderr, flush=True)
        for i in range(steps):
            state = pipeline.step(root)
            if i + 1 < steps:
                time.sleep(args.step)
    if args.format == "json":
        print(dumps(state.to_json(), "json", indent=1))
    else:
        print(render_text(state, color=wants_color(sys.stdout)), end="")
    return 0


def wants_color(stream: TextIO) -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set to anything (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def describe_sources(collectors: list[Collector], config: Config) -> str:
    """What a live diagnose reads: the host's /proc and /sys sources, and Kafka when configured."""
    names = [c.name for c in collectors]
    kafka = [n for n in names if n.startswith("kafka")]
    host = [n for n in names if n not in kafka]
    where = f"{config.procfs} and {config.sysfs} ({', '.join(host)})"
    return where + (f" and Kafka at {config.kafka.bootstrap_servers} ({', '.join(kafka)})" if kafka else ", no Kafka")


def cmd_record(args: argparse.Namespace) -> int:
    from kdiag.app.wiring import recorded_collectors
    from kdiag.runtime.pipeline import CollectorSet
    from kdiag.core.root import Root

    config = _config(args)
    out = record(Path(args.output), args.duration, args.interval, CollectorSet(recorded_collectors(config, args.interval)),
                 Root(config.procfs, config.sysfs), progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"recording written to {out}")
    return 0


def cmd_rules_check(args: argparse.Namespace) -> int:
    from kdiag.app.wiring import load_rules

    rules = load_rules(_config(args))
    print(f"{len(rules)} rules OK")
    return 0


def cmd_rules_list(args: argparse.Namespace) -> int:
    from kdiag.app.wiring import load_rules

    for r in load_rules(_config(args)):
        print(f"{r.id:28} {r.kind:8} {r.severity:9} each {r.each:6} {r.scope:7} {r.source[:60]}")
    return 0


def cmd_rules_export(args: argparse.Namespace) -> int:
    """`kdiag rules export`: write the generated files (all three when no target is named)."""
    from kdiag.app.wiring import load_rules

    targets = [t for t in ("prometheus", "alertmanager", "docs") if getattr(args, t)] or ["prometheus", "alertmanager", "docs"]
    if args.output and len(targets) != 1:
        raise SystemExit("kdiag rules export: -o needs exactly one of --prometheus, --alertmanager or --docs")
    rules = load_rules(_config(args))
    renderers: dict[str, tuple[Path, Callable[[], str]]] = {
        "prometheus": (alerts.DEFAULT_PROMETHEUS, lambda: alerts.render_prometheus(rules, args.runbook_base)),
        "alertmanager": (alerts.DEFAULT_ALERTMANAGER, lambda: alerts.render_alertmanager(rules)),
        "docs": (alerts.DEFAULT_DOCS, lambda: alerts.render_docs(rules))}
    for target in targets:
        default, render = renderers[target]
        path = Path(args.output) if args.output else default
        alerts.write(path, render())
        print(f"wrote {path} ({len(rules)} rules)")
        if target == "prometheus":
            tests = path.with_name(path.name.removesuffix(".yml") + ".test.yml")
            alerts.write(tests, alerts.render_prometheus_tests(rules, args.runbook_base, path.name))
            print(f"wrote {tests} (promtool test rules {tests})")
    return 0


def cmd_metrics_doc(args: argparse.Namespace) -> int:
    """`kdiag metrics doc`: docs/METRICS.md from the declared families and the collectors emitting them."""
    from kdiag.collectors.registry import discover
    from kdiag.core.outfile import write_output
    from kdiag.families.doc import metrics_markdown
    from kdiag.families.family import Family

    emitted_by: dict[str, list[str]] = {}
    for name, registration in sorted(discover().items()):
        for family in registration.families:
            if isinstance(family, Family):
                emitted_by.setdefault(family.name, []).append(name)
    write_output(args.output, metrics_markdown(emitted_by))
    if args.output != "-":
        print(f"wrote {args.output}")
    return 0


def cmd_fleet_key(args: argparse.Namespace) -> int:
    """`kdiag fleet key -o FILE`: a new fleet key."""
    from kdiag.kafka.fleet_key import write_key

    write_key(args.output)
    if args.output != "-":
        print(f"wrote {args.output} (mode 0600): copy it to every daemon of the cluster, owned by kdiag's user, mode "
              "0600, and set kafka.coordination_key_file to it", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every subcommand."""
    parser = argparse.ArgumentParser(prog="kdiag", description="Kafka host and broker diagnostics")
    parser.add_argument("--version", action="version", version=f"kdiag {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="collect, diagnose and serve /metrics and /api/diagnoses")
    _common(p)
    p.add_argument("--listen", help="address:port to serve on (default 0.0.0.0:9745; IPv6 as [::1]:9745)")
    p.add_argument("--web-config", help="exporter-toolkit web config file: TLS and basic auth for the endpoint")
    p.add_argument("--interval", type=_duration, help="collection interval (default 5s)")
    _kafka(p)
    _collectors(p)
    p.add_argument("--from", dest="from_", metavar="RECORDING", help="serve a recording, looping, as if live")
    p.add_argument("--no-discover", action="store_true",
                   help="do not fill unset Kafka settings from the broker process on this host")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("diagnose", help="print what is wrong, live or from a recording")
    _common(p)
    _kafka(p)
    _collectors(p)
    p.add_argument("--from", dest="from_", metavar="RECORDING", help="a recording directory or .tar.gz")
    p.add_argument("--format", choices=("text", "json", "html"), default="text")
    p.add_argument("-o", "--output", help="with --format html: the HTML file to write")
    p.add_argument("--duration", type=_duration, default=15.0, help="live: how long to sample (default 15s)")
    p.add_argument("--step", type=_interval, default=3.0, help="live: time between samples (default 3s)")
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("record", help="record /proc, /sys and Kafka snapshots for later diagnosis")
    _common(p)
    _kafka(p)
    _collectors(p)
    p.add_argument("-o", "--output", required=True, help="new directory, or a file ending in .tar.gz")
    p.add_argument("--duration", type=_duration, default=120.0, help="how long to record (default 120s)")
    p.add_argument("--interval", type=_interval, default=5.0, help="time between snapshots (default 5s)")
    p.set_defaults(func=cmd_record)

    rules = sub.add_parser("rules", help="check or list the rule catalog")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    for name, func, text in (("check", cmd_rules_check, "validate every rule; non-zero exit on any error"),
                             ("list", cmd_rules_list, "list the rules")):
        p = rules_sub.add_parser(name, help=text)
        _common(p)
        p.set_defaults(func=func)
    p = rules_sub.add_parser("export", help="generate Prometheus alerts, Alertmanager inhibitions and docs/RULES.md")
    _common(p)
    p.add_argument("--prometheus", action="store_true", help=f"alerting rules (default -o {alerts.DEFAULT_PROMETHEUS})")
    p.add_argument("--alertmanager", action="store_true",
                   help=f"example config with inhibitions (default -o {alerts.DEFAULT_ALERTMANAGER})")
    p.add_argument("--docs", action="store_true", help=f"the rule reference (default -o {alerts.DEFAULT_DOCS})")
    p.add_argument("-o", "--output", help="where to write (only with a single target)")
    p.add_argument("--runbook-base", default=alerts.RUNBOOK_BASE, help="URL of docs/RULES.md that runbook_url links into")
    p.set_defaults(func=cmd_rules_export)

    metrics = sub.add_parser("metrics", help="the metric families kdiag exports")
    metrics_sub = metrics.add_subparsers(dest="metrics_command", required=True)
    p = metrics_sub.add_parser("doc", help="write the metrics reference (every family: type, unit, labels, help)")
    p.add_argument("-o", "--output", default="docs/METRICS.md", help="where to write (default docs/METRICS.md; - for stdout)")
    p.set_defaults(func=cmd_metrics_doc)

    fleet = sub.add_parser("fleet", help="the daemons of one cluster: their shared coordination key")
    fleet_sub = fleet.add_subparsers(dest="fleet_command", required=True)
    p = fleet_sub.add_parser("key", help="write a new coordination key (give every daemon of the cluster a copy at "
                                         "kafka.coordination_key_file)")
    p.add_argument("-o", "--output", required=True, help="the new key file (mode 0600, never overwritten); - for stdout")
    p.set_defaults(func=cmd_fleet_key)

    from kdiag.tools.lab import cli as lab_cli

    lab_cli.add_parser(sub)
    from kdiag.tools.drill import cli as drill_cli

    drill_cli.add_parser(sub)
    from kdiag.tools.bench import cli as bench

    bench.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run one subcommand; errors print what to do and exit non-zero."""
    args = build_parser().parse_args(argv)
    logsafe.configure(logging.DEBUG if args.verbose else logging.INFO)
    # APScheduler logs every job run at INFO: once per cycle is noise, not news.
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        command: Callable[[argparse.Namespace], int] = args.func  # each subparser's set_defaults(func=...)
        return command(args)
    except KeyboardInterrupt as e:
        print("kdiag: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130
    except KdiagError as e:  # a bad setting or catalog, a recording, an output path kdiag will not write, ...
        print(f"kdiag: {printable_lines(e.report())}", file=sys.stderr)
        return e.exit_code
