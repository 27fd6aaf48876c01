"""The diagnoses' pending/firing state and `since` times, kept in a small JSON file across restarts."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import secrets
import stat
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeGuard, get_args

from kdiag.core.finite import dumps
from kdiag.analysis.catalog import Rule
from kdiag.config.settings import ConfigError
from kdiag.analysis.engine import Diagnosis, DiagnosisState
from kdiag.core.errors import KdiagError
from kdiag.core.quote import quote
from kdiag.core.trust import WRITABLE_BY_OTHERS, user_name, why_untrusted

log = logging.getLogger(__name__)

FORMAT = "kdiag-state"
VERSION = 1
DEFAULT_DIR = "/var/lib/kdiag"
FILE_NAME = "state.json"
TEMP_PREFIX = f".{FILE_NAME}."  # each save writes a new randomly named temp file, then renames it over FILE_NAME
LOCK_NAME = "lock"  # flock()ed by the daemon using the directory, for its whole life; holds its pid
# A file past this is not read. Every topic and group rule (13) firing on 1,000 subjects each, more than the 50,000-
# partition benchmark's 500 topics and 1,000 groups could: 13,000 diagnoses, 4.6 MiB. This holds about 90,000.
MAX_BYTES = 32 << 20
# Rewritten at least this often, so that `saved` says how long kdiag was away when it starts again.
REFRESH_SECONDS = 60.0
HOLDER_WRITE_SECONDS = 0.5  # how long a loser waits for the lock holder to write its pid
# A diagnosis kept longer than max(this, its rule's `for`) is not restored: its condition may have ended meanwhile.
RESTORE_WITHIN_SECONDS = 600.0


class StateDirError(ConfigError):
    """state_dir is not a directory only kdiag's user can write in (nor are the directories above it)."""


class StateDirBusy(KdiagError):
    """Another kdiag holds the state_dir's lock."""

    exit_code = 1


def state_path(setting: str, replay: bool) -> Path | None:
    """The state file for a `state_dir` setting: "auto" is DEFAULT_DIR for live runs when writable, "" is off."""
    if setting == "auto":
        if replay or not os.access(DEFAULT_DIR, os.W_OK):
            return None
        setting = DEFAULT_DIR
    if not setting:
        return None
    if os.path.lexists(setting) and not os.access(setting, os.W_OK):
        log.warning("state_dir %s is not a writable directory: diagnoses will not survive a restart", quote(setting, 200))
        return None
    return Path(setting) / FILE_NAME  # a missing directory is created (0700) by StateFile


