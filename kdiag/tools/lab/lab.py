"""`kdiag lab`: a local Apache Kafka cluster (KRaft, or ZooKeeper for 2.x-3.x) run from Maven Central jars."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from kdiag.tools.lab import acls as lab_acls
from kdiag.tools.lab import containers as lab_containers
from kdiag.tools.lab import nodes as lab_nodes
from kdiag.tools.lab import security as lab_security
from kdiag.tools.lab import sizing as lab_sizing
from kdiag.tools.lab import versions as lab_versions
from kdiag.tools.lab import zookeeper as lab_zookeeper
from kdiag.kafka.jars import lab_dir
from kdiag.tools.lab.info import LabInfo, lab_json
from kdiag.tools.lab.jars import LabError, check_java, fetch_jars
from kdiag.tools.lab.layout import (
    DEFAULT_BASE_PORT,
    KAFKA_VERSION,
    jmx_url,
    new_cluster_id,
    ports,
    server_properties,
    zookeeper_port,
)


def read_lab(dir: str | os.PathLike[str] | None = None) -> LabInfo | None:
    """Return lab.json of the lab in DIR if at least one of its nodes is running, else None."""
    d = lab_dir(dir)
    info = lab_json(d)
    if not info:
        return None
    live = lab_nodes.pids(d, info)
    if not any(live.values()):
        return None
    info["pids"] = {str(n): pid for n, pid in live.items() if pid}
    return info


def lab_config(dir: str | os.PathLike[str] | None = None) -> Path:
    """Return DIR/kdiag.yaml, writing it first for a lab started before `lab up` wrote one."""
    d = lab_dir(dir)
    info = lab_json(d)
    if info is None:
        raise LabError(f"no lab in {d}: run `kdiag lab up`")
    if not (d / "kdiag.yaml").exists():
        lab_security.write_kdiag_yaml(d, info)
    return d / "kdiag.yaml"


def _remove_data(d: Path) -> None:
    """Delete the nodes' storage and the secrets formatted into it."""
    for node_dir in d.glob("node-*"):
        shutil.rmtree(node_dir)
    shutil.rmtree(lab_zookeeper.zk_dir(d), ignore_errors=True)
    shutil.rmtree(lab_security.secrets_dir(d), ignore_errors=True)


def _log_head(path: Path, limit: int = 1_000_000) -> str:
    """The start of a node's log, where the cause of a failed startup is (its tail shows only the shutdown)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def mode_of(info: LabInfo) -> str:
    """The lab's mode: kraft, or zookeeper (labs written before modes were KRaft)."""
    return info.get("mode", "kraft")


