"""The endpoint's web config in exporter-toolkit's format: TLS and basic auth, re-read when its files change."""

from __future__ import annotations

import functools
import logging
import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt

from kdiag.core import yamlsafe
from kdiag.config.settings import ConfigError

log = logging.getLogger(__name__)

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
# exporter-toolkit keys kdiag knows but cannot honour, with the reason given to the user.
UNSUPPORTED = {
    "tls_server_config.cert": "inline PEM is not supported: use cert_file",
    "tls_server_config.key": "inline PEM is not supported: use key_file",
    "tls_server_config.client_ca": "inline PEM is not supported: use client_ca_file",
    "tls_server_config.client_allowed_sans": "not supported by kdiag",
    "tls_server_config.cipher_suites": "Go cipher suite names are not supported by kdiag (OpenSSL's defaults are used)",
    "tls_server_config.curve_preferences": "not supported by kdiag",
    "rate_limit": "not supported by kdiag",
}
# Python's ssl cannot ask for a client certificate without verifying it, so these two cannot be honoured.
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
BCRYPT_COSTS = range(4, 32)


@functools.cache
def _unknown_user_hash(cost: int) -> bytes:
    """A hash of the given cost to check unknown users against, so they answer as slowly as known ones."""
    return bcrypt.hashpw(b"", bcrypt.gensalt(cost))


class WebConfigError(ConfigError):
    """A web config that cannot be used, named by file and key path."""


@dataclass
class WebConfig:
    """What the endpoint enforces: a TLS context (or plain HTTP), users with bcrypt hashes, extra headers."""

    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    unknown_user_hash: bytes = b""  # of the users' highest cost
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def read_yaml(path: Path) -> Any:
    """The YAML document at path, through the safe reader (no aliases, bounded size and depth)."""
    return yamlsafe.load(path)


def _mapping(value: Any, where: str, allowed: set[str] | None = None) -> dict[object, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where or 'the web config'}: expected a mapping, got {type(value).__name__}")
    if allowed is None:
        return value
    for key in value:
        path = f"{where}.{key}" if where else str(key)
        if path in UNSUPPORTED:
            raise WebConfigError(f"{path}: {UNSUPPORTED[path]}")
        if key not in allowed:
            raise WebConfigError(f"{path}: unknown key (expected one of {', '.join(sorted(allowed))})")
    return value


