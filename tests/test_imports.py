"""kdiag's modules import each other without cycles, imports inside functions included."""

import ast
from pathlib import Path

import kdiag

PACKAGE = Path(kdiag.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The kdiag modules one file imports, at any depth of its code."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
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
    return (found & modules) - {module_name(path)}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports(path, set(files)) for name, path in files.items()}


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


def test_kdiag_has_no_import_cycles():
    assert find_cycle(import_graph()) == []


def test_a_cycle_is_found():
    graph = {"kdiag.a": {"kdiag.b"}, "kdiag.b": {"kdiag.c"}, "kdiag.c": {"kdiag.a"}, "kdiag.d": {"kdiag.a"}}
    assert find_cycle(graph) == ["kdiag.a", "kdiag.b", "kdiag.c", "kdiag.a"]
    assert find_cycle({"kdiag.a": {"kdiag.b"}, "kdiag.b": set()}) == []
