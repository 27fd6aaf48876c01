"""tests/ mirrors kdiag/ (CONTRIBUTING.md): a module's tests are tests/<package>/test_<module>[_<aspect>].py, tests
that span packages are in tests/system/, a rule's in tests/rules/, and every test directory is a package."""

from __future__ import annotations

import fnmatch
import os
import tomllib
from pathlib import Path

import pytest

import kdiag
from tests.paths import ROOT, TESTS

PACKAGE = Path(kdiag.__file__).parent
SPANNING = {"system", "rules"}
NOT_WALKED = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["norecursedirs"]


def kdiag_modules() -> dict[str, set[str]]:
    """Each kdiag package (core, collectors/host, tools/lab, ...) -> the names of its modules."""
    return {init.parent.relative_to(PACKAGE).as_posix(): {m.stem for m in init.parent.glob("*.py")} - {"__init__"}
            for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE}


def walked_directories() -> list[Path]:
    """tests/ and its directories that pytest walks (pyproject's norecursedirs left out)."""
    found = []
    for top, dirs, _ in os.walk(TESTS):
        dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in [*NOT_WALKED, "__pycache__"]))
        found.append(Path(top))
    return found


def misplaced(test: Path, modules: dict[str, set[str]]) -> str | None:
    """Why the test module at `test` breaks the layout, or None."""
    where = test.parent.relative_to(TESTS).as_posix()
    if where in SPANNING:
        return None
    if where not in modules:
        return f"{where}/ is neither a kdiag package nor one of {sorted(SPANNING)}"
    name = test.stem.removeprefix("test_")
    if any(name == m or name.startswith(m + "_") for m in modules[where]):
        return None
    return f"names no module of kdiag/{where}/ (test_<module>.py or test_<module>_<aspect>.py)"


def test_every_test_module_mirrors_a_kdiag_module_or_spans_packages():
    modules = kdiag_modules()
    tests = [t for d in walked_directories() for t in d.glob("test_*.py")]
    assert len(tests) > 100
    problems = {str(t.relative_to(TESTS)): misplaced(t, modules) for t in tests}
    assert {t: why for t, why in problems.items() if why} == {}


def test_every_test_directory_is_a_package():
    assert [str(d.relative_to(ROOT)) for d in walked_directories() if not (d / "__init__.py").is_file()] == []


@pytest.mark.parametrize(("path", "problem"), [
    ("core/test_history.py", None),
    ("core/test_history_counter_wraps.py", None),
    ("collectors/host/test_meminfo.py", None),
    ("system/test_anything.py", None),
    ("rules/test_swap_in_use.py", None),
    ("test_history.py", "./ is neither a kdiag package"),
    ("core/test_histories.py", "names no module of kdiag/core/"),
    ("collectors/test_meminfo.py", "names no module of kdiag/collectors/"),
    ("fixtures/test_x.py", "fixtures/ is neither a kdiag package"),
])
def test_the_layout_rule_names_what_is_misplaced(path, problem):
    why = misplaced(TESTS / path, kdiag_modules())
    assert why == problem if problem is None else why.startswith(problem)
