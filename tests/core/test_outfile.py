"""Output paths kdiag (root) writes where a user points it: never through a link or into another user's file."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from kdiag.core.outfile import OutputError, check_output_dir, write_output

NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A root-only file an attacker wants kdiag to overwrite."""
    target = tmp_path / "shadow"
    target.write_text("root-only\n")
    target.chmod(0o600)
    return target


def test_a_planted_link_at_the_output_path_is_not_followed(tmp_path: Path, secret: Path) -> None:
    link = tmp_path / "report.html"
    link.symlink_to(secret)
    with pytest.raises(OutputError, match=r"report\.html: not written"):
        write_output(link, "<html>")
    assert secret.read_text() == "root-only\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_another_users_file_or_directory_is_not_written(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.html"
    theirs.write_text("theirs")
    os.chown(theirs, NOBODY, -1)
    with pytest.raises(OutputError, match="not a regular file of this user"):
        write_output(theirs, "<html>")
    assert theirs.read_text() == "theirs"
    their_dir = tmp_path / "dir"
    their_dir.mkdir()
    os.chown(their_dir, NOBODY, -1)
    with pytest.raises(OutputError, match="belongs to uid"):
        write_output(their_dir / "report.html", "<html>")
    with pytest.raises(OutputError, match="belongs to uid"):
        check_output_dir(their_dir)
    assert not (their_dir / "report.html").exists()


def test_a_fifo_at_the_output_path_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError):
        write_output(fifo, "x")


def test_own_file_is_replaced_and_dash_is_standard_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    out.write_text("old and longer than the new text")
    write_output(out, "new")
    assert out.read_text() == "new"
    write_output("-", "to stdout")
    assert capsys.readouterr().out == "to stdout"


def test_recording_into_a_linked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "rec"
    link.symlink_to(real)
    with pytest.raises(OutputError, match="is a link"):
        check_output_dir(link)


def test_a_report_in_tmp_is_written(tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    write_output(sticky / "report.html", "<html>")
    assert (sticky / "report.html").read_text() == "<html>"
