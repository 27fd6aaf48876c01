"""The diagnoses' pending/firing state and `since` times, kept in a small JSON file across restarts."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from kdiag.catalog import Rule
from kdiag.engine import Diagnosis

log = logging.getLogger(__name__)

FORMAT = "kdiag-state"
VERSION = 1
DEFAULT_DIR = "/var/lib/kdiag"
FILE_NAME = "state.json"
# Rewritten at least this often, so that `saved` says how long kdiag was away when it starts again.
REFRESH_SECONDS = 60.0
# A diagnosis kept longer than max(this, its rule's `for`) is not restored: its condition may have ended meanwhile.
RESTORE_WITHIN_SECONDS = 600.0


def state_path(setting: str, replay: bool) -> Path | None:
    """The state file for a `state_dir` setting: "auto" is DEFAULT_DIR for live runs when writable, "" is off."""
    if setting == "auto":
        if replay or not os.access(DEFAULT_DIR, os.W_OK):
            return None
        setting = DEFAULT_DIR
    if not setting:
        return None
    if not os.access(setting, os.W_OK):
        log.warning("state_dir %s is not a writable directory: diagnoses will not survive a restart", setting)
        return None
    return Path(setting) / FILE_NAME


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
    restored, dropped = [], []
    for e in entries:
        got = _entry(e, rules, now, saved)
        (restored if isinstance(got, Diagnosis) else dropped).append(got)
    return restored, dropped


def _time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _entry(e: Any, rules: dict[str, Rule], now: float, saved: float) -> Diagnosis | str:
    """One saved diagnosis, or why it is not restored."""
    if not isinstance(e, dict) or not isinstance(e.get("subject"), str) or not _time(e.get("since")) \
            or e.get("state") not in ("pending", "firing") or not isinstance(e.get("evidence", {}), dict):
        return f"malformed entry {str(e)[:80]}"
    rule = rules.get(e.get("rule"))
    if rule is None:
        return f"{str(e.get('rule'))[:80]!r}: no such rule"
    if now - saved > max(RESTORE_WITHIN_SECONDS, rule.for_seconds) or e["since"] > now:
        return f"{rule.id} {e['subject']}: saved {now - saved:.0f}s ago"
    brokers = e.get("brokers")
    return Diagnosis(rule, e["subject"], float(e["since"]), e["state"], str(e.get("summary", "")),
                     dict(e.get("evidence") or {}),
                     brokers=frozenset(map(str, brokers)) if isinstance(brokers, list) else None)


class StateFile:
    """Saves the active diagnoses when they change (and every REFRESH_SECONDS), atomically; loads them at start."""

    def __init__(self, path: Path, host: str):
        self.path = path
        self.host = host
        self._written: tuple = ()
        self._written_at = 0.0
        self._failing = False

    def load(self, rules: list[Rule], now: float) -> list[Diagnosis]:
        """The diagnoses saved by the previous run on this host; anything unusable is dropped with one log line."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            log.warning("state file %s unreadable (%s): starting without it", self.path, e)
            return []
        try:
            restored, dropped = decode(json.loads(text), self.host, {r.id: r for r in rules}, now)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            log.warning("state file %s is corrupt (%s: %s): starting without it", self.path, type(e).__name__,
                        str(e)[:200])
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
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(encode(self.host, now, diagnoses), f, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            if not self._failing:
                log.warning("cannot save state to %s (%s): diagnoses will not survive a restart", self.path, e)
            self._failing = True
            return
        self._failing = False
        self._written, self._written_at = signature, now
