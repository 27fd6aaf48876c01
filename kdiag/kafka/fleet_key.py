"""The key the daemons of one cluster share to sign their coordination: read only from a file no one else can read.

`kdiag fleet key -o FILE` writes a new one (32 random bytes as 64 hex digits, mode 0600); every daemon of the cluster
gets a copy at `kafka.coordination_key_file`. A key another user can read is no secret (they could sign records and
forge the fleet's diagnoses), so such a file is refused, as is one in a directory another user could swap it in.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys

from kdiag.core.errors import KdiagError
from kdiag.core.quote import quote
from kdiag.core.safeio import read_regular
from kdiag.core.trust import user_name, why_untrusted

KEY_BYTES = 32
READ_BY_OTHERS = stat.S_IRWXG | stat.S_IRWXO


class FleetKeyError(KdiagError):
    """A coordination key file kdiag refuses: says which and what to do."""

    exit_code = 2


def read_key(path: str) -> bytes:
    """The key in path; FleetKeyError unless only root or kdiag's user owns and can read it."""
    where, euid = quote(path, 200), os.geteuid()
    fix = f"write a new one with `kdiag fleet key -o {path}` (mode 0600, owned by kdiag's user)"
    if reason := why_untrusted(os.path.abspath(path), {0, euid}):
        raise FleetKeyError(f"kafka.coordination_key_file {where}: {reason}: {fix}")
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_mode & READ_BY_OTHERS:
            raise FleetKeyError(f"kafka.coordination_key_file {where} can be read by others (mode "
                                f"{stat.filemode(st.st_mode)}): chmod 0600 it, and if others may have read it, {fix} "
                                "and give every daemon of the cluster the new one")
        if st.st_uid not in (0, euid):
            raise FleetKeyError(f"kafka.coordination_key_file {where} belongs to {user_name(st.st_uid)}: {fix}")
        text = read_regular(path, 4096, follow_links=False).decode("ascii").strip()
    except FleetKeyError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        problem = getattr(e, "strerror", None) or str(e)
        raise FleetKeyError(f"kafka.coordination_key_file {where}: cannot read it ({problem}): {fix}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise FleetKeyError(f"kafka.coordination_key_file {where} is not {KEY_BYTES * 2} hex digits: {fix}")
    return key


def new_key_text() -> str:
    """A new key as its file holds it."""
    return secrets.token_hex(KEY_BYTES) + "\n"


def write_key(path: str) -> None:
    """Write a new key to path (never over an existing file or through a link), mode 0600; '-' is standard output."""
    text = new_key_text()
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise FleetKeyError(f"{quote(path, 200)}: not written ({e.strerror}); a key file is never overwritten: "
                            "remove the old one first, or write elsewhere") from None
    with open(fd, "w", encoding="ascii") as f:
        f.write(text)
