"""Whether kdiag (root) may execute or load a file: it, and every directory above it, belongs to a trusted owner and
no one else can write to it, so what was checked is what runs, however long after.

`why_untrusted` answers for one path, `why_untrusted_classpath` for a Java classpath (a `dir/*` entry: the directory
and each jar in it); both say why not, or None. `trusted_program` finds a program on PATH that passes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Collection

MAX_LINKS = 40  # as the kernel's path walk
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UntrustedError(RuntimeError):
    """A program kdiag will not run: says which and why."""


def user_name(uid: int) -> str:
    """uid N (name), or uid N when no user has it."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _owners(owners: Collection[int]) -> str:
    return " or ".join(user_name(uid) for uid in sorted(owners))


def _judge(path: str, st: os.stat_result, owners: Collection[int]) -> tuple[str, bool]:
    """(why path is not trusted, or ""; whether that is only others' write access to a root-owned sticky directory,
    which keeps each entry in it from everyone but the entry's owner)."""
    if st.st_uid not in owners:
        return f"{path} belongs to {user_name(st.st_uid)}, not to {_owners(owners)}", False
    if st.st_mode & WRITABLE_BY_OTHERS:
        sticky = st.st_uid == 0 and stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
        return f"{path} can be written by others (mode {stat.filemode(st.st_mode)})", sticky
    return "", False


def why_untrusted(path: str, owners: Collection[int], base: str = "") -> str | None:
    """Why root must not execute or load path, or None: each directory from / down, each link followed and the path
    itself belong to one of owners and are writable by no one else (a missing path: its directory decides). With
    base (/proc/PID/root), path is inside that root, and has no link: this host would resolve one against its own."""
    if not path.startswith("/"):
        return f"{path} is not an absolute path"
    names = [n for n in reversed(path.split("/")) if n not in ("", ".")]
    current, links = "/", 0
    fault, sticky = _judge(current, os.lstat(base + current), owners)
    while names:
        name = names.pop()
        if name == "..":
            current = os.path.dirname(current)
            fault, sticky = _judge(current, os.lstat(base + current), owners)
            continue
        if fault and not sticky:
            return fault
        child = os.path.join(current, name)
        try:
            st = os.lstat(base + child)
        except FileNotFoundError:
            return fault or None  # only whoever may write to `current` can create it
        except OSError as e:
            return f"{child}: {e.strerror}"
        if stat.S_ISLNK(st.st_mode):
            if base:
                return f"{child} is a symbolic link in another mount namespace's root"
            if st.st_uid not in owners:
                return f"{child} is a link of {user_name(st.st_uid)}, not of {_owners(owners)}"
            links += 1
            if links > MAX_LINKS:
                return f"{path}: more than {MAX_LINKS} symbolic links"
            target = os.readlink(child)
            if target.startswith("/"):
                current = "/"
                fault, sticky = _judge(current, os.lstat(current), owners)
            names += [n for n in reversed(target.split("/")) if n not in ("", ".")]
            continue
        current = child
        fault, sticky = _judge(current, st, owners)
    return fault or None


def why_untrusted_classpath(classpath: str, owners: Collection[int], base: str = "") -> str | None:
    """Why root must not run Java with classpath, or None: every entry trusted, and for `dir/*` each jar in dir
    (inside base, as why_untrusted)."""
    for entry in classpath.split(":"):
        if not entry:
            return "an empty classpath entry stands for the working directory"
        directory = entry[:-1] if entry.endswith("/*") else None
        if reason := why_untrusted(directory or entry, owners, base):
            return reason
        if directory is None:
            continue
        try:
            names = sorted(os.listdir(base + directory))
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{directory}: {e.strerror}"
        # As Java expands dir/*: every .jar or .JAR file in it, hidden ones too.
        for name in names:
            if name.endswith((".jar", ".JAR")) and (reason := why_untrusted(os.path.join(directory, name), owners, base)):
                return reason
    return None


def trusted_program(name: str) -> str:
    """The program on PATH, links resolved, when root's (or kdiag's own user's) and writable by no one else."""
    found = shutil.which(name)
    if found is None:
        raise UntrustedError(f"no {name} on PATH")
    if reason := why_untrusted(found, {0, os.geteuid()}):
        raise UntrustedError(f"{found} is not run: {reason}")
    return os.path.realpath(found)
