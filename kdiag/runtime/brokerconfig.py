"""A broker's settings as its files and command line give them: .properties text, JVM options, listeners, JMX."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kdiag.core.procfs import BROKER_MAIN_CLASS

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LISTENER = re.compile(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/\[\]]*):(\d{1,5})")
JMX = "com.sun.management.jmxremote."
WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]", "[::0]": "[::1]"}


@dataclass(frozen=True)
class Listener:
    """One listener of server.properties, with the address clients reach it at (advertised when given)."""

    name: str
    protocol: str
    address: str  # host:port

    @property
    def port(self) -> int:
        """The port clients connect to."""
        return int(self.address.rpartition(":")[2])


def parse_properties(text: str) -> dict[str, str]:
    """A Java .properties text: `key=value`, `key: value` or `key value`, # and ! comments, \\ continuations."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        if (len(line) - len(line.rstrip("\\"))) % 2:
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"((?:[^\s=:\\]|\\.)*)\s*[=:\s]?\s*(.*)", logical, re.DOTALL)
        if m and m[1]:
            out[_unescape(m[1])] = _unescape(m[2])
        logical = ""
    return out


def _unescape(text: str) -> str:
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5 else simple.get(m[1], m[1]),
                  text)


def jvm_options(argv: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """(-D system properties, -cp classpath, arguments after the main class) of a `java ... kafka.Kafka ...` argv."""
    props: dict[str, str] = {}
    classpath = ""
    main = argv.index(BROKER_MAIN_CLASS)
    options = argv[1:main]
    for i, arg in enumerate(options):
        if arg.startswith("-D"):
            key, _, value = arg[2:].partition("=")
            props[key] = value
        elif arg in ("-cp", "-classpath", "--class-path") and i + 1 < len(options):
            classpath = options[i + 1]
        elif arg.startswith("--class-path="):
            classpath = arg.partition("=")[2]
    return props, classpath, argv[main + 1 :]


AGENT_JAR = "jmx_prometheus_javaagent"
# The agent's own argument syntax: [HOST:]PORT:CONFIG (HOST a name, an IPv4 address or a bracketed IPv6 one).
_AGENT_ARGS = re.compile(r"(?:([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]):)?(\d{1,5}):(.+)")


@dataclass(frozen=True)
class Agent:
    """The Prometheus jmx_exporter java agent a JVM runs: where it serves and its config file."""

    host: str  # where kdiag reaches it in the JVM's network namespace (loopback when it binds every address)
    port: int
    config: str  # as the JVM names it (relative to its cwd)


def jmx_exporter_agent(argv: list[str]) -> Agent | None:
    """The jmx_exporter agent of a `java ... kafka.Kafka` argv (`-javaagent:.../jmx_prometheus_javaagent*.jar=ARGS`)."""
    for arg in argv[1:argv.index(BROKER_MAIN_CLASS)]:
        jar, _, args = arg.removeprefix("-javaagent:").partition("=")
        if not arg.startswith("-javaagent:") or not jar.rsplit("/", 1)[-1].startswith(AGENT_JAR):
            continue
        m = _AGENT_ARGS.fullmatch(args)
        if m and 0 < int(m[2]) < 65536:
            return Agent(WILDCARD_HOSTS.get(m[1] or "", m[1] or ""), int(m[2]), m[3])
    return None


def agent_config_problem(config: object) -> str:
    """Why kdiag cannot map what an agent with this (parsed YAML) config serves, "" when it can: the default names
    (every rule without a `name`, none lowercased) over plain HTTP without a password."""
    if config is None:
        return ""
    if not isinstance(config, dict):
        return "its config is not a YAML mapping"
    if config.get("lowercaseOutputName") or config.get("lowercaseOutputLabelNames"):
        return "its config lowercases names (kdiag maps the agent's default names only)"
    rules = config.get("rules") or []
    if not isinstance(rules, list) or any(not isinstance(r, dict) or "name" in r for r in rules):
        return "its rules rename the MBeans (kdiag maps the agent's default names only)"
    server = config.get("httpServer")
    if isinstance(server, dict) and ({"authentication", "ssl"} & set(server)):
        return "its HTTP server wants a password or TLS"
    return ""


def kafka_settings(args: list[str], read: Callable[[str], str]) -> tuple[str, dict[str, str]]:
    """(properties file, its settings with `--override k=v` applied) from the arguments after kafka.Kafka."""
    if not args or args[0].startswith("-"):
        raise ValueError("no server.properties argument after kafka.Kafka")
    settings = parse_properties(read(args[0]))
    for i, arg in enumerate(args[1:-1], 1):
        if arg == "--override" and "=" in args[i + 1]:
            key, _, value = args[i + 1].partition("=")
            settings[key] = value
    return args[0], settings


def parse_listeners(settings: dict[str, str]) -> tuple[list[Listener], set[int], list[str]]:
    """(client listeners, every listening port, problems) of a broker's settings."""
    problems: list[str] = []
    protocol_map = {p: p for p in PROTOCOLS}
    for pair in filter(None, settings.get("listener.security.protocol.map", "").split(",")):
        name, _, protocol = pair.strip().partition(":")
        protocol_map[name.upper()] = protocol.strip().upper()
    controllers = {n.strip().upper() for n in settings.get("controller.listener.names", "").split(",") if n.strip()}

    def split(key: str) -> dict[str, str]:
        out = {}
        for i, item in enumerate(filter(None, (s.strip() for s in settings.get(key, "").split(","))), 1):
            m = _LISTENER.fullmatch(item)
            if m is None:
                # The file may hold secrets: a value that does not parse is never echoed.
                problems.append(f"{key}: entry {i} is not NAME://host:port")
                continue
            out[m[1].upper()] = f"{WILDCARD_HOSTS.get(m[2], m[2])}:{m[3]}"
        return out

    bound = split("listeners") if "listeners" in settings else {"PLAINTEXT": _legacy_address(settings, "", problems)}
    advertised = split("advertised.listeners")
    if "advertised.listeners" not in settings and ("advertised.host.name" in settings or "advertised.port" in settings):
        advertised = {"PLAINTEXT": _legacy_address(settings, "advertised.", problems, bound["PLAINTEXT"])}
    listeners = []
    for name, address in bound.items():
        if name in controllers:
            continue
        if protocol_map.get(name) not in PROTOCOLS:
            problems.append(f"listener {name}: no security protocol in listener.security.protocol.map")
            continue
        listeners.append(Listener(name, protocol_map[name], advertised.get(name, address)))
    ports = {int(a.rpartition(":")[2]) for a in (*bound.values(), *advertised.values())}
    return listeners, ports, problems


def _legacy_address(settings: dict[str, str], prefix: str, problems: list[str], fallback: str = "127.0.0.1:9092") -> str:
    """host.name and port (or advertised.*): a broker before 3.0 without `listeners` listens on PLAINTEXT://host:port."""
    default_host, _, default_port = fallback.rpartition(":")
    host = settings.get(f"{prefix}host.name", "").strip()
    port = settings.get(f"{prefix}port", default_port).strip()
    if not port.isdigit() or not 0 < int(port) < 65536:
        problems.append(f"{prefix}port is not a port number")
        port = default_port
    return f"{WILDCARD_HOSTS.get(host, host) if host else default_host}:{port}"


def jmx_endpoint(props: dict[str, str], read: Callable[[str], str]) -> tuple[str, bool, bool]:
    """(host:port, needs a password, speaks TLS) of the JVM's remote JMX agent; ('', ...) when it has none."""
    settings = {}
    if config_file := props.get("com.sun.management.config.file"):
        settings = parse_properties(read(config_file))
    # As in the JVM: -D options override the management config file.
    settings.update({k: v for k, v in props.items() if k.startswith("com.sun.management.")})
    port = settings.get(JMX + "port", "")
    if not port.isdigit():
        return "", False, False
    host = WILDCARD_HOSTS.get(settings.get(JMX + "host", ""), settings.get(JMX + "host", ""))
    # The JVM's defaults when only the port is given: password and TLS both on.
    auth = settings.get(JMX + "authenticate", "true").lower() != "false"
    ssl = settings.get(JMX + "ssl", "true").lower() != "false"
    return f"{host}:{port}", auth, ssl


# The settings discovery uses, as container images take them from the environment (apache/kafka and Confluent:
# KAFKA_LOG_DIRS; Bitnami: KAFKA_CFG_LOG_DIRS): no other variable (KAFKA_OPTS, passwords) is ever kept.
ENV_SETTINGS = ("node.id", "broker.id", "log.dirs", "log.dir", "listeners", "advertised.listeners",
                "listener.security.protocol.map", "controller.listener.names", "process.roles", "zookeeper.connect")


def env_setting(name: str) -> str:
    """The setting a KAFKA_ (or Bitnami's KAFKA_CFG_) variable stands for: `_` a dot, `__` an underscore, `___` a dash."""
    name = name.removeprefix("KAFKA_CFG_") if name.startswith("KAFKA_CFG_") else name.removeprefix("KAFKA_")
    return name.lower().replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


def env_settings(environ: str) -> dict[str, str]:
    """The ENV_SETTINGS a NUL-separated /proc/PID/environ gives; Bitnami's KAFKA_CFG_ form wins over the plain one."""
    out: dict[str, str] = {}
    for entry in sorted(environ.split("\0"), key=lambda e: e.startswith("KAFKA_CFG_")):
        name, sep, value = entry.partition("=")
        if sep and name.startswith("KAFKA_") and (key := env_setting(name)) in ENV_SETTINGS:
            out[key] = value
    return out
