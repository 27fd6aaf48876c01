"""The Alertmanager push with basic auth, bearer tokens and TLS, against a real Alertmanager behind --web.config.file."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
import urllib3
import yaml
from tests.promstack import RECORDINGS, Stack
from tests.waiting import wait_until

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.config.settings import ConfigError, load_config
from kdiag.analysis.catalog import default_rules_dir, load_catalog
from kdiag.analysis.engine import Diagnosis
from kdiag.core.http import Authorization, BasicAuth, TLSConfig
from kdiag.runtime.pipeline import State

pytestmark = pytest.mark.e2e
PASSWORD = "s3cretPW"
SERVER_NAME = "alertmanager.test"  # the only name in the server certificate: 127.0.0.1 needs tls_config.server_name
RULES = {r.id: r for r in load_catalog([default_rules_dir()])}


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: its certificate and key."""
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", crt, "-days", "2", "-subj", f"/CN={name}")
    return crt, key


def make_cert(directory: Path, name: str, ca: tuple[Path, Path], san: str = "") -> tuple[Path, Path]:
    """A certificate for name signed by ca (with subjectAltName san): its certificate and key."""
    crt, key, csr, ext = (directory / f"{name}.{s}" for s in ("crt", "key", "csr", "ext"))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr,
            "-subj", f"/CN={name}")
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", crt, "-days", "2",
            "-extfile", ext)
    return crt, key


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    """Alertmanager over TLS, requiring a client certificate from our CA and basic auth admin:PASSWORD."""
    work = tmp_path_factory.mktemp("am-secured")
    ca = make_ca(work, "ca")
    server = make_cert(work, "server", ca, f"DNS:{SERVER_NAME}")
    client = make_cert(work, "client", ca)
    rogue_ca = make_ca(work, "rogue-ca")
    web = work / "web.yml"
    web.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(server[0]), "key_file": str(server[1]),
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(ca[0])},
        "basic_auth_users": {"admin": bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()}}))
    stack = Stack(work)
    address = stack.own_alertmanager({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}, web)
    password_file = work / "am-password"
    password_file.write_text(PASSWORD + "\n")
    tls = TLSConfig(ca_file=str(ca[0]), cert_file=str(client[0]), key_file=str(client[1]), server_name=SERVER_NAME)
    pool = urllib3.PoolManager(ca_certs=str(ca[0]), cert_file=str(client[0]), key_file=str(client[1]),
                               server_hostname=SERVER_NAME, retries=False, timeout=5.0)
    auth = urllib3.make_headers(basic_auth=f"admin:{PASSWORD}")

    def get(path: str) -> urllib3.BaseHTTPResponse:
        return pool.request("GET", f"https://{address}{path}", headers=auth)

    def ready() -> bool:
        try:
            return get("/-/ready").status == 200
        except urllib3.exceptions.HTTPError:  # not listening yet
            return False

    wait_until(ready, 60, "the TLS Alertmanager /-/ready", stack.logs)
    yield {"address": address, "tls": tls, "rogue_ca": rogue_ca[0], "password_file": password_file, "get": get,
           "work": work, "stack": stack}
    stack.close()


def firing(subject: str) -> State:
    """A state with one firing diagnosis whose subject names the test."""
    d = Diagnosis(RULES["small_packet_storm"], subject, time.time() - 30, "firing", f"{subject} storm", {"x": 1.0})
    return State("h", time.time(), [], {}, {}, [d])


def alert_arrives(secured: dict, subject: str) -> dict:
    """Wait for the alert of subject in the secured Alertmanager (read with the right credentials)."""
    def find() -> dict | None:
        alerts = json.loads(secured["get"]("/api/v2/alerts").data)
        return next((a for a in alerts if a["labels"]["subject"] == subject), None)
    return wait_until(find, 30, f"the alert for {subject}", secured["stack"].logs)


def push(url: str, subject: str, caplog: pytest.LogCaptureFixture, until, **settings) -> list[str]:
    """Run a pusher for one firing diagnosis until until() holds; its log lines."""
    caplog.clear()
    caplog.set_level(logging.INFO, logger="kdiag")
    pusher = AlertPusher(url, "auth-test", resend_interval=60.0, timeout=5.0, backoff_max=0.5, **settings)
    pusher.start()
    try:
        pusher.offer(firing(subject))
        until(pusher)
    finally:
        pusher.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines if PASSWORD in line], lines
    return lines


def test_credentials_in_the_url_become_basic_auth_over_tls(secured: dict, caplog) -> None:
    url = f"https://admin:{PASSWORD}@{secured['address']}"
    lines = push(url, "url-creds", caplog, lambda p: wait_until(lambda: p.posts, 30, "an accepted push"),
                 tls_config=secured["tls"])
    assert alert_arrives(secured, "url-creds")["labels"]["instance"] == "auth-test"
    assert lines == []


def test_basic_auth_password_file_is_accepted(secured: dict, caplog) -> None:
    push(f"https://{secured['address']}", "password-file", caplog, lambda p: wait_until(lambda: p.posts, 30, "a push"),
         basic_auth=BasicAuth("admin", password_file=str(secured["password_file"])), tls_config=secured["tls"])
    alert_arrives(secured, "password-file")


def failing(pusher: AlertPusher) -> None:
    wait_until(lambda: pusher.failures >= 3, 30, "three refused pushes")


