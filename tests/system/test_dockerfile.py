"""The container image builds kdiag with its pinned dependencies (constraints.txt) and runs it as the unit does."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            out[canonicalize_name(name)] = version
    return out


def test_every_dependency_is_pinned_to_a_version_it_accepts() -> None:
    pinned = pins()
    for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pinned[name]), f"{req.name}=={pinned[name]} is outside {req.specifier}"


def test_the_image_installs_with_the_pins_and_runs_the_units_command() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^RUN pip install -c constraints\.txt \.", dockerfile, re.M)
    unit = (ROOT / "systemd" / "kdiag.service").read_text()
    exec_start = re.search(r"^ExecStart=\S*/kdiag (.+)$", unit, re.M)
    assert exec_start
    assert f'CMD {str(exec_start[1].split()).replace(chr(39), chr(34))}' in dockerfile
