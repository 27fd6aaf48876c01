"""Hostile-proof reading of recordings: .tar.gz extraction, directory checks and path resolution inside a snapshot."""

from __future__ import annotations

import errno
import gzip
import io
import math
import os
import stat
import tarfile
import zlib
from pathlib import Path

from kdiag.core.errors import KdiagError
from kdiag.core.safeio import read_regular

MAX_FILE_BYTES = 64 * 2**20
MAX_TOTAL_BYTES = 2 * 2**30
MAX_ENTRIES = 1_000_000
MAX_LINK_TEXT = 4096
MAX_LINK_HOPS = 40
# A tar header block (GNU long name, pax) is read whole by tarfile: bound what it may ask for.
MAX_READ = 2**20
MAX_JSON_BYTES = 2**20  # manifest.json and meta.json
MAX_EPOCH = 1e10  # the year 2286
# kafka.json's one version: the shape of every state it holds (their types: kdiag/kafka/state.py; what each version
# changed and how older ones read: docs/RECORDING.md). Versions below it are read, newer ones refused.
KAFKA_STATE_VERSION = 2


class RecordingError(KdiagError):
    """A recording that cannot be read, with the path and what is wrong; exit_code 2 when the path is a usage error."""

    exit_code = 1


class StateError(ValueError):
    """A recorded state that is not of its type: the key path inside it and what is wrong."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


def is_number(value: object) -> bool:
    """Whether a JSON value is a finite number (not a bool)."""
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


class LinkOutside(FileNotFoundError):
    """A link that leads out of its snapshot, or one kept as text only: read as a missing file."""


def is_text_link(parts: tuple[str, ...] | list[str]) -> bool:
    """Whether a link at these snapshot-relative parts (proc/PID/cwd, proc/PID/fd/N) is kept as text, never followed."""
    if len(parts) == 3:
        return parts[0] == "proc" and parts[2] == "cwd"
    return len(parts) == 4 and parts[0] == "proc" and parts[2] == "fd"


def resolve_inside(base: str, parts: list[str], follow_last: bool = True) -> str:
    """The path under base that parts reach, following only relative links that stay in base; LinkOutside otherwise."""
    todo = list(reversed(parts))
    real: list[str] = []
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not real:
                raise LinkOutside(errno.ENOENT, "leads out of its snapshot", os.path.join(base, *parts))
            real.pop()
            continue
        path = os.path.join(base, *real, part)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode) and (todo or follow_last):
            target = os.readlink(path)
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
            if target.startswith("/") or is_text_link([*real, part]):
                raise LinkOutside(errno.ENOENT, "a link kdiag does not follow", path)
            todo.extend(reversed(target.split("/")))
            continue
        if todo and not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        real.append(part)
    return os.path.join(base, *real)


def read_recorded(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A file of this recording alone, of at most limit bytes: never through a link, never one with other hard links."""
    return read_regular(path, limit, follow_links=False, sole_link=True)


def _kind(mode: int) -> str:
    return {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device node", stat.S_IFBLK: "a device node",
            stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "not a file, directory or symlink")


def check_tree(top: Path) -> None:
    """Refuse a recording directory holding anything but bounded regular files, directories and links kept in their snapshot."""
    count = total = 0
    pending: list[tuple[str, ...]] = [()]
    while pending:
        rel = pending.pop()
        with os.scandir(os.path.join(top, *rel)) as entries:
            for entry in entries:
                parts = (*rel, entry.name)
                where = os.path.join(top, *parts)
                count += 1
                if count > MAX_ENTRIES:
                    raise RecordingError(f"{top}: more than {MAX_ENTRIES} entries")
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    pending.append(parts)
                elif stat.S_ISREG(st.st_mode):
                    if st.st_nlink > 1:
                        raise RecordingError(f"{where}: has other hard links; copy the recording")
                    if st.st_size > MAX_FILE_BYTES:
                        raise RecordingError(f"{where}: larger than {MAX_FILE_BYTES} bytes")
                    total += st.st_size
                    if total > MAX_TOTAL_BYTES:
                        raise RecordingError(f"{top}: larger than {MAX_TOTAL_BYTES} bytes in all")
                elif stat.S_ISLNK(st.st_mode):
                    _check_link(top, parts, where)
                else:
                    raise RecordingError(f"{where}: is {_kind(st.st_mode)}")


def _check_link(top: Path, parts: tuple[str, ...], where: str) -> None:
    target = os.readlink(where)
    if len(target) > MAX_LINK_TEXT:
        raise RecordingError(f"{where}: a symlink of more than {MAX_LINK_TEXT} characters")
    if len(parts) < 2:
        raise RecordingError(f"{where}: a symlink outside any snapshot")
    if is_text_link(parts[1:]):
        return
    try:
        resolve_inside(os.path.join(top, parts[0]), list(parts[1:]))
    except LinkOutside:
        raise RecordingError(f"{where}: is a symlink to {target!r}, outside its snapshot") from None
    except OSError:
        pass  # dangling inside the snapshot, as sysfs device links often are in a recording


