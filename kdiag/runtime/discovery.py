"""The Kafka broker on this host, as its process tells: node id, listeners, log dirs, JMX port and jars.

Everything is read through a Root (/proc/PID/cmdline, cwd, and the broker's files under /proc/PID/root), so a
container with the host's /proc, and a fixture tree, read it the same way. `discover` fills the Kafka settings
the config left unset; what the config or flags set always wins.

Any local user can start a process that looks like a broker: only those kdiag.core.brokertrust trusts are read, and
their classpath runs JmxTool only when kdiag.core.trust finds it root's or the broker's and writable by no one else.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kdiag.core.procfs import BROKER_MAIN_CLASS, parse_cmdline, process_uids
from kdiag.runtime.brokerconfig import (JMX, Listener, agent_config_problem, env_settings, jmx_endpoint,
                                       jmx_exporter_agent, jvm_options, kafka_settings, parse_listeners,
                                       parse_properties)
from kdiag.core import yamlsafe
from kdiag.core.safeio import read_in_root, read_regular
from kdiag.config.settings import Config
from kdiag.core.root import Root
from kdiag.core.brokertrust import BrokerTrust
from kdiag.core.mountinfo import host_paths, place
from kdiag.core.trust import why_untrusted_classpath

log = logging.getLogger(__name__)

MAX_PROPERTIES_BYTES = 1 << 20
ENVIRONMENT = "its KAFKA_* environment"  # where the settings came from when no properties file could be read


@dataclass
class Broker:
    """What one broker process says about itself; `problems` says what could not be used and why."""

    pid: int
    refused: str = ""  # why nothing of this process is used (the trust rule refused it); then nothing else is read
    properties_path: str = ""
    node_id: int | None = None
    node_id_source: str = ""  # where node_id was read: node.id or broker.id in server.properties, or meta.properties
    cluster_id: str = ""  # cluster.id in its first log dir's meta.properties ("" before it is formatted or unreadable)
    zookeeper: bool = False  # ZooKeeper mode (zookeeper.connect set, no process.roles): a 2.x-3.x broker
    listeners: list[Listener] = field(default_factory=list)  # client listeners (controller listeners left out)
    ports: set[int] = field(default_factory=set)  # every port it listens on, controller ports included
    log_dirs: list[str] = field(default_factory=list)
    jmx: str = ""  # host:port, "@netns:PID" after it when the process has a network namespace of its own
    jmx_auth: bool = False  # the JMX port wants a password
    jmx_ssl: bool = False  # the JMX port speaks TLS
    jmx_exporter: str = ""  # its jmx_exporter agent's URL when kdiag can map what it serves; "@netns:PID" as jmx
    classpath: str = ""
    owners: frozenset[int] = frozenset({0})  # whose files of its kdiag may run: root's and its own uid's
    rootfs: str = ""  # /proc/PID/root when it runs in another mount namespace than kdiag: its files are there
    controller_only: bool = False
    problems: list[str] = field(default_factory=list)


def read_broker(root: Root, pid: int, argv: list[str]) -> Broker:
    """One broker process: its settings read from its own command line and files."""
    try:
        cwd = root.readlink("proc", f"{pid}/cwd")
    except OSError:
        cwd = "/"

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(cwd, path))

    def read(path: str) -> str:
        return host_file(root, pid, absolute(path))

    props, classpath, args = jvm_options(argv)
    problems: list[str] = []
    try:
        path, settings = kafka_settings(args, read)
        properties_path = absolute(path)
    except (OSError, ValueError) as e:
        settings, properties_path = environment(root, pid), ENVIRONMENT
        if not settings:
            problems.append(f"cannot read its server.properties ({e})")
            properties_path = ""
    zookeeper = bool(settings.get("zookeeper.connect", "").strip()) and "process.roles" not in settings
    log_dirs: list[str] = []
    if settings:
        dirs = settings.get("log.dirs") or settings.get("log.dir") or "/tmp/kafka-logs"
        log_dirs = [absolute(d.strip()) for d in dirs.split(",") if d.strip()]
    node_id, node_id_source = _read_node_id(settings, properties_path, zookeeper, log_dirs, read, problems)
    roles = {r.strip() for r in settings.get("process.roles", "broker").split(",")}
    listeners, ports, listener_problems = parse_listeners(settings)
    problems += listener_problems
    jmx, jmx_auth, jmx_ssl = "", False, False
    try:
        jmx, jmx_auth, jmx_ssl = jmx_endpoint(props, read)
    except OSError as e:
        problems.append(f"cannot read its JMX config file ({e.strerror or e})")
    exporter = _exporter_url(argv, read, problems)
    cluster_id = _cluster_id(log_dirs, read)
    # kafka-run-class.sh builds it from its own path (bin/../libs/x.jar): relative entries are the broker's cwd's.
    return Broker(pid, properties_path=properties_path, node_id=node_id, node_id_source=node_id_source,
                  cluster_id=cluster_id, zookeeper=zookeeper, listeners=listeners, ports=ports, log_dirs=log_dirs,
                  jmx=jmx, jmx_auth=jmx_auth,
                  jmx_ssl=jmx_ssl, jmx_exporter=exporter, classpath=":".join(absolute(e) for e in classpath.split(":") if e),
                  controller_only="broker" not in roles, problems=problems)


def _cluster_id(log_dirs: list[str], read: Callable[[str], str]) -> str:
    """cluster.id in the first log dir's meta.properties when it looks like one (a UUID's base64 or a name)."""
    try:
        value = parse_properties(read(os.path.join(log_dirs[0], "meta.properties"))).get("cluster.id", "").strip()
    except (IndexError, OSError, ValueError):
        return ""
    return value if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", value) else ""


def _exporter_url(argv: list[str], read: Callable[[str], str], problems: list[str]) -> str:
    """The URL of the process's jmx_exporter agent when its config keeps the names kdiag maps, else ""."""
    agent = jmx_exporter_agent(argv)
    if agent is None:
        return ""
    try:
        problem = agent_config_problem(yamlsafe.parse(read(agent.config), agent.config))
    except OSError as e:
        problem = f"cannot read its config ({e.strerror or 'error'})"
    except yamlsafe.YamlError as e:  # neither its path nor its text is shown: a file that may hold its password
        problem = f"its config is not YAML kdiag reads (line {e.line})"
    except ValueError:
        problem = f"its config is larger than {MAX_PROPERTIES_BYTES} bytes"
    if problem:
        problems.append(f"its jmx_exporter agent (port {agent.port}) is not read: {problem}")
        return ""
    return f"http://{agent.host}:{agent.port}/metrics"


