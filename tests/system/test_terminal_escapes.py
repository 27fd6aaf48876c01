"""Outside strings reach a terminal escaped: a process naming itself ESC ] 0; or ESC [ 1A cannot drive `kdiag diagnose`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kdiag.cli.main import main
from kdiag.core.quote import printable, printable_lines
from tests.paths import RECORDINGS

# Retitle the window, then move up a line and erase it: an earlier line of the report rewritten.
HOSTILE = "\x1b]0;pwned\x07\x1b[1A\x1b[2K"
SHOWN = r"\x1b]0;pwned\x07\x1b[1A\x1b[2K"


@pytest.fixture
def hostile_recording(tmp_path: Path) -> Path:
    """foreign-io-scanner with the scanner's name and command line holding terminal escapes."""
    rec = tmp_path / "hostile"
    shutil.copytree(RECORDINGS / "foreign-io-scanner", rec, symlinks=True)
    for pid_dir in rec.glob("*/proc/3100"):
        stat = pid_dir / "stat"
        stat.write_text(stat.read_text().replace("(python3)", f"(py{HOSTILE})"))
        (pid_dir / "comm").write_text(f"py{HOSTILE}\n")
        (pid_dir / "cmdline").write_text(f"/usr/bin/python3\0/opt/ops/{HOSTILE}.py\0--every\0{HOSTILE}\0")
    return rec


@pytest.mark.parametrize("cmdline", ["masked", "full"])
def test_diagnose_shows_a_hostile_process_name_escaped(hostile_recording: Path, tmp_path: Path, cmdline: str,
                                                       capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "kdiag.yaml"
    config.write_text(json.dumps({"processes": {"cmdline": cmdline}}))
    assert main(["diagnose", "--from", str(hostile_recording), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "CAUSE foreign_io_scanner" in out and f"pid 3100 py{SHOWN} (not the broker)" in out
    if cmdline == "full":
        assert f"cmdline=/usr/bin/python3 /opt/ops/{SHOWN}.py --every {SHOWN}" in out


def test_an_error_naming_a_hostile_file_shows_it_escaped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(RECORDINGS / "swap-in-use", rec, symlinks=True)
    os.mkfifo(rec / "0000" / "proc" / f"x{HOSTILE}")
    assert main(["diagnose", "--from", str(rec)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and f"proc/x{SHOWN}: is a FIFO" in err


def test_printable_escapes_what_a_terminal_or_a_line_split_acts_on() -> None:
    assert printable("kafka-logs-0 \u00e9\u65e5") == "kafka-logs-0 \u00e9\u65e5"
    assert printable(HOSTILE) == SHOWN
    assert printable("a\r\nb\tc\x7fd\x85e\u2028f\u2029g") == r"a\x0d\x0ab\x09c\x7fd\x85e\u2028f\u2029g"
    # Bidi overrides reorder what is shown; a lone surrogate (an undecodable byte) cannot even be written out.
    assert printable("x\u202egnp.exe\udcff\U000e0041") == r"x\u202egnp.exe\udcff\U000e0041"
    for text in ("\x00\x1f\x9b", "".join(map(chr, range(0x2000, 0x2030)))):
        assert len(printable(text).splitlines()) == 1 and printable(text).isprintable()
    assert printable_lines("first\nsecond \x1b[2K\r") == "first\nsecond \\x1b[2K\\x0d"
