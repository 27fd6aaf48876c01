"""`kdiag lab up --containers`: each broker a container without a runtime: user, PID, mount, UTS and network
namespaces (unshare), a veth on the lab's bridge, uid 1001, its log dir bind-mounted at /var/lib/kafka/data, JMX
inside its namespace only, a cgroup with CPU and memory limits."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.jars import LABFILES, LabError, need

UID = 1001  # Strimzi's and Bitnami's; no passwd entry on the host
DATA, CONFIG, LIBS, LOGS, AGENT = "/var/lib/kafka/data", "/etc/kafka", "/opt/kafka/libs", "/var/log/kafka", "/opt/jmx"
MEMORY = 1536 * 2**20  # the default limit: the 512 MB heap, metaspace and room for page cache
CPUS = 1.0
AGENT_VERSION = "1.0.1"  # io.prometheus.jmx:jmx_prometheus_javaagent
AGENT_JAR = "jmx_prometheus_javaagent.jar"
TOOLS = ("unshare", "setpriv", "ip", "mount")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The container's first process: waits for the host to map its users and plug its veth, then mounts, names and
# addresses itself and becomes uid 1001 with no capabilities. $1 address, $2 hostname, then the mounts' host dirs and
# the file of the broker's arguments: kept off unshare's and this shell's command lines, which a host-side kdiag
# would otherwise take for root's brokers.
INIT = r"""
read _ || exit 1
set -e
mount -t proc proc /proc
mount --bind "$3" /var/lib/kafka/data
mount --bind "$4" /etc/kafka
mount --bind "$5" /var/log/kafka
mount --bind -o ro "$6" /opt/kafka/libs
[ -z "$7" ] || mount --bind -o ro "$7" /opt/jmx
hostname "$2"
ip link set lo up
ip link set eth0 up
ip addr add "$1/24" dev eth0
command="$8"
set --
while IFS= read -r arg; do set -- "$@" "$arg"; done < "$command"
exec setpriv --reuid 1001 --regid 1001 --clear-groups --inh-caps=-all --bounding-set=-all "$@" </dev/null
"""
# Starts "$@" in the background with its stdin on fd 3 (a background job's fd 0 is /dev/null), prints its pid and
# exits: the container's first process is left to PID 1, as a runtime leaves it. $1 is its log.
LAUNCH = 'log=$1; shift; exec 3<&0 </dev/null; "$@" <&3 3<&- >>"$log" 2>&1 & echo $!'


def check_tools() -> None:
    """LabError (exit 2) unless util-linux's unshare and setpriv and iproute2's ip are installed."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        raise LabError(f"{', '.join(missing)} not found: --containers needs util-linux and iproute2 "
                       "(Debian: apt-get install util-linux mount iproute2)", 2)
    if os.geteuid() != 0:
        raise LabError("--containers makes namespaces, a bridge and cgroups: run it as root", 2)


def subnet(base: int) -> str:
    """The lab's /24 (three octets), one per base port so two container labs never share a bridge."""
    return f"10.77.{(base // 10) % 250}"


def address(base: int, n: int) -> str:
    """Node n's address on the lab's bridge (the host's is .1)."""
    return f"{subnet(base)}.{n + 1}"


def bridge(base: int) -> str:
    return f"kdlb{base}"


def veth(base: int, n: int) -> str:
    """The host end of node n's veth pair (the container's end is eth0)."""
    return f"kdl{base}n{n}"


def container_id(base: int, n: int) -> str:
    """Node n's container id: 64 hex digits, as a runtime names its containers' cgroups."""
    return hashlib.sha256(f"kdiag-lab-{base}-node-{n}".encode()).hexdigest()


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy: {"": v2 path, "cpu": ..., "name=systemd": ...}."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, own = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            out[name] = own
    return out


