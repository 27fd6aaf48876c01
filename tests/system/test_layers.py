"""kdiag's packages import only what their layer allows (imports inside functions included), and no module cycles."""

import ast
from pathlib import Path

import kdiag

PACKAGE = Path(kdiag.__file__).parent

CORE = {"kdiag.core"}
FAMILIES = CORE | {"kdiag.families"}
KAFKA = FAMILIES | {"kdiag", "kdiag.kafka"}
CONFIG = KAFKA | {"kdiag.config"}
ANALYSIS = CONFIG | {"kdiag.analysis"}
COLLECTORS = CONFIG | {"kdiag.collectors"}
ALL_COLLECTORS = COLLECTORS | {"kdiag.collectors.host", "kdiag.collectors.kafka"}
PROBE = CONFIG | {"kdiag.probe"}
RUNTIME = ANALYSIS | ALL_COLLECTORS | PROBE | {"kdiag.runtime"}
OUTPUTS = {"kdiag.serve", "kdiag.alerting", "kdiag.recording", "kdiag.report"}
APP = RUNTIME | OUTPUTS | {"kdiag.app"}
LAB = CONFIG | {"kdiag.tools.lab"}

# What each package may import besides itself, low to high: the core imports nothing of kdiag, the runtime nothing of
# the tools, a collector no other collector package, and the tools only what is below them.
ALLOWED = {
    "kdiag": set(),
    "kdiag.core": set(),
    "kdiag.families": CORE,
    "kdiag.kafka": FAMILIES,
    "kdiag.config": KAFKA,
    "kdiag.analysis": CONFIG,
    "kdiag.collectors": CONFIG,
    "kdiag.collectors.host": COLLECTORS,
    "kdiag.collectors.kafka": COLLECTORS,
    "kdiag.probe": CONFIG,
    "kdiag.runtime": ANALYSIS | ALL_COLLECTORS | PROBE,
    "kdiag.serve": RUNTIME,
    "kdiag.alerting": RUNTIME,
    "kdiag.recording": RUNTIME,
    "kdiag.report": RUNTIME,
    "kdiag.app": RUNTIME | OUTPUTS,
    "kdiag.tools": set(),
    "kdiag.tools.lab": CONFIG,
    "kdiag.tools.bench": CONFIG,
    "kdiag.tools.drill": APP | LAB,
    "kdiag.cli": APP | LAB | {"kdiag.tools.bench", "kdiag.tools.drill"},
    "kdiag.__main__": {"kdiag.cli"},
}


def module_name(path: Path, top: Path) -> str:
    parts = path.relative_to(top.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top: Path, modules: set[str]) -> set[str]:
    """The kdiag modules one file imports, at any depth of its code."""
    name = module_name(path, top)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return (found & modules) - {name}


def import_graph(top: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package under top and the modules of it that it imports."""
    files = {module_name(p, top): p for p in top.rglob("*.py")}
    return {name: imports(path, top, set(files)) for name, path in files.items()}


def package_of(module: str) -> str | None:
    """The ALLOWED entry a module belongs to: the longest one that is the module or a package above it ("kdiag" is
    the top package's __init__ only, so a module in no listed package belongs to none)."""
    entries = [p for p in ALLOWED if module == p or (p != "kdiag" and module.startswith(p + "."))]
    return max(entries, key=len, default=None)


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses packages against ALLOWED, as 'importer -> imported (package -> package)'."""
    found = []
    for name, targets in sorted(graph.items()):
        mine = package_of(name)
        if mine is None:
            found.append(f"{name}: a package ALLOWED does not list")
            continue
        for target in sorted(targets):
            theirs = package_of(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                found.append(f"{name} -> {target} ({mine} -> {theirs})")
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a path that ends where it starts, [] when there is none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return []
        for target in sorted(graph[name]):
            if cycle := visit(target, [*path, name]):
                return cycle
        done.add(name)
        return []

    for name in sorted(graph):
        if cycle := visit(name, []):
            return cycle
    return []


def test_kdiag_imports_follow_the_layers():
    assert violations(import_graph()) == []


def test_the_allowed_table_has_no_cycle():
    assert find_cycle({p: set(allowed) for p, allowed in ALLOWED.items()}) == []


def test_kdiag_has_no_import_cycles():
    assert find_cycle(import_graph()) == []


def test_a_collector_importing_the_lab_is_a_violation(tmp_path):
    top = tmp_path / "kdiag"
    for package in ("collectors/host", "tools/lab", "core"):
        (top / package).mkdir(parents=True)
    for init in ("__init__.py", "collectors/__init__.py", "collectors/host/__init__.py", "tools/__init__.py",
                 "tools/lab/__init__.py", "core/__init__.py"):
        (top / init).write_text("")
    (top / "core/sample.py").write_text("")
    (top / "tools/lab/layout.py").write_text("from kdiag.core import sample\n")
    (top / "collectors/host/fake.py").write_text("def jars():\n    from kdiag.tools.lab.layout import classpath\n")
    assert violations(import_graph(top)) == [
        "kdiag.collectors.host.fake -> kdiag.tools.lab.layout (kdiag.collectors.host -> kdiag.tools.lab)"]


def test_the_core_importing_anything_of_kdiag_is_a_violation():
    assert violations({"kdiag.core.sample": {"kdiag.config.settings"}}) == [
        "kdiag.core.sample -> kdiag.config.settings (kdiag.core -> kdiag.config)"]
    assert violations({"kdiag.runtime.pipeline": {"kdiag.tools.drill.drill"}}) != []
    assert violations({"kdiag.newthing.x": set()}) == ["kdiag.newthing.x: a package ALLOWED does not list"]


def test_a_cycle_is_found():
    graph = {"kdiag.a": {"kdiag.b"}, "kdiag.b": {"kdiag.c"}, "kdiag.c": {"kdiag.a"}, "kdiag.d": {"kdiag.a"}}
    assert find_cycle(graph) == ["kdiag.a", "kdiag.b", "kdiag.c", "kdiag.a"]
    assert find_cycle({"kdiag.a": {"kdiag.b"}, "kdiag.b": set()}) == []