def _read_node_id(settings: dict[str, str], properties_path: str, zookeeper: bool, log_dirs: list[str], read: Callable[[str], str],
                  problems: list[str]) -> tuple[int | None, str]:
    """node.id (KRaft) or broker.id (ZooKeeper), and where it was read; a ZooKeeper broker without one (or -1) got an
    id generated at its first start (broker.id.generation.enable), which its log dirs' meta.properties keep."""
    key = "node.id" if "node.id" in settings else "broker.id"
    value = settings.get(key, "").strip()
    where = f"{key} in {properties_path}"
    if value in ("", "-1") and zookeeper and log_dirs:
        meta = os.path.join(log_dirs[0], "meta.properties")
        try:
            value, where = parse_properties(read(meta)).get("broker.id", "").strip(), f"broker.id in {meta} (generated)"
        except (OSError, ValueError):
            value = ""
    if value.isdigit():
        return int(value), where
    if value not in ("", "-1"):
        problems.append(f"{key} is not a node id (an integer from 0)")
    return None, ""


def environment(root: Root, pid: int) -> dict[str, str]:
    """The settings a container image takes from the process's KAFKA_* environment; {} in a recording (it never holds
    an environment: its values may be secrets) or when it cannot be read."""
    if type(root) is not Root:
        return {}
    try:
        # Read here, not through the Root: a recording's TeeRoot would copy every variable.
        data = read_regular(str(root.proc / f"{pid}/environ"), MAX_PROPERTIES_BYTES)
    except OSError:
        return {}
    return env_settings(data.decode("utf-8", errors="replace"))