def cgroup_dirs(base: int, n: int) -> dict[str, Path]:
    """Node n's cgroup per hierarchy, each docker/<id> under this process's own cgroup there, as Docker's cgroupfs
    driver names a container's: {"v2": dir} where v2 holds cpu and memory, else v1's cpu and memory dirs; plus
    "unified" (a hybrid host's v2) and "systemd" (name=systemd) where mounted, so every hierarchy names the container."""
    name = f"docker/{container_id(base, n)}"
    own = _own_cgroups()
    found: dict[str, Path] = {}
    for key, unified in (("v2", CGROUP_ROOT), ("unified", CGROUP_ROOT / "unified")):
        if (unified / "cgroup.procs").exists():
            found[key] = unified / own.get("", "/").lstrip("/") / name
            controllers = unified / "cgroup.controllers"
            if key == "v2" and {"cpu", "memory"} <= set(controllers.read_text().split()):
                return found
    found.pop("v2", None)
    for key, controller, sub in (("cpu", "cpu", "cpu"), ("memory", "memory", "memory"),
                                 ("systemd", "name=systemd", "systemd")):
        if controller in own and (CGROUP_ROOT / sub / "cgroup.procs").exists():
            found[key] = CGROUP_ROOT / sub / own[controller].lstrip("/") / name
    if not {"cpu", "memory"} <= set(found):
        raise LabError("no cgroup cpu and memory controllers under /sys/fs/cgroup to limit the containers with", 2)
    return found


def make_cgroup(base: int, n: int, memory: int, cpus: float, period_us: int = 100000) -> list[Path]:
    """Node n's cgroup(s) with its memory and CPU limits; the directories a process must join."""
    dirs = cgroup_dirs(base, n)
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    if "v2" in dirs:
        for parent in (dirs["v2"].parent.parent, dirs["v2"].parent):  # the docker dir's and its own
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            for c in ("cpu", "memory"):
                if c not in enabled:
                    (parent / "cgroup.subtree_control").write_text(f"+{c}")
        (dirs["v2"] / "cpu.max").write_text(f"{int(cpus * period_us)} {period_us}")
    else:
        (dirs["cpu"] / "cpu.cfs_period_us").write_text(str(period_us))
        (dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(int(cpus * period_us)))
    set_memory_limit(base, n, memory)
    return list(dirs.values())


def set_memory_limit(base: int, n: int, limit: int) -> None:
    """Node n's memory limit (v2 memory.max, v1 memory.limit_in_bytes), as a pod's resources.limits.memory sets it."""
    dirs = cgroup_dirs(base, n)
    if "v2" in dirs:
        (dirs["v2"] / "memory.max").write_text(str(limit))
    else:
        (dirs["memory"] / "memory.limit_in_bytes").write_text(str(limit))


def memory_limit(base: int, n: int) -> int:
    """Node n's memory limit in bytes now."""
    dirs = cgroup_dirs(base, n)
    if "v2" in dirs:
        return int((dirs["v2"] / "memory.max").read_text())
    return int((dirs["memory"] / "memory.limit_in_bytes").read_text())


def remove_cgroups(base: int, n: int, timeout: float = 10) -> None:
    """Remove node n's cgroups once the kernel has moved its last task out."""
    deadline = time.monotonic() + timeout
    for d in cgroup_dirs(base, n).values():
        while d.exists():
            try:
                d.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise LabError(f"cgroup {d} still busy after {timeout:.0f}s") from None
                time.sleep(0.2)
        with contextlib.suppress(OSError):  # the docker dir, once no container of any lab is left in it
            d.parent.rmdir()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], check=False, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {proc.stderr.strip()[:300]}")
    return proc


def ensure_bridge(base: int) -> None:
    """The lab's bridge with the host's address on it, made unless it exists."""
    name = bridge(base)
    if _ip("link", "show", name, check=False).returncode == 0:
        return
    _ip("link", "add", name, "type", "bridge")
    _ip("addr", "add", f"{subnet(base)}.1/24", "dev", name)
    _ip("link", "set", name, "up")


def remove_bridge(base: int) -> None:
    """Delete the lab's bridge (the veths went with their network namespaces)."""
    _ip("link", "del", bridge(base), check=False)


