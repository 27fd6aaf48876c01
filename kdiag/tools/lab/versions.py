"""What the lab must know of a Kafka version: its Scala build, its modes (ZooKeeper, KRaft) and the classes it runs."""

from __future__ import annotations

import re

from kdiag.tools.lab.jars import LabError

MODES = ("kraft", "zookeeper")
# KRaft is production-ready from 3.3 (KIP-833); 2.8-3.2 had it only as a preview, so ZooKeeper is their default.
KRAFT_DEFAULT_FROM = (3, 3)
KRAFT_FROM = (2, 8)
ZOOKEEPER_UNTIL = (4, 0)  # 4.0 removed ZooKeeper mode (KIP-833)
OLDEST = (2, 0)


def parse(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a Kafka release number such as 3.7.2; LabError for anything else."""
    m = re.fullmatch(r"(\d{1,2})\.(\d{1,2})\.(\d{1,2})", version or "")
    if not m:
        raise LabError(f"--kafka-version {version[:40]!r}: expected a release number such as 3.9.1", 2)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def default_mode(version: str) -> str:
    """KRaft from 3.3 on, ZooKeeper before."""
    return "kraft" if parse(version)[:2] >= KRAFT_DEFAULT_FROM else "zookeeper"


def check_mode(version: str, mode: str) -> None:
    """LabError (exit 2) when the version has no such mode or the lab cannot run it."""
    v = parse(version)[:2]
    if v < OLDEST:
        raise LabError(f"Kafka {version}: the lab runs 2.0 and later (older brokers need Java 8, not installed here)", 2)
    if mode == "zookeeper" and v >= ZOOKEEPER_UNTIL:
        raise LabError(f"Kafka {version} has no ZooKeeper mode (removed in 4.0): use --mode kraft", 2)
    if mode == "kraft" and v < KRAFT_FROM:
        raise LabError(f"Kafka {version} has no KRaft mode (it came as a preview in 2.8): use --mode zookeeper", 2)


def scala_artifact(version: str) -> str:
    """The core jar's Maven artifact: Scala 2.13 builds exist from 2.4, 2.12 before."""
    return "kafka_2.13" if parse(version)[:2] >= (2, 4) else "kafka_2.12"


def check_security(version: str, mode: str, security: str) -> None:
    """LabError (exit 2) for a security mode the lab cannot set up on this version."""
    v = parse(version)[:2]
    if security != "none" and v < (2, 7):
        raise LabError(f"Kafka {version}: the secured lab needs PEM keystores (KIP-651, Kafka 2.7+): use --security none", 2)
    if security.startswith("sasl") and mode == "kraft" and v < (3, 5):
        raise LabError(f"Kafka {version} in KRaft cannot create SCRAM users before the first start (KIP-900, 3.5+): "
                       "use --mode zookeeper or --security ssl", 2)


# (what the JVM printed, why): a version that cannot run on this JDK says so in one line.
JVM_SIGNATURES = (
    ("UnsupportedClassVersionError", "its classes need a newer Java than this one"),
    ("Unrecognized VM option", "this JVM rejects an option given to it (see --jvm-opts)"),
    ("InaccessibleObjectException", "it reaches into JDK internals that Java 16+ closes"),
    ("does not support ZGC", "this JVM has no such collector"),
    # Kafka before 2.5.1 ships a ZooKeeper client (3.4, 3.5 before 3.5.8) that reads InetSocketAddress.toString(),
    # whose form Java 14 changed: it never connects (ZOOKEEPER-3779).
    ("UnresolvedAddressException", "its ZooKeeper client (before 3.5.8) cannot connect on Java 14+ (ZOOKEEPER-3779): "
                                   "it needs Java 8 or 11"),
)


def explain_start_failure(version: str, error: LabError, logs: str = "") -> LabError:
    """A startup failure whose logs (the error's tail, and `logs`) show a JVM incompatibility, as one line that says
    so, the error after it."""
    text = f"{error}\n{logs}"
    for signature, why in JVM_SIGNATURES:
        if signature in text:
            return LabError(f"Kafka {version} does not start on Java {java_major()}: {why} ({signature})\n{error}", 2)
    return error


def java_major() -> int:
    """The major version of the `java` on PATH (0 when it cannot be read)."""
    import subprocess

    out = subprocess.run(["java", "-version"], check=False, capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return 0
    return int(m.group(2)) if m.group(1) == "1" and m.group(2) else int(m.group(1))