def host_file(root: Root, pid: int, path: str) -> str:
    """A file as the process sees it (PATH inside /proc/PID/root), else at PATH on this live host; at most 1 MiB."""
    if type(root) is not Root:  # a recording: its reader checks what it opens, and holds only what it recorded
        text = root.read_proc(f"{pid}/root{path}")
        if len(text) > MAX_PROPERTIES_BYTES:
            raise ValueError(f"{path} is larger than {MAX_PROPERTIES_BYTES} bytes")
        return text
    try:
        # Inside its root: a container's absolute link (/etc/kafka/x -> /etc/shadow) names its own file, not ours.
        data = read_in_root(str(root.proc / f"{pid}/root"), path, MAX_PROPERTIES_BYTES)
        return data.decode("utf-8", errors="replace")
    except PermissionError:  # /proc/PID/root needs ptrace access to the process; the plain path may do
        return read_text(path)


def read_text(path: str) -> str:
    """A regular file's text, at most 1 MiB: any local user's "broker" may name a FIFO or a device, never opened."""
    return read_regular(path, MAX_PROPERTIES_BYTES).decode("utf-8", errors="replace")


def find_brokers(root: Root, trust: BrokerTrust | None = None) -> list[Broker]:
    """Every Kafka broker process under the root's /proc (java ... kafka.Kafka server.properties); with a trust rule,
    those it refuses come back `refused`, nothing of them read."""
    found = {}
    for entry in root.listdir("proc", ""):
        if not entry.isdigit():
            continue
        try:
            argv = parse_cmdline(root.read_proc(f"{entry}/cmdline"))
        except OSError:
            continue
        if BROKER_MAIN_CLASS in argv and "java" in argv[0].rsplit("/", 1)[-1]:
            found[int(entry)] = argv
    verdicts = trust.judge_all(root, found) if trust is not None else {}
    brokers = []
    for pid, argv in found.items():
        verdict = verdicts.get(pid)
        if verdict is not None and not verdict.trusted:
            brokers.append(Broker(pid, refused=verdict.why))
            continue
        try:
            owners = frozenset({0, *process_uids(root, pid)})
        except (OSError, ValueError):
            owners = frozenset({0})
        broker = read_broker(root, pid, argv)
        if _other_namespace(root, pid, "net"):  # its JMX and agent ports are in its namespace: reached there
            broker = dataclasses.replace(broker, jmx=broker.jmx and f"{broker.jmx}@netns:{pid}",
                                         jmx_exporter=broker.jmx_exporter and f"{broker.jmx_exporter}@netns:{pid}")
        brokers.append(dataclasses.replace(broker, owners=owners, rootfs=_rootfs(root, pid)))
    return brokers


def _other_namespace(root: Root, pid: int, kind: str) -> bool:
    """Whether the process's namespace of that kind (mnt, net) is known not to be kdiag's."""
    try:
        return root.readlink("proc", f"{pid}/ns/{kind}") != root.readlink("proc", f"self/ns/{kind}")
    except OSError:
        return False


def _rootfs(root: Root, pid: int) -> str:
    """/proc/PID/root when the process's mount namespace is not kdiag's, else "" (the same, or unknown)."""
    return f"{root.proc}/{pid}/root" if _other_namespace(root, pid, "mnt") else ""


def _host_classpath(root: Root, broker: Broker) -> str:
    """The broker's classpath on this host's mounts (a JVM takes no jar through /proc/PID/root) when this host mounts
    every entry and no one else can change them here either; else its entries inside /proc/PID/root."""
    entries = broker.classpath.split(":")
    if not broker.rootfs:
        return broker.classpath
    fallback = ":".join(broker.rootfs + e for e in entries)
    dirs = [e.removesuffix("/*") for e in entries]
    placed = place(root, broker.pid, dirs)
    if len(placed) != len(entries) or any(p.device for p in placed):
        return fallback
    mapped = ":".join(p.path + ("/*" if e.endswith("/*") else "") for p, e in zip(placed, entries, strict=True))
    return fallback if why_untrusted_classpath(mapped, broker.owners) else mapped


