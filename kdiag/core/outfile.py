"""Files kdiag writes where a user points it (`-o`, `--html`): never through a link, never into another user's file."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from kdiag.core.errors import KdiagError
from kdiag.core.trust import why_untrusted


class OutputError(KdiagError):
    """An output path kdiag refuses to write: says which and what to do."""


def _parent_fault(path: Path) -> str | None:
    """Why path's directory must not take kdiag's file: another user owns it (or a directory above it), or could
    swap it; a root-owned sticky directory such as /tmp is fine."""
    parent = path.absolute().parent
    st = os.stat(parent)
    if st.st_uid == 0 and st.st_mode & stat.S_ISVTX:  # others cannot rename or replace kdiag's own entry here
        parent = parent.parent
    return why_untrusted(str(parent), {0, os.geteuid()})


def write_output(path: str | Path, text: str) -> None:
    """Write text to path ('-' is standard output), creating it 0644 or replacing a regular file of kdiag's user."""
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(path)
    if fault := _parent_fault(path):
        raise OutputError(f"{path}: not written: {fault}; write it elsewhere")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise OutputError(f"{path}: not written: {e.strerror} (a link is never followed); write it elsewhere") from e
    with open(fd, "w", encoding="utf-8") as out:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OutputError(f"{path}: not written: it exists and is not a regular file of this user; remove it or write elsewhere")
        os.ftruncate(fd, 0)
        out.write(text)


def check_output_dir(path: Path) -> None:
    """Refuse an existing directory (or a link) for kdiag's files unless this user owns it and no one else can write it."""
    if path.is_symlink():
        raise OutputError(f"{path}: is a link; record into a new directory")
    if path.is_dir() and (fault := why_untrusted(str(path.absolute()), {os.geteuid()})):
        raise OutputError(f"{path}: {fault}; record into a new directory")
    if fault := _parent_fault(path):
        raise OutputError(f"{path}: not written: {fault}; write it elsewhere")
