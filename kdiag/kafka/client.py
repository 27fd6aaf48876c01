"""Settings of every Kafka client kdiag makes: the `kafka.client` mapping, its secrets, and errors that say what to fix.

`kafka.client` holds librdkafka properties. A value may come from a file (`<prop>_file: PATH`, the file's
text without its trailing newline) or hold `${VAR}` references to the environment. `ClientSettings.conf()`
merges them under kdiag's own settings for one client; `ErrorLog` keeps what librdkafka's error_cb last
reported and turns it into a reason that names the `kafka.client` key to check, never a secret.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdiag.core.redact import mask_values

FILE_SUFFIX = "_file"
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Properties whose values are secrets: never logged, never in an error (librdkafka's own list, plus JAAS lines).
SECRET_WORDS = ("password", "secret", "key.pem", "jaas", "oauthbearer.config")
# kdiag sets these from its own config or per client; in kafka.client they would be overridden or mean nothing.
RESERVED = {"bootstrap.servers": "set kafka.bootstrap_servers instead"}
MAX_REASON = 300


class ClientConfigError(ValueError):
    """A kafka.client entry that cannot work, named by its key path."""


def is_secret(prop: str) -> bool:
    """Whether a librdkafka property holds a secret."""
    return any(word in prop for word in SECRET_WORDS)


def _text(value: Any) -> str:
    """A YAML scalar as librdkafka wants it: booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _expand(key: str, value: str, environ: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in environ:
            raise ClientConfigError(f"kafka.client.{key}: environment variable {m.group(1)} is not set")
        return environ[m.group(1)]

    return ENV_REF.sub(one, value)


def _read_secret(key: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as e:
        raise ClientConfigError(f"kafka.client.{key}: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ClientConfigError(f"kafka.client.{key}: {path} is not UTF-8 text") from None


@dataclass
class ClientSettings:
    """Resolved kafka.client properties; `given` remembers how each was written (`sasl.password_file`, ...)."""

    props: dict[str, str] = field(default_factory=dict, repr=False)  # holds the secrets: never in a repr
    given: dict[str, str] = field(default_factory=dict)
    prefix: str = "kafka.client."  # where the user wrote these settings, for reasons that name the key

    @classmethod
    def resolve(cls, client: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ClientSettings:
        """Read files and expand ${VAR}s; ClientConfigError names the first key that cannot be resolved."""
        environ = os.environ if environ is None else environ
        out = cls()
        for key, raw in client.items():
            if not isinstance(key, str) or not key:
                raise ClientConfigError(f"kafka.client: key {key!r} is not a property name")
            if raw is None or isinstance(raw, dict | list):
                raise ClientConfigError(f"kafka.client.{key}: expected a single value, got {type(raw).__name__}")
            prop = key[: -len(FILE_SUFFIX)] if key.endswith(FILE_SUFFIX) else key
            if prop in RESERVED:
                raise ClientConfigError(f"kafka.client.{key}: {RESERVED[prop]}")
            if prop in out.props:
                raise ClientConfigError(f"kafka.client.{key}: {prop} is given twice (as {out.given[prop]} and {key})")
            value = _expand(key, _text(raw), environ)
            out.props[prop] = _read_secret(key, value) if key != prop else value
            out.given[prop] = key
        return out

    def secrets(self) -> list[str]:
        """Values that must never be shown: secret properties and everything read from a file."""
        return [v for p, v in self.props.items() if v and (is_secret(p) or self.given[p] != p)]

    def redact(self, text: str) -> str:
        """text with every secret value replaced by ***."""
        return mask_values(text, self.secrets())

    def conf(self, base: Mapping[str, Any], errors: ErrorLog | None = None) -> dict[str, Any]:
        """A client config: kafka.client under kdiag's own settings for this client, errors into `errors`."""
        conf: dict[str, Any] = {**self.props, **base}
        if errors is not None:
            # Logs go to `errors` (served by poll()), never to stderr, where every failed reconnect would be a line;
            # level 6 keeps librdkafka's FAIL lines, which say why a connection dropped.
            conf.update({"error_cb": errors.record, "logger": errors, "log_level": 6})
        return conf

    def client_conf(self, bootstrap: str, client_id: str, errors: ErrorLog | None, timeout: float | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The config every kdiag client starts from: its servers, its client.id, socket.timeout.ms from timeout
        (seconds) and extra, under kafka.client."""
        timeouts = {"socket.timeout.ms": int(timeout * 1000)} if timeout is not None else {}
        return self.conf({"bootstrap.servers": bootstrap, "client.id": client_id, **timeouts, **(extra or {})}, errors)

    def check(self) -> None:
        """Let librdkafka judge every property now (names, values, CA and key files); ClientConfigError names the key."""
        from confluent_kafka import KafkaException, Producer

        if not self.props:
            return
        try:
            # A client without bootstrap servers opens no connection; building it checks the whole config.
            Producer(self.conf({"log_level": 0, "logger": logging.getLogger("kdiag.kafka.client.check")}))
        except KafkaException as e:
            message = self.redact(e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e))
            message = message.removeprefix("Failed to create producer: ")
            key = next((self.given[p] for p in sorted(self.props, key=len, reverse=True) if p in message), None)
            raise ClientConfigError(f"kafka.client.{key}: {message}" if key else f"kafka.client: {message}") from None

    # -- what to say when the cluster refuses us ------------------------------------------------------------

    def protocol(self) -> str:
        """The configured security.protocol, as librdkafka spells it in docs (upper case)."""
        return self.props.get("security.protocol", "plaintext").upper()

    def key_of(self, prop: str) -> str:
        """How the user wrote prop (`kafka.client.sasl.password_file`), or where it would go."""
        return f"{self.prefix}{self.given.get(prop, prop)}"


def _tls_verify_reason(settings: ClientSettings, address: str, timeout: float) -> str | None:
    """Why the broker's certificate fails verification, from Python's own handshake with the same CA."""
    host, _, port = address.strip().rpartition(":")
    host = host.strip("[]")
    try:
        context = ssl.create_default_context(cafile=settings.props.get("ssl.ca.location"))
        context.check_hostname = settings.props.get("ssl.endpoint.identification.algorithm", "https") != "none"
        with socket.create_connection((host, int(port)), timeout=timeout) as raw, context.wrap_socket(raw, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as e:
        if e.verify_code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return f"TLS handshake with {address} failed: the broker's certificate has expired: renew it"
        if e.verify_code == 9:  # X509_V_ERR_CERT_NOT_YET_VALID
            return f"TLS handshake with {address} failed: the broker's certificate is not valid yet: check its dates and the clocks"
        if e.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
            return (f"TLS handshake with {address} failed: the broker's certificate does not name {host}: fix the certificate "
                    f"(subjectAltName) or set {settings.key_of('ssl.endpoint.identification.algorithm')}: none")
        return (f"TLS handshake with {address} failed: the broker's certificate is not trusted ({e.verify_message}): "
                f"check {settings.key_of('ssl.ca.location')}")
    except (OSError, ValueError):
        return None


def explain(settings: ClientSettings, message: str, bootstrap: str = "", timeout: float = 3.0) -> str:
    """A librdkafka error that means the cluster refused us, as a reason that says what to fix; '' for other errors."""
    text = settings.redact(message)
    low = text.lower()
    proto = settings.protocol()
    protocol = f"check {settings.key_of('security.protocol')} ({proto})"
    if "unsupported sasl mechanism" in low:
        mechanism = settings.props.get("sasl.mechanism", "GSSAPI").upper()
        return f"SASL mechanism {mechanism} is not enabled on the listener: check {settings.key_of('sasl.mechanism')}"
    if "sasl authentication error" in low or "invalid credentials" in low:
        return (f"SASL authentication failed for user {settings.props.get('sasl.username', '')}: "
                f"check {settings.key_of('sasl.password')} and {settings.key_of('sasl.mechanism')}")
    if "not valid in current sasl state" in low:
        return f"the listener does not use SASL: {protocol}"
    if "certificate verify failed" in low:
        first = bootstrap.split(",")[0] if bootstrap else ""
        reason = _tls_verify_reason(settings, first, timeout) if first else None
        return reason or f"TLS handshake failed: the broker's certificate is not trusted: check {settings.key_of('ssl.ca.location')}"
    if "ssl handshake failed" in low:
        if "plaintext broker listener" in low or "wrong version number" in low or "disconnected" in low:
            return f"TLS handshake failed: the broker closed the connection (not a TLS listener?): {protocol}"
        return f"TLS handshake failed: {_short(text)}: check the {settings.prefix}ssl.* settings"
    if "disconnected" in low and "state apiversion_query" in low:
        return f"the broker closed the connection before answering (a TLS listener?): {protocol}"
    if "disconnected" in low and re.search(r"after \d{1,3}ms in state up\b", low) and "SASL" not in proto:
        return (f"the broker closed the connection at the first request (a SASL listener?): {protocol} "
                "and set sasl.mechanism, sasl.username and sasl.password_file")
    return ""


def _short(text: str) -> str:
    """One line of at most MAX_REASON characters, without librdkafka's '(after N ms in state X)' tail."""
    text = re.sub(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)", "", " ".join(text.split()))
    return text[:MAX_REASON]


class ErrorLog:
    """What librdkafka's error_cb last said about one client, kept as a readable reason until cleared."""

    def __init__(self, settings: ClientSettings, bootstrap: str):
        self.settings = settings
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._raw = ""
        self._reason = ""

    def record(self, error: Any) -> None:
        """error_cb: keep the most telling error (a security failure beats 'all brokers are down')."""
        text = error.str() if hasattr(error, "str") else str(error)
        if error.name() == "_ALL_BROKERS_DOWN" and self._raw:
            return  # librdkafka follows every connection failure with this summary
        self._keep(text)

    def log(self, _level: int, _fmt: str, *args: Any) -> None:
        """The librdkafka logger: a dropped connection (a TLS or SASL mismatch) is only logged, never an error_cb."""
        if len(args) == 3 and args[0] == "FAIL":
            self._keep(str(args[2]))

    def _keep(self, text: str) -> None:
        with self._lock:
            self._raw, self._reason = text, ""

    def reason(self) -> str:
        """The last error, as a reason that says what to fix where it is a refusal; '' when none was seen since clear()."""
        return self.refusal() or _short(self.settings.redact(self._raw))

    def refusal(self) -> str:
        """The reason when the last error means the cluster refused us (credentials, TLS, protocol), else ''."""
        with self._lock:
            raw, reason = self._raw, self._reason
        if raw and not reason:
            # Explained outside the lock: a certificate check opens its own TLS connection.
            reason = explain(self.settings, raw, self.bootstrap)
            with self._lock:
                if self._raw == raw:
                    self._reason = reason
        return reason

    def clear(self) -> None:
        """The client works again: forget the last error."""
        with self._lock:
            self._raw = self._reason = ""


# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the group's coordinator is another broker now
MOVED_COORDINATOR_ERRORS = frozenset({15, 16})


def coordinator_moved(error: BaseException) -> bool:
    """Whether a librdkafka admin call failed on a stale group coordinator. Its AdminClient caches coordinators until
    metadata.max.age.ms (15 min) after their last use and never evicts one on NOT_COORDINATOR: only a new client asks
    FindCoordinator again."""
    from confluent_kafka import KafkaException

    return isinstance(error, KafkaException) and bool(error.args) and hasattr(error.args[0], "code") \
        and error.args[0].code() in MOVED_COORDINATOR_ERRORS
