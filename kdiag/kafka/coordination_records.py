"""What the daemons of a cluster say to each other through Kafka, signed, and read back as hostile input.

Any client that can write to Kafka can write to kdiag's state topic and join its group. With a fleet key
(kafka.coordination_key_file) every record carries an HMAC-SHA256 of its key and value in the `kdiag-mac` header,
and every daemon's group membership one in its client.id (`kdiag/HOST/BROKER/NONCE.MAC`): a record or a member
without a valid MAC is foreign. Without a key nothing can be proven, and the page and JSON say "unauthenticated".

Whatever the key, a record is parsed as hostile: at most MAX_RECORD_BYTES, nesting checked before json.loads, and a
strict schema (known cluster-scope rule ids, strings of at most MAX_STRING characters, finite numbers, times within
MAX_AGE_SECONDS and not in the future); a refused record says why in one word (Refused.reason) for the counter.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import re
import secrets
from array import array
from dataclasses import dataclass
from typing import Any, TypeGuard

from kdiag.core.quote import printable

FORMAT = "kdiag-state"
VERSION = 1
MAC_HEADER = "kdiag-mac"
CLIENT_ID_PREFIX = "kdiag/"
ALIVE_SUFFIX = b"\x00alive"  # the heartbeat's record key: the group's name and this
MAX_RECORD_BYTES = 1 << 20
MAX_STRING = 1024
MAX_DIAGNOSES = 1000
MAX_EVIDENCE = 100  # values per diagnosis; kdiag's own rules have at most a dozen
MAX_BROKERS = 10000
MAX_AGE_SECONDS = 30 * 86400.0
# Hosts' clocks differ a little (NTP keeps them within milliseconds; a VM's after a pause, seconds): a `since` this far
# ahead of the reader's clock is taken as now, anything further is refused.
CLOCK_SKEW_SECONDS = 60.0
MAX_DEPTH = 5  # record {} > diagnoses [] > diagnosis {} > evidence {} / brokers []
STATES = ("pending", "firing")
REASONS = ("too_large", "bad_mac", "too_deep", "not_json", "schema", "stale", "replayed", "wrong_author")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_MEMBER_NONCE = secrets.token_hex(4)  # one per coordination process: each start is another membership


class Refused(ValueError):
    """A record kdiag will not take; reason is one of REASONS."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Member:
    """One daemon as the others name it: its host and the broker it runs beside (None on a load host)."""

    host: str
    broker_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The `reported_by` object of /api/diagnoses."""
        return {"host": self.host, "broker_id": self.broker_id}


def _mac(key: bytes, *parts: bytes) -> str:
    return hmac.new(key, b"\x00".join(parts), hashlib.sha256).hexdigest()


def record_mac(key: bytes, message_key: bytes, value: bytes) -> str:
    """The `kdiag-mac` header of a state topic record."""
    return _mac(key, FORMAT.encode(), message_key, value)


def mac_holds(key: bytes, message_key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None) -> bool:
    """Whether a record's `kdiag-mac` header is the MAC of its key and value under the fleet key."""
    given = next((v for k, v in headers or [] if k == MAC_HEADER), None)
    return isinstance(given, bytes) and hmac.compare_digest(given, record_mac(key, message_key, value).encode())


def client_id(me: Member, group: str, key: bytes | None) -> str:
    """The coordination clients' client.id: who this daemon is, and with a key the proof that it is one of the fleet."""
    plain = f"{CLIENT_ID_PREFIX}{me.host}/{'' if me.broker_id is None else me.broker_id}"
    if key is None:
        return plain
    nonce = _MEMBER_NONCE
    return f"{plain}/{nonce}.{_mac(key, b'member', group.encode(), plain.encode(), nonce.encode())[:32]}"


def member_of(client: str, group: str, key: bytes | None) -> Member | None:
    """The daemon a client.id names; None for a client that is not a kdiag coordination client of this fleet."""
    if not client.startswith(CLIENT_ID_PREFIX) or len(client) > 2 * MAX_STRING:
        return None
    plain = client
    if key is not None:
        plain, _, proof = client.rpartition("/")
        nonce, _, mac = proof.partition(".")
        if not hmac.compare_digest(mac.encode(), _mac(key, b"member", group.encode(), plain.encode(),
                                                      nonce.encode())[:32].encode()):
            return None
    host, _, broker = plain[len(CLIENT_ID_PREFIX):].rpartition("/")
    return Member(host, int(broker) if broker.isdigit() and len(broker) < 10 else None)


def nesting(value: bytes) -> int:
    """How deep a JSON text's arrays and objects nest, without parsing it (strings' brackets do not count)."""
    brackets = _JSON_STRING.sub(b"", value).translate(None, _NOT_BRACKETS).translate(_BRACKETS)
    return max(itertools.accumulate(array("b", brackets)), default=0)