def up(dir: str | os.PathLike[str] | None = None, brokers: int = 1, base_port: int | None = None,
       kafka_version: str | None = None, timeout: float = 180, security: str = "none", mode: str | None = None,
       jvm_opts: str | None = None, containers: dict[str, float] | None = None, partitions: int = 0,
       groups: int = 0) -> LabInfo:
    """Start (or reuse) the lab in DIR, its brokers sized for `partitions` and `groups` when given (lab/sizing.py),
    write DIR/kdiag.yaml and return its lab.json contents; with containers ({"memory": bytes, "cpus": cores}) each
    broker runs as a container under those limits."""
    d = lab_dir(dir)
    old = lab_json(d)
    live = lab_nodes.pids(d, old) if old else {}
    base = base_port or (old["base_port"] if old else DEFAULT_BASE_PORT)
    version = kafka_version or (old["kafka_version"] if old else KAFKA_VERSION)
    mode = mode or (mode_of(old) if old and old["kafka_version"] == version else lab_versions.default_mode(version))
    lab_versions.check_mode(version, mode)
    lab_versions.check_security(version, mode, security)
    opts = lab_nodes.jvm_opts(jvm_opts)
    if containers:
        lab_containers.check_tools()
        if security != "none" or mode != "kraft":
            raise LabError("--containers runs KRaft brokers with PLAINTEXT listeners only", 2)
    sized = lab_sizing.size(partitions, groups, brokers) if partitions or groups else None
    xmx = lab_nodes.heap() if os.environ.get("KDIAG_LAB_HEAP") or not sized else f"-Xmx{sized.heap_mb}m"
    if sized and sized.note:
        print(f"kdiag lab: the brokers want {sized.wanted_nofile} open files for {partitions} partitions and get "
              f"{sized.nofile}: {sized.note}", file=sys.stderr)
    wanted = (brokers, base, version, security, mode, opts, containers, xmx, sized.nofile if sized else None)
    # The running lab when it was started as wanted, None when there is none or it must be rebuilt.
    kept = old if (old and (old["brokers"], old["base_port"], old["kafka_version"], lab_security.security_of(old),
                            mode_of(old), old.get("jvm_opts", []), old.get("containers"), old.get("heap", xmx),
                            old.get("nofile")) == wanted
                   and (security == "none" or lab_security.secrets_dir(d).is_dir())) else None  # lost secrets: rebuild
    if kept and all(live.values()):
        lab_security.write_kdiag_yaml(d, kept)
        return kept
    check_java()
    if not kept:
        if old and any(live.values()):
            print("lab config changed: stopping the running lab", file=sys.stderr)
            lab_nodes.stop(d, old)
            _cleanup(old)
        lab_zookeeper.stop(d)
        # Storage formatted for another quorum, version, security mode or secrets cannot be reused.
        _remove_data(d)
    d.mkdir(parents=True, exist_ok=True)
    fetch_jars(d, version, lab_versions.scala_artifact(version), mode)
    lab_security.prepare(d, security)

    nodes = {str(n): ports(n, base) for n in range(1, brokers + 1)}
    to_start = [n for n in range(1, brokers + 1) if not (kept and live.get(n))]
    # A container's ports are in its own network namespace.
    busy = [] if containers else [p for n in to_start for p in nodes[str(n)].values() if not lab_nodes.port_free(p)]
    if mode == "zookeeper" and not lab_zookeeper.running(d) and not lab_nodes.port_free(zookeeper_port(base)):
        busy.append(zookeeper_port(base))
    if busy:
        raise LabError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 already in use; "
                       "choose another --base-port or stop what uses them")
    cluster_id = kept["cluster_id"] if kept else new_cluster_id()
    for n in range(1, brokers + 1):
        node_dir = d / f"node-{n}"
        node_dir.mkdir(exist_ok=True)
        if containers:
            lab_containers.prepare(node_dir, lab_containers.server_properties(n, brokers, base, nodes[str(n)]))
        lab_security.write_private(node_dir / "server.properties",
                                   lab_containers.host_properties(node_dir) if containers else
                                   server_properties(n, brokers, base, node_dir, security, mode))
    if mode == "zookeeper":
        lab_zookeeper.start(d, zookeeper_port(base))
        lab_security.add_zookeeper_users(d, security, zookeeper_port(base))
    else:
        unformatted = [n for n in to_start if not (d / f"node-{n}" / "data" / "meta.properties").exists()]
        if unformatted:
            lab_nodes.format_storage(d, unformatted, cluster_id, security)
            if containers:
                for n in unformatted:
                    lab_containers.prepare(d / f"node-{n}", lab_containers.server_properties(
                        n, brokers, base, nodes[str(n)]))  # StorageTool, root on the host, wrote root's files

    hosts = {str(n): lab_containers.address(base, n) if containers else "127.0.0.1" for n in range(1, brokers + 1)}
    info: LabInfo = {
        "brokers": brokers,
        "bootstrap": ",".join(f"{hosts[str(n)]}:{nodes[str(n)]['client']}" for n in range(1, brokers + 1)),
        "jmx": {k: jmx_url(v["jmx_port"]) for k, v in nodes.items()},
        "pids": {},
        "kafka_version": version,
        "base_port": base,
        "cluster_id": cluster_id,
        "dir": str(d),
        "nodes": nodes,
        "security": security,
        "mode": mode,
        "jvm_opts": opts,
        "heap": xmx,
    }
    if containers:
        info["containers"] = containers
        info["hosts"] = hosts
    if sized:
        info["nofile"] = sized.nofile
    if mode == "zookeeper":
        info["zookeeper"] = f"127.0.0.1:{zookeeper_port(base)}"
    for n in range(1, brokers + 1):
        pid = live.get(n) if kept else None
        info["pids"][str(n)] = pid or _start(d, info, n)
    (d / "lab.json").write_text(json.dumps(info, indent=2) + "\n")
    lab_security.write_kdiag_yaml(d, info)
    print(f"started {len(to_start)} node(s), waiting for the brokers ...", file=sys.stderr, flush=True)
    try:
        lab_nodes.wait_ready(d, info, timeout)
        if lab_security.sasl(security):
            lab_acls.grant(d, info)
    except LabError as e:
        lab_nodes.stop(d, info)
        _cleanup(info)
        lab_zookeeper.stop(d)
        logs = "".join(_log_head(d / f"node-{n}" / "server.log") for n in range(1, brokers + 1))
        raise lab_versions.explain_start_failure(version, e, logs) from None
    return info


