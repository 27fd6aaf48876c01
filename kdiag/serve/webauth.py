"""Basic auth that costs an attacker more than kdiag: cached verdicts, one bcrypt thread, per-client backoff."""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import ipaddress
import math
import secrets
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import bcrypt

# bcrypt reads at most 72 bytes; htpasswd and Go's bcrypt (exporter-toolkit's) ignore the rest, bcrypt 5 raises.
BCRYPT_MAX_PASSWORD = 72
# Checks running or queued on the one bcrypt thread; past this, a check is turned away (503) instead of queued.
MAX_PENDING = 4
# A client with failures on record gets a check only while fewer are pending: the other places stay for first logins.
MAX_PENDING_FOR_FAILED = 2
MAX_VERIFIED = 256
MAX_FAILED = 4096
MAX_CLIENTS = 4096
# A client's failures (within FORGET_FAILURES_AFTER_S of each other) from this many on shut it out of bcrypt for a
# time that doubles with each further one.
FREE_FAILURES = 5
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 15.0
FORGET_FAILURES_AFTER_S = 600.0
# A turned-away request is answered after this pause, so a client retrying at once cannot spin kdiag's loop.
REFUSAL_PAUSE_S = 1.0


class Verdict(enum.Enum):
    """The outcome of a request's basic auth, with the HTTP status a refusal gets."""

    ALLOWED = 200
    DENIED = 401
    BACKED_OFF = 429
    BUSY = 503


def credentials(header: bytes | None) -> tuple[str, bytes] | None:
    """(user, password) of a `Basic` Authorization header, None when absent or malformed."""
    if not header or header[:6].lower() != b"basic ":
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).partition(b":")
        return (user.decode(), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_password(password: bytes, hashed: bytes) -> bool:
    """bcrypt on the password's first 72 bytes, as htpasswd made the hash and as exporter-toolkit compares."""
    try:
        return bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD], hashed)
    except ValueError:  # a NUL byte in the password
        return False


def client_of(address: tuple[str, int] | None) -> str:
    """The backoff key of a peer address: the IPv4 address, or the IPv6 /64 (one host's usual share)."""
    host = address[0] if address else ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.version == 6:
        return str(ip.ipv4_mapped or ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class _Recent:
    """A bounded set of digests, the least recently seen dropped first."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        if key in self._items:
            self._items.move_to_end(key)
            return True
        return False

    def add(self, key: bytes) -> None:
        self._items[key] = None
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)


class _Failures(NamedTuple):
    count: int  # type: ignore[assignment]  # shadows tuple.count, which nothing here calls
    last: float
    shut_until: float


class Backoff:
    """Per-client failure counts: from FREE_FAILURES on, each failure shuts the client out of bcrypt for a doubling time."""

    def __init__(self) -> None:
        self._clients: OrderedDict[str, _Failures] = OrderedDict()

    def remaining(self, client: str, now: float) -> float:
        """Seconds this client is still shut out for (0 when it may try)."""
        entry = self._clients.get(client)
        return max(0.0, entry.shut_until - now) if entry else 0.0

    def has_failed(self, client: str, now: float) -> bool:
        """Whether this client has failures on record."""
        entry = self._clients.get(client)
        return entry is not None and now - entry.last < FORGET_FAILURES_AFTER_S

    def failed(self, client: str, now: float) -> None:
        entry = self._clients.pop(client, None)
        count = entry.count + 1 if entry and now - entry.last < FORGET_FAILURES_AFTER_S else 1
        over = count - FREE_FAILURES
        delay = min(BACKOFF_FIRST_S * 2 ** min(over, 16), BACKOFF_MAX_S) if over >= 0 else 0.0
        self._clients[client] = _Failures(count, now, now + delay)
        if len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)

    def forgive(self, client: str) -> None:
        self._clients.pop(client, None)


class BasicAuth:
    """Checks logins on the event loop; only a login never seen before reaches bcrypt, on one thread, one per client."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)  # digests of passwords are keyed per process: never a plain hash
        self._verified = _Recent(MAX_VERIFIED)
        self._failed = _Recent(MAX_FAILED)
        self._backoff = Backoff()
        self._checking: set[str] = set()  # clients with a check pending
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdiag-bcrypt")

    def _digest(self, hashed: bytes, user: str, password: bytes) -> bytes:
        # The hash is part of the key, so a changed web config invalidates what was verified or refused under the old one.
        return hmac.new(self._key, hashed + b"\n" + user.encode() + b":" + password, hashlib.sha256).digest()

    async def check(self, users: dict[str, bytes], unknown_user_hash: bytes, header: bytes | None,
                    address: tuple[str, int] | None) -> tuple[Verdict, int]:
        """The verdict on a request's Authorization header, and for a refusal the seconds to retry after."""
        login = credentials(header)
        if login is None:
            return Verdict.DENIED, 0
        user, password = login
        hashed = users.get(user)
        key = self._digest(hashed or b"", user, password)
        if key in self._verified:
            return Verdict.ALLOWED, 0
        client, now = client_of(address), time.monotonic()
        wait = self._backoff.remaining(client, now)
        if wait or client in self._checking:
            await asyncio.sleep(min(wait, REFUSAL_PAUSE_S) or REFUSAL_PAUSE_S)
            return Verdict.BACKED_OFF, math.ceil(max(wait, REFUSAL_PAUSE_S))
        if key in self._failed:
            self._backoff.failed(client, now)
            return Verdict.DENIED, 0
        if len(self._checking) >= (MAX_PENDING_FOR_FAILED if self._backoff.has_failed(client, now) else MAX_PENDING):
            await asyncio.sleep(REFUSAL_PAUSE_S)
            return Verdict.BUSY, math.ceil(REFUSAL_PAUSE_S)
        self._checking.add(client)
        # An unknown user is checked against a hash of the configured cost, so it answers as slowly as a known one.
        check = asyncio.get_running_loop().run_in_executor(self._pool, check_password, password, hashed or unknown_user_hash)
        # The place is freed when bcrypt is done, not when the request is: a client that hangs up leaves no uncounted work.
        check.add_done_callback(lambda _: self._checking.discard(client))
        ok = await asyncio.shield(check) and hashed is not None
        if ok:
            self._verified.add(key)
            self._backoff.forgive(client)
            return Verdict.ALLOWED, 0
        self._failed.add(key)
        self._backoff.failed(client, time.monotonic())
        return Verdict.DENIED, 0

    def close(self) -> None:
        """Drop queued checks; the one running finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
