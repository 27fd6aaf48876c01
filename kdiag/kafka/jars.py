"""Where kdiag finds Kafka's jars when no broker process names them: the `kdiag lab` directory's libs/."""

from __future__ import annotations

import os
import re
from pathlib import Path

# The broker's own jar names its Kafka version: kafka_2.13-3.7.0.jar (before 4.0), kafka-server-4.4.0.jar (from 3.7).
KAFKA_JAR = re.compile(r"kafka(?:_[\d.]+|-server)-(\d+\.\d+\.\d+[\w.-]*?)\.jar")


def lab_dir(dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the lab directory: the argument, $KDIAG_LAB_DIR or ~/.cache/kdiag/lab."""
    if dir:
        return Path(dir).expanduser().resolve()
    env = os.environ.get("KDIAG_LAB_DIR")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "kdiag" / "lab"


def classpath(dir: str | os.PathLike[str] | None = None) -> str:
    """Return the Java classpath (DIR/libs/*) for running Kafka classes."""
    return str(lab_dir(dir) / "libs" / "*")


def kafka_version(classpath: str) -> str:
    """The Kafka version a class path's broker jar names ('' when none does); a `dir/*` entry is listed, never read."""
    for entry in classpath.split(":"):
        names = [entry]
        if entry.endswith("/*"):
            try:
                names = sorted(os.listdir(entry[:-2]))
            except OSError:
                continue
        for name in names:
            if m := KAFKA_JAR.fullmatch(os.path.basename(name)):
                return m.group(1)
    return ""