def _start(d: Path, info: LabInfo, n: int) -> int:
    """Start node n, as a process or a container as the lab says; return its pid (a container's JMX endpoint in
    info names it)."""
    jmx_port = info["nodes"][str(n)]["jmx_port"]
    if "containers" in info:
        pid = lab_containers.start_node(d, n, info["base_port"], jmx_port, info["containers"],
                                        info.get("heap") or lab_nodes.heap(), info.get("jvm_opts", []))
        info["jmx"][str(n)] = f"{jmx_url(jmx_port)}@netns:{pid}"  # JMX answers in the container's namespace only
        return pid
    if "zookeeper" in info:
        lab_zookeeper.wait_unregistered(int(info["zookeeper"].rsplit(":", 1)[1]), n)
    return lab_nodes.start(d, n, jmx_port, lab_security.security_of(info), info.get("jvm_opts", []), info.get("heap"),
                           info.get("nofile"))


def _cleanup(info: LabInfo) -> None:
    """A container lab's cgroups and bridge removed once its nodes stopped."""
    if "containers" in info:
        lab_containers.cleanup(info["base_port"], info["brokers"])


@contextlib.contextmanager
def locked(d: Path) -> Iterator[None]:
    """Hold an exclusive lock on DIR so concurrent `up`/`down` calls run one after another."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _lab_with_node(d: Path, n: int) -> LabInfo:
    """lab.json of the lab in d; LabError when it has no node n."""
    info = lab_json(d)
    if not info or not 1 <= n <= info["brokers"]:
        raise LabError(f"no node {n} in the lab at {d}")
    return info


def stop_node(n: int, dir: str | os.PathLike[str] | None = None, timeout: float = 30) -> None:
    """Stop node n of the lab in DIR (a controlled shutdown when the others keep the quorum)."""
    d = lab_dir(dir)
    with locked(d):
        lab_nodes.stop(d, _lab_with_node(d, n), timeout, nodes=[n])


def start_node(n: int, dir: str | os.PathLike[str] | None = None, timeout: float = 180) -> LabInfo:
    """Start node n of the lab in DIR unless it runs, wait until every broker answers; return lab.json."""
    d = lab_dir(dir)
    with locked(d):
        info = _lab_with_node(d, n)
        if not lab_nodes.pids(d, info)[n]:
            info["pids"][str(n)] = _start(d, info, n)
            (d / "lab.json").write_text(json.dumps(info, indent=2) + "\n")
        lab_nodes.wait_ready(d, info, timeout)
    return info


def status(dir: str | os.PathLike[str] | None = None) -> tuple[LabInfo | None, dict[int, int | None]]:
    """Return lab.json of the lab in DIR (None if absent) and node id -> live pid (None if stopped)."""
    d = lab_dir(dir)
    info = lab_json(d)
    return info, lab_nodes.pids(d, info) if info else {}


def down(dir: str | os.PathLike[str] | None = None, purge: bool = False) -> bool:
    """Stop the lab in DIR, with purge also delete its data, secrets and kdiag.yaml; False if there is none."""
    d = lab_dir(dir)
    if not (d / "lab.json").exists():
        return False
    with locked(d):
        info = lab_json(d)
        if info:
            lab_nodes.stop(d, info)
            _cleanup(info)
        lab_zookeeper.stop(d)
        if purge:
            _remove_data(d)
            (d / "lab.json").unlink(missing_ok=True)
            (d / "kdiag.yaml").unlink(missing_ok=True)
    return True