def _text(data: dict[object, object], key: str, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise WebConfigError(f"{where}.{key}: expected a string, got {type(value).__name__}")
    return value


def _file(data: dict[object, object], key: str, where: str, base: Path) -> Path | None:
    text = _text(data, key, where)
    if not text:
        return None
    path = base / text
    if not path.is_file():
        raise WebConfigError(f"{where}.{key}: {text}: no such file")
    return path


def _tls(data: dict[object, object], base: Path) -> tuple[ssl.SSLContext, list[Path]]:
    where = "tls_server_config"
    cert, key = _file(data, "cert_file", where, base), _file(data, "key_file", where, base)
    if not cert or not key:
        raise WebConfigError(f"{where}: cert_file and key_file are both required")
    auth = _text(data, "client_auth_type", where) or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: {auth} is not supported (Python's TLS verifies every client "
                             "certificate it asks for): use RequireAndVerifyClientCert or VerifyClientCertIfGiven")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: '{auth[:40]}' is not one of {', '.join(CLIENT_AUTH)}")
    ca = _file(data, "client_ca_file", where, base)
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not ca:
        raise WebConfigError(f"{where}.client_ca_file: required by client_auth_type {auth}")
    if ca and CLIENT_AUTH[auth] == ssl.CERT_NONE:
        raise WebConfigError(f"{where}.client_auth_type: client_ca_file is set but client_auth_type is {auth}")
    versions = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        text = _text(data, name, where) or default
        if text not in TLS_VERSIONS:
            raise WebConfigError(f"{where}.{name}: '{text[:40]}' is not one of {', '.join(TLS_VERSIONS)}")
        versions.append(TLS_VERSIONS[text])
    if versions[0] > versions[1]:
        raise WebConfigError(f"{where}.min_version: above max_version")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version, context.maximum_version = versions
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as e:
        raise WebConfigError(f"{where}.cert_file/key_file: cannot load: {getattr(e, 'reason', None) or e}") from None
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as e:
            raise WebConfigError(f"{where}.client_ca_file: cannot load: {getattr(e, 'reason', None) or e}") from None
    context.verify_mode = CLIENT_AUTH[auth]
    return context, [p for p in (cert, key, ca) if p]


def _users(data: Any) -> dict[str, bytes]:
    users = _mapping(data, "basic_auth_users")
    out = {}
    for user, hashed in users.items():
        # The hash itself is never quoted: it is a secret.
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError("basic_auth_users: a user name must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not (match := BCRYPT_HASH.match(hashed)):
            raise WebConfigError(f"basic_auth_users.{user[:40]}: not a bcrypt hash (make one with `htpasswd -nBC 10 \"\"`)")
        if int(match[1]) not in BCRYPT_COSTS:
            raise WebConfigError(f"basic_auth_users.{user[:40]}: bcrypt cost {match[1]} is outside 4..31")
        out[user] = hashed.encode()
    return out


def _headers(data: Any) -> list[tuple[bytes, bytes]]:
    server = _mapping(data, "http_server_config", {"http2", "headers"})
    if not isinstance(server.get("http2", False), bool):
        raise WebConfigError("http_server_config.http2: expected true or false")
    headers = _mapping(server.get("headers"), "http_server_config.headers")
    out = []
    for name, value in headers.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
            raise WebConfigError("http_server_config.headers: a header name is letters, digits and '-'")
        if not isinstance(value, str) or not value.isprintable():
            raise WebConfigError(f"http_server_config.headers.{name}: expected a one-line string")
        out.append((name.lower().encode(), value.encode()))
    return out


def load_web_config(path: str | Path) -> WebConfig:
    """Read and check a web config file; WebConfigError names the file and the key at fault."""
    path = Path(path)
    try:
        data = read_yaml(path)
    except yamlsafe.YamlError as e:
        raise WebConfigError(str(e)) from None
    try:
        top = _mapping(data, "", {"tls_server_config", "http_server_config", "basic_auth_users"})
        users = _users(top.get("basic_auth_users"))
        headers = _headers(top.get("http_server_config"))
        tls: ssl.SSLContext | None = None
        files: list[Path] = []
        if top.get("tls_server_config") is not None:
            # Relative file names are relative to the web config file, as in exporter-toolkit.
            tls, files = _tls(_mapping(top["tls_server_config"], "tls_server_config", TLS_KEYS), path.parent)
    except WebConfigError as e:
        raise WebConfigError(f"{path}: {e}") from None
    unknown = _unknown_user_hash(max(int(h[4:6]) for h in users.values())) if users else b""
    return WebConfig(tls, users, unknown, headers, [path, *files])


class CurrentTLS(ssl.SSLContext):
    """The listening socket's SSLContext: each new connection uses the context of the web config in force."""

    current: ssl.SSLContext

    def use(self, context: ssl.SSLContext) -> None:
        """Hand new connections this context from now on."""
        self.current = context

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None, session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        """asyncio's TLS transport calls this per connection: hand it the current context's SSLObject."""
        return self.current.wrap_bio(incoming, outgoing, server_side, server_hostname, session)


def _fingerprint(files: list[Path]) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for p in files:
        try:
            st = os.stat(p)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


class WebConfigWatcher:
    """The web config in force; poll() re-reads it when the file or a file it names has changed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config = load_web_config(self.path)
        self._seen = _fingerprint(self.config.files)
        self._refused = ""  # why the last re-read was refused
        self.tls: CurrentTLS | None = None
        if self.config.tls:
            self.tls = CurrentTLS(ssl.PROTOCOL_TLS_SERVER)
            self.tls.use(self.config.tls)

    def poll(self) -> bool:
        """Re-read on change; True when a new config took over. A refused one is logged once and the old one kept."""
        seen = _fingerprint(self.config.files)
        # After a refusal, every poll re-reads: the fix may be a file the refused config names (a certificate that
        # appears later), which the config in force does not name.
        if seen == self._seen and not self._refused:
            return False
        self._seen = seen
        try:
            new = load_web_config(self.path)
            if (new.tls is None) != (self.config.tls is None):
                raise WebConfigError(f"{self.path} turns TLS {'on' if new.tls else 'off'}: restart kdiag to apply it")
        except WebConfigError as e:
            if str(e) != self._refused:
                log.warning("web config not reloaded, the previous one stays in force: %s", e)
            self._refused = str(e)
            return False
        self._refused = ""
        self.config = new
        self._seen = _fingerprint(new.files)
        if self.tls and new.tls:
            self.tls.use(new.tls)
        log.info("web config %s reloaded", self.path)
        return True
