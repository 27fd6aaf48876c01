"""Where kdiag finds Kafka's jars when no broker process names them: the `kdiag lab` directory's libs/."""

from __future__ import annotations

import os
from pathlib import Path


def lab_dir(dir: str | os.PathLike | None = None) -> Path:
    """Return the lab directory: the argument, $KDIAG_LAB_DIR or ~/.cache/kdiag/lab."""
    if dir:
        return Path(dir).expanduser().resolve()
    env = os.environ.get("KDIAG_LAB_DIR")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "kdiag" / "lab"


def classpath(dir: str | os.PathLike | None = None) -> str:
    """Return the Java classpath (DIR/libs/*) for running Kafka classes."""
    return str(lab_dir(dir) / "libs" / "*")