def server_properties(n: int, brokers: int, base: int, ports: dict[str, int]) -> str:
    """server.properties of container node n: KRaft broker and controller on its own address, data at DATA."""
    voters = ",".join(f"{i}@{address(base, i)}:{ports['controller'] + 10 * (i - n)}" for i in range(1, brokers + 1))
    addr = address(base, n)
    rf, isr = (1, 1) if brokers == 1 else (3, 2)
    return "\n".join([
        "process.roles=broker,controller", f"node.id={n}", f"controller.quorum.voters={voters}",
        f"listeners=PLAINTEXT://{addr}:{ports['client']},CONTROLLER://{addr}:{ports['controller']}",
        f"advertised.listeners=PLAINTEXT://{addr}:{ports['client']}", "inter.broker.listener.name=PLAINTEXT",
        "controller.listener.names=CONTROLLER", "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={DATA}", "group.initial.rebalance.delay.ms=0",
        f"offsets.topic.replication.factor={rf}", f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={isr}", f"share.coordinator.state.topic.replication.factor={rf}",
        f"share.coordinator.state.topic.min.isr={isr}",
    ]) + "\n"


def prepare(node_dir: Path, props: str) -> None:
    """The node's host directories, owned by the container's uid: data (its log dir), config and logs."""
    for sub in ("data", "config", "logs"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    (node_dir / "config" / "server.properties").write_text(props)
    shutil.copyfile(LABFILES / "log4j2.properties", node_dir / "config" / "log4j2.properties")
    for sub in ("data", "config", "logs"):
        for path in [node_dir / sub, *(node_dir / sub).rglob("*")]:
            os.chown(path, UID, UID, follow_symlinks=False)
    for mountpoint in (DATA, CONFIG, LOGS, LIBS, AGENT):
        Path(mountpoint).mkdir(parents=True, exist_ok=True)  # empty on the host: bind mounts need a target


def host_properties(node_dir: Path) -> str:
    """The node's server.properties with its host data dir, for StorageTool run on the host."""
    text = (node_dir / "config" / "server.properties").read_text()
    return text.replace(f"log.dirs={DATA}", f"log.dirs={node_dir / 'data'}")


def exporter_port(jmx_port: int) -> int:
    """The jmx_exporter agent's HTTP port on the container's address: the port below JMX's."""
    return jmx_port - 1


def exporter_url(info: LabInfo, n: int) -> str:
    """Node n's jmx_exporter agent endpoint, reachable from the host over the lab's bridge."""
    return f"http://{address(info['base_port'], n)}:{exporter_port(info['nodes'][str(n)]['jmx_port'])}/metrics"


def fetch_agent(d: Path) -> Path:
    """The Prometheus jmx_exporter java agent (from Maven Central) and its config in DIR/agent, fetched unless there."""
    agent = d / "agent"
    if not (agent / AGENT_JAR).is_file():
        need("mvn")
        proc = subprocess.run(["mvn", "-B", "-q", "dependency:copy",
                               f"-Dartifact=io.prometheus.jmx:jmx_prometheus_javaagent:{AGENT_VERSION}",
                               f"-DoutputDirectory={agent}", "-Dmdep.stripVersion=true"],
                              check=False, capture_output=True, text=True, cwd=d)
        if proc.returncode != 0 or not (agent / AGENT_JAR).is_file():
            raise LabError(f"fetching jmx_prometheus_javaagent {AGENT_VERSION} failed:\n{proc.stdout[-2000:]}")
    # Every MBean in the agent's default names (domain_firstvalue_attribute, the other keys as labels).
    (agent / "config.yaml").write_text("rules:\n  - pattern: \".*\"\n")
    return agent


def java_command(node_dir: Path, jmx_port: int, heap: str, extra_opts: Sequence[str], agent: bool = False) -> list[str]:
    """The broker's command line as the container runs it: its paths the container's, JMX on its own loopback; with
    agent, the jmx_exporter agent serving the MBeans over HTTP on the container's address."""
    javaagent = f"-javaagent:{AGENT}/{AGENT_JAR}={exporter_port(jmx_port)}:{AGENT}/config.yaml"
    return [
        "java", heap, *extra_opts, "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={CONFIG}/log4j2.properties", f"-Dkafka.logs.dir={LOGS}",
        f"-Dkdiag.lab.node={node_dir}",  # the host dir lab.nodes checks a pid's command line for
        "-Dcom.sun.management.jmxremote=true", f"-Dcom.sun.management.jmxremote.port={jmx_port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={jmx_port}", "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
        "-Djava.rmi.server.hostname=127.0.0.1", *([javaagent] if agent else []),
        "-cp", f"{LIBS}/*", "kafka.Kafka", f"{CONFIG}/server.properties",
    ]


def _child(pid: int, timeout: float = 10) -> int:
    """The one child unshare --fork made: the container's PID 1, the broker once it execs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise LabError(f"unshare (pid {pid}) made no container process in {timeout:.0f}s")


def start(d: Path, n: int, base: int, command: list[str], cgroups: list[Path], agent_dir: Path | None = None) -> int:
    """Start node n as a container; return the broker's pid on the host."""
    node_dir = d / f"node-{n}"
    join = "".join(f'echo $$ > "{c}/cgroup.procs"; ' for c in cgroups)
    unshare = ["unshare", "--user", "--pid", "--mount", "--uts", "--net", "--ipc", "--fork", "--kill-child",
               "sh", "-c", INIT, "init", address(base, n), f"kafka-{n}", str(node_dir / "data"),
               str(node_dir / "config"), str(node_dir / "logs"), str(d / "libs"), str(agent_dir or ""),
               str(node_dir / "command")]
    # Root's alone: the container's root runs what it says, before it drops to uid 1001.
    fd = os.open(node_dir / "command", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(arg + "\n" for arg in command))
    # Daemonized as a runtime's container is: a new session whose first process exits, so PID 1 is its parent.
    with open(node_dir / "stdout.log", "ab") as out:
        launcher = subprocess.Popen(["sh", "-c", LAUNCH, "launch", str(node_dir / "stdout.log"), "sh", "-c",
                                     join + 'exec "$@"', "join", *unshare], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=out, start_new_session=True, cwd="/")
    assert launcher.stdin is not None and launcher.stdout is not None  # started with PIPEs
    pid = 0
    try:
        pid = int(launcher.stdout.readline() or 0)
        launcher.stdout.close()
        launcher.wait(timeout=10)
        if not pid:
            raise LabError(f"node {n}'s container did not start: see {node_dir / 'stdout.log'}")
        child = _child(pid)
        # Container root is host root (no remapping, as under Docker by default); 1001 is 1001 on both sides.
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{pid}/{name}").write_text(f"0 0 1\n{UID} {UID} 1\n")
        _ip("link", "del", veth(base, n), check=False)
        _ip("link", "add", veth(base, n), "type", "veth", "peer", "name", "eth0", "netns", str(child))
        _ip("link", "set", veth(base, n), "master", bridge(base), "up")
        launcher.stdin.write(b"go\n")
        launcher.stdin.close()
    except (LabError, OSError, ValueError, subprocess.TimeoutExpired):
        launcher.kill()
        launcher.wait()
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        raise
    (node_dir / "pid").write_text(f"{child}\n")
    return child


def runs_agent(limits: dict[str, float], n: int) -> bool:
    """Whether node n runs the jmx_exporter agent: limits["jmx_exporter"] set, on every node or the first
    limits["jmx_exporter_nodes"] (a lab reading its brokers both ways at once)."""
    return bool(limits.get("jmx_exporter")) and n <= limits.get("jmx_exporter_nodes", n)


def start_node(d: Path, n: int, base: int, jmx_port: int, limits: dict[str, float], heap: str,
               extra_opts: Sequence[str]) -> int:
    """Node n's cgroup and container (the agent too when runs_agent), the lab's bridge made first; return the
    broker's pid on the host."""
    ensure_bridge(base)
    cgroups = make_cgroup(base, n, int(limits["memory"]), limits["cpus"])
    agent = fetch_agent(d) if runs_agent(limits, n) else None
    return start(d, n, base, java_command(d / f"node-{n}", jmx_port, heap, extra_opts, agent is not None), cgroups,
                 agent)


def cleanup(base: int, brokers: int) -> None:
    """After the nodes stopped: their cgroups and the lab's bridge removed."""
    for n in range(1, brokers + 1):
        remove_cgroups(base, n)
    remove_bridge(base)