def encode(record: dict[str, Any]) -> bytes:
    """A record's value: JSON without NaN (refused by every reader, as by JSON.parse)."""
    return json.dumps(record, allow_nan=False, separators=(",", ":")).encode()


def parse(value: bytes, now: float, rule_ids: frozenset[str], group: str) -> dict[str, Any]:
    """A state or heartbeat record checked against the schema, its strings made printable; Refused otherwise."""
    if len(value) > MAX_RECORD_BYTES:
        raise Refused("too_large", f"{len(value)} bytes, more than {MAX_RECORD_BYTES}")
    if (depth := nesting(value)) > MAX_DEPTH:
        raise Refused("too_deep", f"nested {depth} deep")
    try:
        record = json.loads(value, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise Refused("not_json", type(e).__name__) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("version") != VERSION:
        raise Refused("schema", f"not a {FORMAT} version {VERSION} record")
    if record.get("group") != group:
        raise Refused("schema", "another group's record")
    out = {"format": FORMAT, "version": VERSION, "group": group, "kind": _one_of(record, "kind", ("state", "alive")),
           "host": _string(record, "host"), "member_id": _string(record, "member_id"),
           "broker_id": _broker_id(record.get("broker_id")), "saved": _time(record, "saved", now)}
    if out["kind"] == "state":
        entries = record.get("diagnoses")
        if not isinstance(entries, list) or len(entries) > MAX_DIAGNOSES:
            raise Refused("schema", f"'diagnoses' is not a list of at most {MAX_DIAGNOSES}")
        out["diagnoses"] = [_diagnosis(e, i, now, rule_ids) for i, e in enumerate(entries)]
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _string(obj: dict[str, Any], name: str, where: str = "") -> str:
    value = obj.get(name)
    if not isinstance(value, str) or len(value) > MAX_STRING:
        raise Refused("schema", f"{where}{name} is not a string of at most {MAX_STRING} characters")
    return printable(value)


def _one_of(obj: dict[str, Any], name: str, allowed: tuple[str, ...], where: str = "") -> str:
    value = obj.get(name)
    if value not in allowed:
        raise Refused("schema", f"{where}{name} is not one of {', '.join(allowed)}")
    return str(value)


def _broker_id(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31):
        return value
    raise Refused("schema", "broker_id is not a node id")


def finite(value: Any) -> TypeGuard[int | float]:
    """Whether value is a JSON number a reader takes: an int or a finite float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _time(obj: dict[str, Any], name: str, now: float, where: str = "") -> float:
    value = obj.get(name)
    if not finite(value):
        raise Refused("schema", f"{where}{name} is not a finite number")
    if value < now - MAX_AGE_SECONDS:
        raise Refused("stale", f"{where}{name} is more than {MAX_AGE_SECONDS / 86400:g} days ago")
    if value > now + CLOCK_SKEW_SECONDS:
        raise Refused("schema", f"{where}{name} is in the future")
    return min(float(value), now)


def _diagnosis(e: Any, i: int, now: float, rule_ids: frozenset[str]) -> dict[str, Any]:
    where = f"diagnoses[{i}]."
    if not isinstance(e, dict):
        raise Refused("schema", f"{where[:-1]} is not an object")
    rule = e.get("rule")
    if not isinstance(rule, str) or rule not in rule_ids:
        raise Refused("schema", f"{where}rule is not a known cluster-scope rule")
    evidence, brokers = e.get("evidence"), e.get("brokers")
    if not isinstance(evidence, dict) or len(evidence) > MAX_EVIDENCE:
        raise Refused("schema", f"{where}evidence is not an object of at most {MAX_EVIDENCE} values")
    clean: dict[str, str | float | None] = {}
    for name, value in evidence.items():
        if len(name) > MAX_STRING or not (value is None or finite(value)
                                           or (isinstance(value, str) and len(value) <= MAX_STRING)):
            raise Refused("schema", f"{where}evidence holds a value that is not a finite number or a short string")
        clean[printable(name)] = printable(value) if isinstance(value, str) else value
    if brokers is not None and not (isinstance(brokers, list) and len(brokers) <= MAX_BROKERS and all(
            (isinstance(b, str) and len(b) <= MAX_STRING) or (isinstance(b, int) and not isinstance(b, bool)
            and abs(b) < 1 << 31) for b in brokers)):
        raise Refused("schema", f"{where}brokers is not a list of node ids")
    subject = e.get("subject")
    if not isinstance(subject, str) or len(subject) > MAX_STRING:  # kept as it is: the page and labels escape it
        raise Refused("schema", f"{where}subject is not a string of at most {MAX_STRING} characters")
    return {"rule": rule, "subject": subject, "state": _one_of(e, "state", STATES, where),
            "since": _time(e, "since", now, where), "summary": _string(e, "summary", where), "evidence": clean,
            "brokers": None if brokers is None else [str(b) for b in brokers]}
