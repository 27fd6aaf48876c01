"""The one YAML reader for kdiag's own files: small regular UTF-8 files, plain trees, errors with file:line:column."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from kdiag.core.errors import KdiagError
from kdiag.core.quote import cut, quote
from kdiag.core.safeio import read_regular

# kdiag's files are ~10 KB and ~300 values. PyYAML in pure Python takes ~3 s for the worst MiB (newlines) and
# ~700 bytes a value, so both bounds keep any file to seconds and tens of MB.
MAX_BYTES = 1 << 20
MAX_VALUES = 50_000
MAX_DEPTH = 64


class YamlError(KdiagError):
    """A YAML file that cannot be used, with the 1-based line and column of the problem when there is one."""

    def __init__(self, path: str | Path, message: str, line: int = 0, column: int = 0):
        super().__init__(message)
        self.path, self.message, self.line, self.column = str(path), message, line, column

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}:{self.column}" if self.line else self.path
        return f"{where}: {self.message}"


class _Loader(yaml.SafeLoader):
    """SafeLoader without anchors and aliases (alias bombs), deep nesting, too many values, duplicate keys, huge ints."""

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = self.values = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # the stubs leave peek_event untyped
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            raise ComposerError(None, None, "anchors and aliases (&name, *name) are not accepted: "
                                "write the value out", event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        if self.values >= MAX_VALUES:
            raise ComposerError(None, None, f"more than {MAX_VALUES} values", event.start_mark)
        self.depth += 1
        self.values += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    # The stubs type the anchor as a dict; PyYAML passes the event's anchor, a str or None.
    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:  # type: ignore[override]
        node = super().compose_mapping_node(anchor)  # type: ignore[arg-type]
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                if first := seen.get((key.tag, key.value)):
                    raise ComposerError(None, None, f"duplicate key {quote(key.value)} "
                                        f"(first at line {first.start_mark.line + 1})", key.start_mark)
                seen[(key.tag, key.value)] = key
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as e:  # int() of 5000 digits, a date like 2024-13-45
            reason = str(e).split(";")[0]  # Python's advice on the int limit is not the user's business
            raise ConstructorError(None, None, f"cannot read {quote(node.value)}: {reason}", node.start_mark) from None


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a regular file of at most MAX_BYTES; never blocks on a FIFO or a device."""
    try:
        data = read_regular(path, MAX_BYTES)
    except OSError as e:
        if e.errno == errno.EFBIG:
            raise YamlError(path, f"larger than {MAX_BYTES >> 20} MiB: not a kdiag YAML file") from None
        raise YamlError(path, f"cannot read: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        column = len(data[line_start:e.start].decode("utf-8", "replace")) + 1
        raise YamlError(path, f"not UTF-8 text (byte 0x{data[e.start]:02x})", data.count(b"\n", 0, e.start) + 1,
                        column) from None


def compose(path: str | Path) -> tuple[str, yaml.Node | None]:
    """The file's text and its node tree (None when empty); YamlError with the position of any problem."""
    text = read_text(path)
    try:
        return text, _Loader(text).get_single_node()  # the constructor already checks for control characters
    except yaml.YAMLError as e:
        raise _error(path, text, e) from None


def construct(node: yaml.Node | None, path: str | Path = "") -> Any:
    """Python values (dict, list, str, int, float, bool, None, dates) of a node tree from compose()."""
    if node is None:
        return None
    try:
        return _Loader("").construct_document(node)
    except yaml.YAMLError as e:
        raise _error(path, "", e) from None


def load(path: str | Path) -> Any:
    """The Python value of a YAML file read through compose()."""
    return construct(compose(path)[1], path)


def parse(text: str, path: str | Path) -> Any:
    """The Python value of YAML text read elsewhere (another process's file), with compose()'s bounds."""
    try:
        node = _Loader(text).get_single_node()
    except yaml.YAMLError as e:
        raise _error(path, text, e) from None
    return construct(node, path)


def _error(path: str | Path, text: str, e: yaml.YAMLError) -> YamlError:
    """One line, position first, from PyYAML's multi-line messages."""
    if isinstance(e, yaml.reader.ReaderError):  # a control character: binary data
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        return YamlError(path, f"not a text file (control character #x{e.character:04x})", line, column)
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        problem = " ".join(filter(None, (e.context, e.problem)))
        # cut: PyYAML quotes tags, which can be as long as the file
        return YamlError(path, f"YAML: {cut(problem, 200)}", mark.line + 1 if mark else 0, mark.column + 1 if mark else 0)
    return YamlError(path, f"YAML: {cut(str(e), 200)}")
