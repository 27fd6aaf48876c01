"""No object of kdiag writes another object's attributes: each assigns only its own (`self.x`, `cls.x`), and a change
to another goes through that object's methods or builds a new value."""

import ast
from pathlib import Path

import kdiag

PACKAGE = Path(kdiag.__file__).parent
OWN = {"self", "cls"}

# Library objects configured only through their attributes: (file under kdiag/, the object written) and why.
ALLOWED = {
    # ssl.SSLContext takes check_hostname, verify_mode and the TLS versions as attributes only.
    ("kafka/client.py", "context"): "ssl.SSLContext",
    ("serve/webconfig.py", "context"): "ssl.SSLContext",
    # hypercorn has no setting for HTTP/1.1 only: its ProtocolWrapper builds each connection from this module attribute.
    ("serve/webserver.py", "hypercorn.protocol"): "hypercorn's HTTP/1.1 protocol class",
}


def targets(node: ast.AST) -> list[ast.expr]:
    """What a statement assigns or deletes, tuples unpacked."""
    if isinstance(node, ast.Assign | ast.Delete):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        found = [node.target]
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        found = [node.optional_vars]
    else:
        return []
    flat: list[ast.expr] = []
    while found:
        t = found.pop()
        if isinstance(t, ast.Tuple | ast.List):
            found += t.elts
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            flat.append(t)
    return flat


def foreign_writes(source: str) -> list[tuple[int, str]]:
    """(line, object) of each attribute written on an object other than self or cls, setattr and delattr included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for t in targets(node):
            if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id in OWN):
                found.append((t.lineno, ast.unparse(t.value)))
        if isinstance(node, ast.Name) and node.id in ("setattr", "delattr"):
            found.append((node.lineno, node.id))  # called on self or not: it names its object at run time
    return found


def test_the_check_finds_each_way_of_writing_another_objects_attribute():
    source = """
def f(other, pairs):
    self.mine = 1
    cls.count += 1
    other.x = 1
    a, (self.b, other.y) = 1, (2, 3)
    self.part.z += 1
    for other.i in pairs: pass
    del other.x
    setattr(other, "x", 1)
    call(setattr)
"""
    assert foreign_writes(source) == [(5, "other"), (6, "other"), (7, "self.part"), (8, "other"), (9, "other"),
                                      (10, "setattr"), (11, "setattr")]


def test_no_module_writes_another_objects_attributes():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        found += [f"{name}:{line}: {target}" for line, target in foreign_writes(path.read_text())
                  if (name, target) not in ALLOWED]
    assert found == []


def test_every_allowed_write_is_still_there():
    written = {(path.relative_to(PACKAGE).as_posix(), target) for path in PACKAGE.rglob("*.py")
               for _, target in foreign_writes(path.read_text())}
    assert set(ALLOWED) <= written
