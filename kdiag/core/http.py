"""The one place kdiag builds outgoing HTTP requests: auth and TLS as Prometheus's http config has them, no secret logged."""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

import urllib3

from kdiag.core.redact import mask_values

log = logging.getLogger(__name__)


@dataclass
class BasicAuth:
    """Prometheus's basic_auth: a username with a password or a password_file."""

    username: str = ""
    password: str = ""
    password_file: str = ""


@dataclass
class Authorization:
    """Prometheus's authorization: an Authorization header of this type with credentials or credentials_file."""

    type: str = "Bearer"
    credentials: str = ""
    credentials_file: str = ""


@dataclass
class TLSConfig:
    """Prometheus's tls_config: the CA to trust, a client certificate, the name to check, or no check at all."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    insecure_skip_verify: bool = False


class PushError(Exception):
    """A request that failed, said in one line without any secret; kind groups failures for logging once."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def split_credentials(url: str) -> tuple[str, str, str]:
    """The URL without user:password@, and the user and password it held (percent-decoded; empty when none)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, "", ""
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return parts._replace(netloc=host).geturl(), urllib.parse.unquote(user), urllib.parse.unquote(password)


def check_settings(url: str, basic_auth: BasicAuth, authorization: Authorization, tls: TLSConfig, key: str) -> None:
    """ValueError naming key.field for settings that cannot work together or files that cannot be read."""
    plain_url, url_user, _ = split_credentials(url)
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{key}.url: '{plain_url}' is not an http(s) URL")
    if url_user and basic_auth.username:
        raise ValueError(f"{key}.url: holds credentials and {key}.basic_auth is set too: keep one")
    if (basic_auth.username or url_user) and (authorization.credentials or authorization.credentials_file):
        raise ValueError(f"{key}: basic_auth and authorization are both set: keep one")
    if basic_auth.password and basic_auth.password_file:
        raise ValueError(f"{key}.basic_auth: password and password_file are both set: keep one")
    if (basic_auth.password or basic_auth.password_file) and not basic_auth.username:
        raise ValueError(f"{key}.basic_auth.username: missing")
    if authorization.credentials and authorization.credentials_file:
        raise ValueError(f"{key}.authorization: credentials and credentials_file are both set: keep one")
    if authorization.type.lower() == "basic":
        raise ValueError(f"{key}.authorization.type: use {key}.basic_auth for Basic")
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError(f"{key}.tls_config: cert_file and key_file go together")
    files = {"basic_auth.password_file": basic_auth.password_file, "authorization.credentials_file":
             authorization.credentials_file, "tls_config.ca_file": tls.ca_file, "tls_config.cert_file": tls.cert_file,
             "tls_config.key_file": tls.key_file}
    for name, path in files.items():
        if path and not os.access(path, os.R_OK):
            raise ValueError(f"{key}.{name}: {path} cannot be read")


def read_secret(value: str, path: str, key: str) -> str:
    """The secret given inline, or the first line of its file (read each time, so a rotated file is picked up)."""
    if not path:
        return value
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise PushError(f"{key}: {path} cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})",
                        "secret file") from None


class HttpClient:
    """POSTs JSON to one service with the credentials of its URL or config and its TLS settings."""

    def __init__(self, url: str, timeout: float, basic_auth: BasicAuth | None = None,
                 authorization: Authorization | None = None, tls: TLSConfig | None = None,
                 service: str = "Alertmanager", key: str = "alertmanager"):
        self.url, user, password = split_credentials(url.rstrip("/"))
        self.basic_auth = BasicAuth(user, password) if user else basic_auth or BasicAuth()
        self.authorization = authorization or Authorization()
        self.service, self.key = service, key
        self._secrets: set[str] = set()  # what was sent, to mask should a server echo it
        tls = tls or TLSConfig()
        options: dict[str, Any] = {"ca_certs": tls.ca_file or None, "cert_file": tls.cert_file or None,
                                   "key_file": tls.key_file or None, "server_hostname": tls.server_name or None}
        if tls.insecure_skip_verify:
            options.update(cert_reqs="CERT_NONE", assert_hostname=False)
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # said once here instead
            log.warning("%s.tls_config.insecure_skip_verify: the certificate of %s is not checked", key, self.url)
        self._pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout), **options)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        auth, basic = self.authorization, self.basic_auth
        if basic.username:
            password = read_secret(basic.password, basic.password_file, f"{self.key}.basic_auth.password_file")
            self._secrets.add(password)
            headers.update(urllib3.make_headers(basic_auth=f"{basic.username}:{password}"))
        elif auth.credentials or auth.credentials_file:
            token = read_secret(auth.credentials, auth.credentials_file, f"{self.key}.authorization.credentials_file")
            self._secrets.add(token)
            headers["Authorization"] = f"{auth.type} {token}"
        return headers

    def post_json(self, path: str, body: Any) -> None:
        """POST body as JSON to url + path; PushError in one secret-free line unless the answer is 2xx."""
        where = f"{self.service} at {self.url}"
        try:
            headers = self._headers()
            response = self._pool.request("POST", self.url + path, body=json.dumps(body).encode(), headers=headers)
        except urllib3.exceptions.SSLError as e:
            raise PushError(self._scrub(f"{where}: TLS failed ({_reason(e)}): check {self.key}.tls_config "
                                        "(ca_file, cert_file, key_file, server_name, insecure_skip_verify)"), "tls") from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise PushError(self._scrub(f"{where} unreachable ({_reason(e)})"), "unreachable") from None
        if response.status >= 300:
            said = " ".join(response.data.decode(errors="replace").split())[:200]
            reason = response.reason if said in ("", response.reason) else f"{response.reason}: {said}"
            hint = (f": check {self.key}.basic_auth, {self.key}.authorization or the URL's user:password"
                    if response.status in (401, 403) else "")
            raise PushError(self._scrub(f"{where} refused the push with HTTP {response.status} ({reason}){hint}"),
                            f"http {response.status}")

    def _scrub(self, message: str) -> str:
        """The message with any secret this client holds masked: a server may echo what it was sent."""
        return mask_values(message, self._secrets)


def _reason(error: BaseException) -> str:
    """The innermost cause of a urllib3 error ([Errno 111] Connection refused), in one line."""
    while error.__cause__ is not None:
        error = error.__cause__
    return " ".join(str(error).split())
