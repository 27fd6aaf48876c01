"""Hostile YAML (issue 12, #4, #5, #8): alias bombs, deep nesting, binary, FIFOs and huge values in the config and
rule files give one short error line with file:line:column, in bounded memory and time."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kdiag.core import yamlsafe
from kdiag.analysis.catalog import CatalogError, load_catalog
from kdiag.core.quote import quote

MEMORY_LIMIT = 1 << 30  # the bombs expanded to 2.9-3.4 GB before; a regression hits this and fails fast
RULE = textwrap.dedent("""\
    - id: t
      kind: cause
      severity: warning
      each: host
      when: it.cpu_count > 0
      summary: s
      remediation: r
      source: s
    """)


def bomb(levels: int = 9) -> str:
    """A 9-level billion-laughs list: 9**9 strings once expanded, a few hundred bytes written."""
    names = "abcdefghijklmnopqrstuvwxyz"
    items = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    items += [f"&{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def kdiag(*argv: str) -> subprocess.CompletedProcess:
    """The real CLI with a 1 GiB address space and a 60 s deadline."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([sys.executable, "-m", "kdiag", *argv], capture_output=True, text=True, timeout=60,
                          preexec_fn=limit)


def free_listen() -> str:
    """A free loopback address: if a regression accepted the config, the daemon must not clash with another."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def one_line(result: subprocess.CompletedProcess, code: int, expected: str) -> None:
    """Exit code, no traceback, and `expected` on a short line of its own."""
    assert result.returncode == code, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert len(result.stderr) < 400, result.stderr[:400]
    assert any(line.removeprefix("kdiag: ") == expected for line in result.stderr.splitlines()), result.stderr


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


# --- #4 alias bombs, through the real command -------------------------------------------------------------------------


@pytest.mark.integration
def test_alias_bomb_in_a_rule_when_is_refused(tmp_path):
    rules = write(tmp_path / "bomb.yaml", RULE.replace("when: it.cpu_count > 0", f"when: {bomb()}"))
    assert len(rules.read_bytes()) < 500
    one_line(kdiag("rules", "check", "--rules-dir", str(rules)), 1,
             f"{rules}:5:10: YAML: anchors and aliases (&name, *name) are not accepted: write the value out")


@pytest.mark.integration
def test_alias_bomb_in_the_config_interval_is_refused_at_startup(tmp_path):
    config = write(tmp_path / "kdiag.yaml", f"interval: {bomb()}\n")
    one_line(kdiag("run", "--config", str(config), "--listen", free_listen()), 2,
             f"{config}:1:12: YAML: anchors and aliases (&name, *name) are not accepted: write the value out")


def test_a_single_harmless_alias_is_refused_too(tmp_path):
    path = write(tmp_path / "a.yaml", "x: &one 1\ny: *one\n")
    with pytest.raises(yamlsafe.YamlError, match=r":1:4: YAML: anchors and aliases"):
        yamlsafe.load(path)


# --- #8 unreadable files: one line with the position, through the real command --------------------------------------

BAD_FILES = [
    # (name, content, line, column, message)
    ("latin1", "listen: 'caf\xe9:1'\n".encode("latin-1"), 1, 13, "not UTF-8 text (byte 0xe9)"),
    ("elf", b"\x7fELF\x02\x01\x01\x00\xff\xfe" + bytes(range(256)), 1, 9, "not UTF-8 text (byte 0xff)"),
    ("nul", b"interval: 5s\nlisten: \x00\x00\n", 2, 9, "not a text file (control character #x0000)"),
    ("deep", "interval: " + "[" * 5000 + "\n", 1, 74, "YAML: nested deeper than 64 levels"),
    ("duplicate", "interval: 5s\nhistory: 1h\ninterval: 1h\n", 3, 1, "YAML: duplicate key 'interval' (first at line 1)"),
    ("huge_int", "- x: " + "9" * 5000 + "\n", 1, 6, "YAML: cannot read '" + "9" * 76 + "...: Exceeds the limit "
     "(4300 digits) for integer string conversion: value has 5000 digits"),
    ("two_docs", "interval: 5s\n---\ninterval: 6s\n", 2, 1, "YAML: expected a single document in the stream but found "
     "another document"),
]


@pytest.mark.parametrize(("name", "content", "line", "column", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
@pytest.mark.integration
def test_bad_config_file_is_one_line_with_its_position(tmp_path, name, content, line, column, message):
    config = write(tmp_path / f"{name}.yaml", content)
    one_line(kdiag("run", "--config", str(config), "--listen", free_listen()), 2, f"{config}:{line}:{column}: {message}")


@pytest.mark.parametrize(("name", "content", "line", "column", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_rule_file_is_one_error_with_its_position(tmp_path, name, content, line, column, message):
    rules = write(tmp_path / f"{name}.yaml", content)
    with pytest.raises(CatalogError) as info:
        load_catalog([rules])
    assert str(info.value) == f"{rules}:{line}:{column}: {message}"


@pytest.mark.integration
def test_binary_rule_file_through_rules_check(tmp_path):
    rules = write(tmp_path / "bin.yaml", b"\x00\x01\x02" + bytes(range(128, 256)))
    one_line(kdiag("rules", "check", "--rules-dir", str(rules)), 1, f"{rules}:1:4: not UTF-8 text (byte 0x80)")


@pytest.mark.integration
def test_fifo_as_config_does_not_block(tmp_path):
    fifo = tmp_path / "kdiag.yaml"
    os.mkfifo(fifo)
    one_line(kdiag("run", "--config", str(fifo), "--listen", free_listen()), 2,
             f"{fifo}: cannot read: a FIFO, not a regular file")


@pytest.mark.integration
def test_fifo_and_directory_in_a_rules_dir(tmp_path):
    os.mkfifo(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").mkdir()
    result = kdiag("rules", "check", "--rules-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"{tmp_path / 'a.yaml'}: cannot read: a FIFO, not a regular file\n" in result.stderr
    assert f"{tmp_path / 'b.yaml'}: cannot read: a directory, not a regular file\n" in result.stderr


@pytest.mark.integration
def test_rules_dir_that_does_not_exist():
    one_line(kdiag("rules", "check", "--rules-dir", "/nonexistent"), 1,
             "/nonexistent: cannot read: No such file or directory")


def test_a_file_over_the_size_bound_is_not_read(tmp_path):
    path = write(tmp_path / "big.yaml", "# " + "x" * yamlsafe.MAX_BYTES)
    with pytest.raises(yamlsafe.YamlError, match=r"big\.yaml: larger than 1 MiB: not a kdiag YAML file$"):
        yamlsafe.load(path)


def test_too_many_values(tmp_path):
    path = write(tmp_path / "flow.yaml", "[" + "1," * yamlsafe.MAX_VALUES + "1]")
    with pytest.raises(yamlsafe.YamlError, match=rf":1:{2 * yamlsafe.MAX_VALUES}: YAML: more than 50000 values$"):
        yamlsafe.load(path)


def test_the_shipped_files_and_plain_yaml_still_load(tmp_path):
    path = write(tmp_path / "ok.yaml", "a: [1, 2.5, x, true, null]\nb: {c: 'd'}\n# comment\n")
    assert yamlsafe.load(path) == {"a": [1, 2.5, "x", True, None], "b": {"c": "d"}}
    assert yamlsafe.load(write(tmp_path / "empty.yaml", "")) is None


# --- error messages quote at most ~80 characters of any value --------------------------------------------------------


@pytest.mark.integration
def test_a_megabyte_listen_gives_a_short_line(tmp_path):
    config = write(tmp_path / "kdiag.yaml", "listen: " + "x" * 1_000_000 + ":9745\n")
    result = kdiag("run", "--config", str(config))
    one_line(result, 2, f"{config}: listen: '{'x' * 36}... is 1000005 characters long (at most 4096)")


@pytest.mark.integration
def test_a_megabyte_rule_id_and_a_long_key_give_short_lines(tmp_path):
    # YAML keys stop at 1024 characters; values do not.
    rules = write(tmp_path / "long.yaml", RULE.replace("- id: t", f"- id: {'i' * 1_000_000}").replace(
        "  kind: cause", f"  kind: cause\n  {'k' * 1000}: 1"))
    result = kdiag("rules", "check", "--rules-dir", str(rules))
    assert result.returncode == 1
    assert f"{rules}:3:3: rule '{'i' * 76}...: unknown key '{'k' * 76}... (expected one of" in result.stderr
    assert len(result.stderr) < 600


def test_unknown_and_python_tags_are_refused_in_a_short_line(tmp_path):
    path = write(tmp_path / "tags.yaml", "a: !!python/object/apply:os.system [id]\n")
    with pytest.raises(yamlsafe.YamlError, match=r":1:4: YAML: could not determine a constructor for the tag "
                       r"'tag:yaml.org,2002:python/object/apply:os.system'$"):
        yamlsafe.load(path)
    path = write(tmp_path / "long_tag.yaml", "a: !" + "t" * 100_000 + " 1\n")
    with pytest.raises(yamlsafe.YamlError) as info:
        yamlsafe.load(path)
    assert str(info.value).startswith(f"{path}:1:4: YAML: could not determine a constructor for the tag '!ttt")
    assert len(info.value.message) <= 206


def test_quote_is_bounded_whatever_the_value():
    assert quote("x" * 10**6) == "'" + "x" * 76 + "..."
    assert len(quote([list(range(1000))] * 10**6)) <= 80
    assert quote(10**5000) == "<an integer of 16610 bits>"
    assert quote(float("nan")) == "nan"
    assert quote({"a": [1]}) == "{'a': [1]}"


# --- CEL: a condition the library cannot survive is refused before it is compiled ------------------------------------


@pytest.mark.integration
def test_an_oversized_condition_is_refused_not_compiled(tmp_path):
    # 30000 `1 + ` made the CEL library crash the process with SIGSEGV (~120 KB, well inside the file bound).
    rules = write(tmp_path / "cel.yaml", RULE.replace("it.cpu_count > 0", "1 + " * 30000 + "1 > 0"))
    one_line(kdiag("rules", "check", "--rules-dir", str(rules)), 1,
             f"{rules}:5:9: rule 't': when: 120005 characters, more than 4096")
