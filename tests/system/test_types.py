"""kdiag's type hints are checked: mypy with the project's settings (pyproject.toml [tool.mypy]) finds no error, and
the string enumerations (a sample's kind, a rule's kind, a diagnosis's state) are Literal types it enforces."""

import subprocess
import sys
from pathlib import Path

import pytest
from tests.paths import ROOT


def mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.integration
def test_mypy_finds_no_errors():
    result = mypy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("Success: no issues found"), result.stdout


@pytest.mark.integration
def test_a_misspelled_kind_or_state_is_a_type_error(tmp_path):
    (tmp_path / "mypy.ini").write_text(f"[mypy]\npython_version = 3.11\nmypy_path = {ROOT}\n")
    (tmp_path / "uses.py").write_text(
        "from kdiag.analysis.catalog import Rule\n"
        "from kdiag.analysis.engine import Diagnosis\n"
        "from kdiag.core.sample import sample\n"
        "sample('x', 1.0, 'gauges')\n"
        "def mark(d: Diagnosis, r: Rule) -> None:\n"
        "    Diagnosis(r, d.subject, d.since, 'resolved')\n"
        "    r.kind = 'symptoms'\n")
    result = mypy("--config-file", "mypy.ini", "uses.py", cwd=tmp_path)
    errors = [line.split(": error: ")[0] for line in result.stdout.splitlines() if ": error: " in line]
    assert errors == ["uses.py:4", "uses.py:6", "uses.py:7"], result.stdout