def open_own_dir(directory: str) -> int:
    """A descriptor of `directory` (made 0700 if missing); StateDirError unless kdiag's user owns it and it and every
    directory above it can be written by no one else (trust.why_untrusted): nobody else can plant a file or a
    symlink in it, or swap it for another."""
    path, euid, where = os.path.abspath(directory), os.geteuid(), quote(directory, 200)
    elsewhere = "set state_dir to a directory only kdiag's user can write in"
    if reason := why_untrusted(path, {0, euid}):
        raise StateDirError(f"state_dir {where} is not kdiag's alone: {reason}: make it and the directories above it "
                            f"writable by root or kdiag's user only (chown, chmod go-w), or {elsewhere}")
    try:
        with suppress(FileExistsError):
            os.mkdir(path, 0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        problem = "is a symlink" if os.path.islink(path) else f"cannot be opened ({e.strerror or e})"
        raise StateDirError(f"state_dir {where} {problem}: {elsewhere}") from None
    st = os.fstat(fd)
    if st.st_uid != euid or st.st_mode & WRITABLE_BY_OTHERS:  # already checked by path; this is the one opened
        os.close(fd)
        raise StateDirError(f"state_dir {where} belongs to {user_name(st.st_uid)} with mode {stat.filemode(st.st_mode)}:"
                            f" chown {euid} and chmod 0700 it, or {elsewhere}")
    return fd


def encode(host: str, saved: float, diagnoses: list[Diagnosis]) -> dict[str, Any]:
    """The file's JSON object."""
    return {"format": FORMAT, "version": VERSION, "host": host, "saved": saved,
            "diagnoses": [{"rule": d.rule.id, "subject": d.subject, "state": d.state, "since": d.since,
                           "summary": d.summary, "evidence": d.evidence,
                           "brokers": sorted(d.brokers) if d.brokers is not None else None} for d in diagnoses]}


def decode(data: Any, host: str, rules: dict[str, Rule], now: float) -> tuple[list[Diagnosis], list[str]]:
    """The diagnoses to restore and why the others are not; ValueError when the object is not a state file."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError(f"not a {FORMAT} version {VERSION} object")
    if data.get("host") != host:
        return [], [f"it is {str(data.get('host'))[:80]!r}'s state, not {host!r}'s"]
    saved, entries = data.get("saved"), data.get("diagnoses")
    if not _time(saved) or not isinstance(entries, list):
        raise ValueError("no 'saved' time or no 'diagnoses' list")
    restored: list[Diagnosis] = []
    dropped: list[str] = []
    for e in entries:
        got = _entry(e, rules, now, saved)
        if isinstance(got, Diagnosis):
            restored.append(got)
        else:
            dropped.append(got)
    return restored, dropped


def _time(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _entry(e: Any, rules: dict[str, Rule], now: float, saved: float) -> Diagnosis | str:
    """One saved diagnosis, or why it is not restored."""
    if not _well_formed(e):
        return f"malformed entry {quote(e)}"
    rule = rules.get(e.get("rule"))
    if rule is None:
        return f"{quote(e.get('rule'))}: no such rule"
    if now - saved > max(RESTORE_WITHIN_SECONDS, rule.for_seconds) or e["since"] > now:
        return f"{rule.id} {e['subject']}: saved {now - saved:.0f}s ago"
    brokers = e.get("brokers")
    return Diagnosis(rule, e["subject"], float(e["since"]), e["state"], str(e.get("summary", "")),
                     dict(e.get("evidence") or {}),
                     brokers=frozenset(map(str, brokers)) if brokers is not None else None)


def _well_formed(e: Any) -> bool:
    """An entry as encode() writes it: evidence values and broker ids are flat (no nesting reaches the daemon)."""
    if not isinstance(e, dict) or not isinstance(e.get("rule"), str) or not isinstance(e.get("subject"), str) \
            or not _time(e.get("since")) \
            or e.get("state") not in get_args(DiagnosisState):
        return False
    evidence, brokers = e.get("evidence") or {}, e.get("brokers")
    return isinstance(evidence, dict) and all(isinstance(v, str | int | float | None) for v in evidence.values()) \
        and (brokers is None or (isinstance(brokers, list) and all(isinstance(b, str | int) for b in brokers)))


class StateFile:
    """Saves the active diagnoses when they change (and every REFRESH_SECONDS), atomically; loads them at start.

    Holds the directory (open_own_dir) and its lock from creation to close(): StateDirError when the directory is
    not kdiag's alone, StateDirBusy when another kdiag uses it."""

    def __init__(self, path: Path, host: str):
        self.path = path
        self.host = host
        self._written: tuple[tuple[str, str, str, float], ...] = ()
        self._written_at = 0.0
        self._failing = False
        self._dir = open_own_dir(str(path.parent))
        try:
            self._lock = self._take_lock()
        except BaseException:
            os.close(self._dir)
            raise
        for name in os.listdir(self._dir):  # left by a kdiag killed mid-save; nobody else writes here
            if name.startswith(TEMP_PREFIX) and name.endswith(".tmp"):
                with suppress(OSError):
                    os.unlink(name, dir_fd=self._dir)

    def _take_lock(self) -> int:
        """The lock file's descriptor, flock()ed, with this process's pid written in it."""
        where = quote(str(self.path.parent), 200)
        try:
            fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                         dir_fd=self._dir)
        except OSError as e:
            raise StateDirError(f"state_dir {where}: cannot open its {LOCK_NAME} file ({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._holder(fd)
            os.close(fd)
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise StateDirBusy(f"state_dir {where} is in use by another kdiag{pid}: stop it, or give each kdiag "
                               "its own state_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    @staticmethod
    def _holder(fd: int) -> str:
        """The pid the lock's holder wrote, or "" when it wrote none within HOLDER_WRITE_SECONDS."""
        deadline = time.monotonic() + HOLDER_WRITE_SECONDS
        while True:
            # the holder writes its pid just after taking the lock: a loser racing it reads the file still empty
            holder = os.pread(fd, 20, 0).decode("ascii", "replace").strip()
            if holder or time.monotonic() > deadline:
                return holder
            time.sleep(0.01)

    def close(self) -> None:
        """Release the directory and its lock."""
        os.close(self._lock)
        os.close(self._dir)

    def _read(self) -> bytes:
        """The file's bytes; OSError when it is missing, not a regular file (a symlink is not followed) or too big."""
        fd = os.open(FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._dir)
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError("not a regular file")
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise OSError(f"larger than the {MAX_BYTES >> 20} MiB a state file can be")
        return data

    def load(self, rules: list[Rule], now: float) -> list[Diagnosis]:
        """The diagnoses saved by the previous run on this host; anything unusable is dropped with one log line."""
        try:
            text = self._read().decode("utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            reason = "a symlink, not followed" if getattr(e, "errno", None) == errno.ELOOP else e
            log.warning("state file %s unreadable (%s): starting without it", self.path, reason)
            return []
        try:
            restored, dropped = decode(json.loads(text), self.host, {r.id: r for r in rules}, now)
        except RecursionError:  # json nests no deeper than the interpreter's recursion limit
            log.warning("state file %s is corrupt (nested too deep): starting without it", self.path)
            return []
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("state file %s is corrupt (%s: %s): starting without it", self.path, type(e).__name__,
                        quote(str(e), 200))
            return []
        if dropped:
            more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
            log.warning("state file %s: not restored: %s%s", self.path, "; ".join(dropped[:5]), more)
        if restored:
            log.info("restored %d diagnosis(es) from %s", len(restored), self.path)
        return restored

    def save(self, diagnoses: list[Diagnosis], force: bool = False) -> None:
        """Write the diagnoses when their states changed or the file is due a refresh; a failure is logged once."""
        now = time.time()
        signature = tuple((d.rule.id, d.subject, d.state, d.since) for d in diagnoses)
        if not force and signature == self._written and now - self._written_at < REFRESH_SECONDS:
            return
        data = dumps(encode(self.host, now, diagnoses), "state_file", default=str).encode()
        tmp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
        try:
            # A new name, never an existing file or symlink: O_EXCL fails on both.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self._dir)
            try:
                with open(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(fd)
                os.replace(tmp, FILE_NAME, src_dir_fd=self._dir, dst_dir_fd=self._dir)
            except BaseException:
                with suppress(OSError):
                    os.unlink(tmp, dir_fd=self._dir)
                raise
            os.fsync(self._dir)
        except OSError as e:
            if not self._failing:
                log.warning("cannot save state to %s (%s): diagnoses will not survive a restart", self.path, e)
            self._failing = True
            return
        self._failing = False
        self._written, self._written_at = signature, now
