"""`kdiag lab up|status|down`: the command line of kdiag/tools/lab/lab.py.

`up` and `status` print, on stdout, lines meant for parsing:
    lab: running brokers=N security=MODE kafka=V mode=kraft|zookeeper dir=DIR
    bootstrap: 127.0.0.1:9092[,...]
    zookeeper: 127.0.0.1:P running|stopped (ZooKeeper mode only)
    broker: N HOST:CLIENT controller=HOST:CTRL (HOST 127.0.0.1, or a --containers node's own address)
    jmx: N service:jmx:rmi:///jndi/rmi://127.0.0.1:P/jmxrmi[@netns:PID] (a --containers node's in its namespace)
    exporter: N http://HOST:P/metrics (--jmx-exporter: the node's jmx_exporter agent)
    sizing: heap=-XmxSIZE nofile=N (labs started with --partitions or --groups)
(`status` adds "node: N running pid=P" or "node: N stopped" lines).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kdiag.kafka.jars import lab_dir
from kdiag.tools.lab import containers as lab_containers
from kdiag.tools.lab import lab
from kdiag.tools.lab import security as lab_security
from kdiag.tools.lab import versions as lab_versions
from kdiag.tools.lab import zookeeper as lab_zookeeper
from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.jars import LabError
from kdiag.tools.lab.layout import DEFAULT_BASE_PORT, KAFKA_VERSION

# Node N listens on base + 10 * (N - 1) and its JMX 907 above: nine nodes stay clear of each other's ports.
MAX_BROKERS = 9


def _info_lines(info: LabInfo, state: str, pids: dict[int, int | None] | None = None) -> list[str]:
    """Return the parseable description of a lab; with pids, per-node running/stopped lines too."""
    containers = " containers=yes" if "containers" in info else ""
    lines = [
        f"lab: {state} brokers={info['brokers']} security={lab_security.security_of(info)} "
        f"kafka={info['kafka_version']} mode={lab.mode_of(info)}{containers} dir={info['dir']}",
        f"bootstrap: {info['bootstrap']}",
    ]
    if "zookeeper" in info:
        zk_state = "running" if lab_zookeeper.running(lab_dir(info["dir"])) else "stopped"
        lines.append(f"zookeeper: {info['zookeeper']} {zk_state}")
    for n in range(1, info["brokers"] + 1):
        node = info["nodes"][str(n)]
        host = info.get("hosts", {}).get(str(n), "127.0.0.1")
        controller = "" if "zookeeper" in info else f" controller={host}:{node['controller']}"
        lines.append(f"broker: {n} {host}:{node['client']}{controller}")
    for n in range(1, info["brokers"] + 1):
        lines.append(f"jmx: {n} {info['jmx'][str(n)]}")
    for n in range(1, info["brokers"] + 1):
        if lab_containers.runs_agent(info.get("containers", {}), n):
            lines.append(f"exporter: {n} {lab_containers.exporter_url(info, n)}")
    if "nofile" in info:
        lines.append(f"sizing: heap={info.get('heap', '')} nofile={info['nofile']}")
    if pids is not None:
        for n, pid in pids.items():
            lines.append(f"node: {n} running pid={pid}" if pid else f"node: {n} stopped")
    return lines


def _run(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except LabError as e:
            print(f"kdiag lab: {e}", file=sys.stderr)
            return e.exit_code
    return wrapped


@_run
def cmd_up(args: argparse.Namespace) -> int:
    """Handle `kdiag lab up`."""
    with lab.locked(lab_dir(args.dir)):
        containers = ({"memory": args.container_memory * 2**20, "cpus": args.container_cpus,
                       "jmx_exporter": float(args.jmx_exporter)} if args.containers else None)
        info = lab.up(args.dir, args.brokers, args.base_port, args.kafka_version, args.timeout, args.security,
                      args.mode, args.jvm_opts, containers, args.partitions, args.groups)
    print("\n".join(_info_lines(info, "running")), flush=True)
    return 0


@_run
def cmd_status(args: argparse.Namespace) -> int:
    """Handle `kdiag lab status`."""
    info, pids = lab.status(args.dir)
    if not info:
        print(f"lab: absent dir={lab_dir(args.dir)}")
        return 1
    state = "running" if all(pids.values()) else "degraded" if any(pids.values()) else "stopped"
    print("\n".join(_info_lines(info, state, pids)))
    return 0 if all(pids.values()) else 1


@_run
def cmd_down(args: argparse.Namespace) -> int:
    """Handle `kdiag lab down`."""
    d = lab_dir(args.dir)
    if not lab.down(args.dir, args.purge):
        print(f"lab: absent dir={d}")
        return 0
    print(f"lab: stopped dir={d}")
    if args.purge:
        print(f"lab: purged data, secrets and kdiag.yaml under {d}")
    return 0


def _count(text: str) -> int:
    """A --partitions or --groups value: a count from 0 to 10,000,000."""
    if not text.isdigit() or int(text) > 10_000_000:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a count from 0 to 10000000")
    return int(text)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `lab` subcommand (up, status, down) on an argparse subparsers object."""
    lab_parser = subparsers.add_parser("lab", help="run a local Kafka cluster (KRaft or ZooKeeper) for trying kdiag")
    sub = lab_parser.add_subparsers(dest="lab_command", required=True)
    dir_help = "lab directory (default: $KDIAG_LAB_DIR or ~/.cache/kdiag/lab)"

    p = sub.add_parser("up", help="start the lab (no-op if already running)")
    p.add_argument("--brokers", type=int, choices=range(1, MAX_BROKERS + 1), default=1, metavar="N",
                   help=f"brokers, 1 to {MAX_BROKERS} (each a KRaft voter too); more spread --partitions thinner")
    p.add_argument("--dir", help=dir_help)
    p.add_argument("--kafka-version", help=f"Kafka version from Maven Central (default {KAFKA_VERSION})")
    p.add_argument("--mode", choices=lab_versions.MODES,
                   help="kraft (default from 3.3, the only mode of 4.x) or zookeeper (2.x and 3.x; one ZooKeeper "
                        "node on base-port+2)")
    p.add_argument("--jvm-opts", help="extra JVM options for the brokers, e.g. '-XX:+UseParallelGC' "
                                      "(default $KDIAG_LAB_JVM_OPTS)")
    p.add_argument("--base-port", type=int,
                   help=f"client port of node 1; node N uses base+10*(N-1) (default {DEFAULT_BASE_PORT})")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for the brokers")
    p.add_argument("--partitions", type=_count, default=0,
                   help="partitions the lab will hold (replication 1, spread over the brokers): sizes the brokers' "
                        "heap and open files limit (raised when it can be, said when it cannot)")
    p.add_argument("--groups", type=_count, default=0, help="consumer groups the lab will hold: sizes the heap")
    p.add_argument("--security", choices=lab_security.MODES, default="none",
                   help="client listener: PLAINTEXT, TLS, SCRAM-SHA-512, or SCRAM over TLS; secured modes also "
                        "guard JMX with a password (TLS too in ssl and sasl_ssl); see DIR/kdiag.yaml")
    p.add_argument("--containers", action="store_true",
                   help="run each broker as a container (user, PID, mount, UTS and network namespaces, uid 1001, a "
                        "veth on a bridge of its own, its log dir bind-mounted at /var/lib/kafka/data, a cgroup with "
                        "CPU and memory limits); needs root, util-linux and iproute2")
    p.add_argument("--container-memory", type=int, default=lab_containers.MEMORY // 2**20, metavar="MIB",
                   help="each container's memory limit in MiB (default %(default)s)")
    p.add_argument("--container-cpus", type=float, default=lab_containers.CPUS, metavar="CORES",
                   help="each container's CPU limit in cores (default %(default)s)")
    p.add_argument("--jmx-exporter", action="store_true",
                   help="with --containers: each broker also runs the Prometheus jmx_exporter java agent (from Maven "
                        "Central), serving its MBeans over HTTP on its address at the port below its JMX port")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("status", help="show whether each node runs; exit 1 unless all do")
    p.add_argument("--dir", help=dir_help)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("down", help="stop the lab")
    p.add_argument("--dir", help=dir_help)
    p.add_argument("--purge", action="store_true", help="also delete the node data, logs, secrets and kdiag.yaml")
    p.set_defaults(func=cmd_down)