def choose(brokers: list[Broker], bootstrap: str, local_broker_id: int | None) -> tuple[list[Broker], str]:
    """The brokers of this host kdiag reads, or [] and why: config narrows (bootstrap ports, node id); with no
    narrowing every broker of the host, so long as they are of one cluster (their log dirs' cluster.id)."""
    found = [b for b in brokers if not b.controller_only]
    if not found:
        return [], "no Kafka broker process on this host: host collectors only, Kafka and the probe as configured"
    if bootstrap:
        ports = {int(p) for p in re.findall(r":(\d{1,5})(?:,|$)", bootstrap.replace(" ", ""))}
        found = [b for b in found if b.ports & ports]
        if not found:
            return [], "no broker process on this host listens on a port of kafka.bootstrap_servers: local broker unknown"
    if local_broker_id is not None:
        found = [b for b in found if b.node_id == local_broker_id]
        if not found:
            narrowed = " among those on kafka.bootstrap_servers' ports" if bootstrap else ""
            return [], f"no broker process on this host has node.id {local_broker_id}{narrowed}"
    if len({b.cluster_id for b in found}) > 1:
        which = ", ".join(f"pid {b.pid} node.id {b.node_id} cluster {b.cluster_id or 'unknown'} ({b.properties_path})"
                          for b in found)
        return [], (f"{len(found)} broker processes of different clusters on this host ({which}): set "
                    "kafka.bootstrap_servers (or kafka.local_broker_id) to say which are this host's")
    return found, ""


def _classpath_summary(classpath: str) -> str:
    entries = classpath.split(":")
    dirs = sorted({os.path.dirname(e) for e in entries})
    return f"{len(entries)} entries in {', '.join(dirs[:3])}{' ...' if len(dirs) > 3 else ''}"


def _merge(found: dict[str, tuple[Any, str, str]], more: dict[str, tuple[Any, str, str]]) -> None:
    """One broker's settings added to those of the brokers before it: addresses, endpoints and log dirs joined."""
    for key, (value, shown, source) in more.items():
        if key not in found or key in ("kafka.local_broker_id", "kafka.jmx_classpath"):  # any broker's jars do
            found.setdefault(key, (value, shown, source))
            continue
        old, old_shown, old_source = found[key]
        if isinstance(value, str) and value in old.split(","):
            continue  # a broker forking (or two processes of one) gives its address once
        joined = f"{old},{value}" if isinstance(value, str) else [*old, *(v for v in value if v not in old)]
        found[key] = (joined, f"{old_shown},{shown}", f"{old_source}; {source}")


def _found(config: Config, root: Root, broker: Broker) -> dict[str, tuple[Any, str, str]]:
    """The config items one broker process gives: config key -> (value, how it is shown, where it came from)."""
    kafka, where = config.kafka, broker.properties_path
    found: dict[str, tuple[Any, str, str]] = {}
    if broker.node_id is not None:
        found["kafka.local_broker_id"] = (broker.node_id, str(broker.node_id), broker.node_id_source)
    protocol = kafka.client_settings.protocol()
    usable = [li for li in broker.listeners if li.protocol == protocol]
    if usable and kafka.client_settings.secrets() and not kafka.bootstrap_servers:
        # Any local user can start a process that looks like a broker: credentials go only where the config says.
        log.warning("broker discovery: kafka.client holds credentials: set kafka.bootstrap_servers (the broker's: %s) "
                    "rather than send them to a discovered address", usable[0].address)
    elif usable:
        found["kafka.bootstrap_servers"] = (usable[0].address, usable[0].address, f"listener {usable[0].name} in {where}")
    elif broker.listeners and not kafka.bootstrap_servers:
        names = ", ".join(f"{li.name} ({li.protocol})" for li in broker.listeners)
        log.warning("broker discovery: no listener speaks %s, the protocol of kafka.client (listeners: %s): not used as "
                    "bootstrap; set kafka.client.security.protocol and its SASL/TLS settings, or kafka.bootstrap_servers",
                    protocol, names)
    # A container's log dirs are paths in its mount namespace: the host's paths of the same directories.
    log_dirs = host_paths(root, broker.pid, broker.log_dirs)
    if broker.log_dirs and len(log_dirs) == len(broker.log_dirs):
        inside = "" if log_dirs == broker.log_dirs else f", {','.join(broker.log_dirs)} in its mount namespace"
        found["processes.log_dirs"] = (log_dirs, ",".join(log_dirs), f"log.dirs in {where}{inside}")
    elif broker.log_dirs:
        log.info("broker discovery: processes.log_dirs left to the processes collector: this host does not mount "
                 "every log dir of pid %d (%s), which its open files name by their disk", broker.pid,
                 ",".join(broker.log_dirs))
    if broker.jmx_exporter:  # no JVM of kdiag's, no JMX password or TLS to hand over
        found["kafka.jmx"] = ([broker.jmx_exporter], broker.jmx_exporter, f"-javaagent of pid {broker.pid}")
    elif broker.jmx:
        if kafka.jmx_username and not kafka.jmx:
            log.warning("broker discovery: kafka.jmx_username is set: set kafka.jmx (the broker's: %s) rather than send "
                        "the JMX password to a discovered address", broker.jmx)
        elif broker.jmx_auth and not kafka.jmx_username:
            log.warning("broker discovery: JMX %s wants a password: not used; set kafka.jmx_username and "
                        "kafka.jmx_password_file", broker.jmx)
        elif broker.jmx_ssl and not kafka.jmx_ssl:
            log.warning("broker discovery: JMX %s speaks TLS: not used; set kafka.jmx_ssl and kafka.jmx_truststore", broker.jmx)
        else:
            found["kafka.jmx"] = ([broker.jmx], broker.jmx, f"-D{JMX}port of pid {broker.pid}")
    if broker.classpath and not broker.jmx_exporter:
        # Root runs JmxTool from these jars: only when no one but root and the broker's user can change them; a
        # container's are its root's (through /proc/PID/root), with no link a host path walk would read otherwise.
        untrusted = "" if kafka.jmx_classpath else why_untrusted_classpath(broker.classpath, broker.owners, broker.rootfs)
        if untrusted:
            log.warning("broker discovery: the -cp of pid %d is not used to run JmxTool: %s; set kafka.jmx_classpath to "
                        "Kafka's libs/*", broker.pid, untrusted)
        else:
            classpath = _host_classpath(root, broker)
            found["kafka.jmx_classpath"] = (classpath, _classpath_summary(classpath), f"-cp of pid {broker.pid}")
    return found