def test_a_wrong_password_is_one_line_naming_http_401_without_the_secret(secured: dict, caplog) -> None:
    wrong = "Wr0ngPW-" + PASSWORD
    lines = push(f"https://admin:{wrong}@{secured['address']}", "wrong", caplog, failing, tls_config=secured["tls"])
    assert len(lines) == 1, lines
    assert f"Alertmanager at https://{secured['address']} refused the push with HTTP 401" in lines[0]
    assert "alertmanager.basic_auth" in lines[0] and wrong not in lines[0]


@pytest.mark.parametrize(("change", "expected"), [
    ({"ca_file": "rogue"}, "certificate verify failed"),
    ({"server_name": ""}, "IP address mismatch"),
])
def test_an_untrusted_server_is_one_line_naming_tls_config(secured: dict, caplog, change: dict, expected: str) -> None:
    tls = TLSConfig(**{**vars(secured["tls"]), **change})
    if tls.ca_file == "rogue":
        tls.ca_file = str(secured["rogue_ca"])
    lines = push(f"https://admin:{PASSWORD}@{secured['address']}", "untrusted", caplog, failing, tls_config=tls)
    assert len(lines) == 1, lines
    assert "TLS failed" in lines[0] and expected in lines[0] and "alertmanager.tls_config" in lines[0], lines[0]


def test_no_client_certificate_is_refused_in_one_line(secured: dict, caplog) -> None:
    tls = TLSConfig(ca_file=secured["tls"].ca_file, server_name=SERVER_NAME)
    lines = push(f"https://admin:{PASSWORD}@{secured['address']}", "no-client-cert", caplog, failing, tls_config=tls)
    assert len(lines) == 1 and "Alertmanager at https://" in lines[0], lines


def test_insecure_skip_verify_pushes_to_an_unchecked_server(secured: dict, caplog) -> None:
    tls = TLSConfig(cert_file=secured["tls"].cert_file, key_file=secured["tls"].key_file, insecure_skip_verify=True)
    lines = push(f"https://admin:{PASSWORD}@{secured['address']}", "insecure", caplog,
                 lambda p: wait_until(lambda: p.posts, 30, "a push"), tls_config=tls)
    alert_arrives(secured, "insecure")
    assert any("insecure_skip_verify" in line for line in lines), lines


def test_kdiag_run_pushes_with_url_credentials_and_never_logs_them(secured: dict, tmp_path: Path) -> None:
    tls = secured["tls"]
    config = tmp_path / "kdiag.yaml"
    config.write_text(yaml.safe_dump({"alertmanager": {
        "url": f"https://admin:{PASSWORD}@{secured['address']}", "resend_interval": "2s",
        "tls_config": {"ca_file": tls.ca_file, "cert_file": tls.cert_file, "key_file": tls.key_file,
                       "server_name": SERVER_NAME}}}))
    stack = Stack(tmp_path)
    try:
        stack.kdiag_live("--config", str(config), "--from", str(RECORDINGS / "small-packet-storm-retransmits"))
        assert alert_arrives(secured, "eth0")["labels"]["rule"] == "small_packet_storm"
    finally:
        stack.close()
    log = "\n".join(p.read_text(errors="replace") for p in stack.logs)
    assert PASSWORD not in log and "Name or service not known" not in log


class HeaderReceiver:
    """A loopback HTTP endpoint that records the Authorization header of every POST."""

    def __init__(self):
        self.seen: list[str] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                seen.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_authorization_credentials_file_is_sent_as_a_bearer_token(tmp_path: Path, caplog) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-from-file\n")
    receiver = HeaderReceiver()
    try:
        push(receiver.url, "bearer", caplog, lambda p: wait_until(lambda: receiver.seen, 10, "a post"),
             authorization=Authorization(credentials_file=str(token_file)))
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
    assert receiver.seen[0] == "Bearer t0ken-from-file"


@pytest.mark.parametrize(("settings", "message"), [
    ({"url": "ftp://admin:pw@h"}, "alertmanager.url: 'ftp://h' is not an http(s) URL"),
    ({"url": "http://admin:pw@h", "basic_auth": {"username": "a", "password": "b"}},
     "alertmanager.url: holds credentials and alertmanager.basic_auth is set too: keep one"),
    ({"url": "http://h", "basic_auth": {"username": "a", "password": "pw"}, "authorization": {"credentials": "t"}},
     "alertmanager: basic_auth and authorization are both set: keep one"),
    ({"url": "http://h", "basic_auth": {"password": "pw"}}, "alertmanager.basic_auth.username: missing"),
    ({"url": "http://h", "tls_config": {"cert_file": "/etc/hostname"}},
     "alertmanager.tls_config: cert_file and key_file go together"),
    ({"url": "http://h", "tls_config": {"ca_file": "/nonexistent/ca.crt"}},
     "alertmanager.tls_config.ca_file: /nonexistent/ca.crt cannot be read"),
    ({"url": "http://h", "authorization": {"type": "Basic", "credentials": "pw"}},
     "alertmanager.authorization.type: use alertmanager.basic_auth for Basic"),
])
def test_settings_that_cannot_work_stop_start_up_with_the_key(tmp_path: Path, settings: dict, message: str) -> None:
    path = tmp_path / "kdiag.yaml"
    path.write_text(yaml.safe_dump({"alertmanager": settings}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: {message}"
    assert "pw" not in str(e.value).replace(str(path), "")


def test_the_cli_says_the_config_error_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "kdiag.yaml"
    path.write_text(yaml.safe_dump({"alertmanager": {"url": "ftp://admin:s3cretPW@h"}}))
    done = subprocess.run([sys.executable, "-m", "kdiag", "run", "--config", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and PASSWORD not in done.stderr + done.stdout, done.stderr