class _BoundedReads(io.RawIOBase):
    """A read-only file whose single reads are bounded, so no crafted tar header makes tarfile read gigabytes at once."""

    def __init__(self, raw: gzip.GzipFile):
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_READ:
            raise tarfile.ReadError(f"a tar header asks to read {size} bytes at once")
        return self.raw.read(size)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()


def _leaves(path: str) -> bool:
    """Whether a relative path, read lexically, climbs above where it starts."""
    path = os.path.normpath(path)
    return path == ".." or path.startswith("../")


def _member_problem(member: tarfile.TarInfo, parts: list[str], kinds: dict[str, str]) -> str | None:
    """Why a member may not be extracted, or None."""
    if member.name.startswith("/") or ".." in parts:
        return "is an absolute path or has '..' in it"
    if member.islnk():
        return f"is a hard link to {member.linkname!r}"
    if not (member.isreg() or member.isdir() or member.issym()):
        kinds_of = {tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE: "a device node", tarfile.BLKTYPE: "a device node"}
        return f"is {kinds_of.get(member.type, 'not a file, directory or symlink')}"
    key = "/".join(parts)
    if kinds.get(key) == "member" or (key in kinds and not member.isdir()):
        return "appears twice"
    for i in range(1, len(parts)):
        if kinds.get("/".join(parts[:i]), "dir") != "dir":
            return f"is inside {'/'.join(parts[:i])!r}, which is not a directory"
    if member.isreg() and member.size > MAX_FILE_BYTES:
        return f"is {member.size} bytes, larger than the {MAX_FILE_BYTES} a file may be"
    if member.issym():
        link = member.linkname
        if len(link) > MAX_LINK_TEXT:
            return f"is a symlink of more than {MAX_LINK_TEXT} characters"
        text_only = len(parts) >= 3 and is_text_link(parts[-4 if parts[-2] == "fd" else -3:])
        if not text_only and (link.startswith("/") or _leaves(os.path.join(*parts[:-1], link))):
            return f"is a symlink to {link!r}, outside the recording"
    return None


def extract(archive: Path, dest: Path) -> None:
    """Extract a .tar.gz recording into the empty directory dest, refusing any member a recording cannot hold."""
    kinds: dict[str, str] = {}  # path -> "dir" (a directory) or "member" (a file or link)
    total = 0
    try:
        with gzip.open(archive) as raw, tarfile.open(fileobj=_BoundedReads(raw), mode="r:") as tar:
            count = 0
            while (member := tar.next()) is not None:
                # tarfile keeps every header it read (in .members, which its stubs leave out): a million would not fit
                tar.members.clear()  # type: ignore[attr-defined]
                count += 1
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                problem = f"makes more than {MAX_ENTRIES} entries" if count > MAX_ENTRIES else _member_problem(
                    member, parts, kinds)
                total += member.size if member.isreg() else 0
                if total > MAX_TOTAL_BYTES and not problem:
                    problem = f"makes the recording larger than {MAX_TOTAL_BYTES} bytes"
                if problem:
                    raise RecordingError(f"{archive}: member {member.name!r} {problem}")
                if parts:
                    _write(tar, member, dest.joinpath(*parts))
                for i in range(1, len(parts)):
                    kinds["/".join(parts[:i])] = "dir"
                if parts:
                    kinds["/".join(parts)] = "dir" if member.isdir() else "member"
            # tarfile stops at the end-of-archive blocks: read the rest so a cut gzip stream is noticed.
            raw.read(MAX_READ)
            if raw.read(1):
                raise RecordingError(f"{archive}: more than {MAX_READ} bytes after the end of the archive")
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise RecordingError(f"{archive}: not a readable .tar.gz recording ({e})") from None
    except OSError as e:
        raise RecordingError(f"{archive}: cannot extract: {e}") from None


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    """Create one checked member; its parents are directories this extraction made, never links."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if member.isdir():
        path.mkdir(exist_ok=True)
    elif member.issym():
        os.symlink(member.linkname, path)
    else:
        source = tar.extractfile(member)
        assert source is not None  # _member_problem lets only regular files this far
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as out:
            left = member.size
            while left > 0:
                chunk = source.read(min(left, MAX_READ))
                if not chunk:
                    raise tarfile.ReadError(f"member {member.name!r} is cut short")
                out.write(chunk)
                left -= len(chunk)