def discover(config: Config, root: Root) -> Config:
    """config with its unset Kafka items filled from the local broker process; one log line per item."""
    try:
        brokers = find_brokers(root, BrokerTrust(config.kafka.broker_user))
    except OSError as e:  # a wrong --procfs: the collectors say so too; discovery is only a convenience
        log.warning("broker discovery: cannot list the processes (%s)", e.strerror or e)
        return config
    for refused in (b for b in brokers if b.refused):
        log.warning("broker discovery: pid %d looks like a Kafka broker but is not used: %s", refused.pid, refused.refused)
    chosen, why = choose([b for b in brokers if not b.refused], config.kafka.bootstrap_servers,
                         config.kafka.local_broker_id)
    if not chosen:
        log.info("broker discovery: %s", why)
        return config
    found: dict[str, tuple[object, str, str]] = {}  # config key -> (value, how it is shown, where it came from)
    for broker in chosen:
        log.info("broker discovery: %s broker is pid %d (%s)%s", "local" if len(chosen) == 1 else "a local",
                 broker.pid, broker.properties_path, ", ZooKeeper mode (zookeeper.connect)" if broker.zookeeper else "")
        for problem in broker.problems:
            log.warning("broker discovery: pid %d: %s", broker.pid, problem)
        _merge(found, _found(config, root, broker))
    if len(chosen) > 1:
        found.pop("kafka.local_broker_id", None)  # several brokers here: none is "the" local one
    kafka, processes = config.kafka, config.processes
    current = {"kafka.local_broker_id": kafka.local_broker_id, "kafka.bootstrap_servers": kafka.bootstrap_servers,
               "kafka.jmx": kafka.jmx, "kafka.jmx_classpath": kafka.jmx_classpath, "processes.log_dirs": processes.log_dirs}
    filled: dict[str, Any] = {}
    for key, (value, shown, source) in found.items():
        if current[key] not in (None, "", []):
            log.info("broker discovery: %s kept from the config (the broker's: %s, %s)", key, shown, source)
        elif key == "kafka.jmx" and not (kafka.bootstrap_servers or "kafka.bootstrap_servers" in filled):
            log.info("broker discovery: kafka.jmx %s not used: no bootstrap servers to go with it", shown)
        else:
            log.info("broker discovery: %s = %s (%s)", key, shown, source)
            filled[key] = value
    kafka_changes = {k.split(".", 1)[1]: v for k, v in filled.items() if k.startswith("kafka.")}
    changes: dict[str, Any] = {}
    if kafka_changes:
        changes["kafka"] = dataclasses.replace(kafka, **kafka_changes)
    if "processes.log_dirs" in filled:
        changes["processes"] = dataclasses.replace(processes, log_dirs=filled["processes.log_dirs"])
    return dataclasses.replace(config, **changes) if changes else config
