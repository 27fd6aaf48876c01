"""The endpoint as clients meet it: a real kdiag process, curl, openssl certificates, Prometheus, attacker sockets."""

from __future__ import annotations

import contextlib
import resource
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
import yaml
from tests.promstack import RECORDINGS, binary, free_port, query, start_prometheus, stop
from tests.waiting import wait_until

from kdiag.report.page import POLICY
from kdiag.serve.webconfig import WebConfigError, load_web_config

pytestmark = pytest.mark.integration

RECORDING = RECORDINGS / "swap-in-use"
PASSWORD = "s3cret-scrape"


def openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}")


def make_cert(d: Path, name: str, ca: str, extensions: str) -> None:
    (d / f"{name}.ext").write_text(extensions + "\n")
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext")


SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
CLIENT_EXT = "extendedKeyUsage=clientAuth"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """A CA with a server and a client certificate, and an untrusted CA with its own client certificate."""
    binary("openssl")  # skips (fails under --require-services) when it is missing
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_ca(d, "rogue-ca")
    make_cert(d, "server", "ca", SERVER_EXT)
    make_cert(d, "client", "ca", CLIENT_EXT)
    make_cert(d, "rogue-client", "rogue-ca", CLIENT_EXT)
    return d


def web_config(path: Path, certs: Path, password: str = PASSWORD, **tls) -> Path:
    """Write an exporter-toolkit web config: TLS with the test server certificate, user `prom` with a bcrypt hash."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
    path.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(certs / "server.crt"), "key_file": str(certs / "server.key"), **tls},
        "basic_auth_users": {"prom": hashed},
    }))
    return path


class Kdiag:
    """`kdiag run --from` a recording on a free loopback port, optionally with a web config or an fd limit."""

    def __init__(self, workdir: Path, *args: str, nofile: int | None = None, ca: Path | None = None,
                 client: tuple[str, ...] = (), source: tuple[str, ...] = ("--from", str(RECORDING)),
                 host: str = "127.0.0.1"):
        self.curl_binary = binary("curl")  # skips (fails under --require-services) when curl is missing
        self.port = free_port()
        self.host = host
        self.log = workdir / f"kdiag-{self.port}.log"
        self.scheme = "https" if ca else "http"
        self.tls = ("--cacert", str(ca)) if ca else ()
        self.client = client
        limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))) if nofile else None
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", *source,
                                          "--listen", f"{host}:{self.port}", *args],
                                         stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
        wait_until(lambda: self.curl("/healthz")[0] == 200, 60, "kdiag /healthz", [self.log])

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    def curl(self, path: str, *opts: str, client: bool = True) -> tuple[int, bytes]:
        """(HTTP status, body) from curl; status 0 when no HTTP answer came (TLS refused, connection closed)."""
        r = subprocess.run([self.curl_binary, "-gsS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}", *self.tls,
                            *(self.client if client else ()), *opts, self.url(path)], capture_output=True)
        body, _, code = r.stdout.rpartition(b"\n")
        return int(code or 0), body

    def close(self) -> None:
        stop([self.proc])


@pytest.fixture
def tls_kdiag(tmp_path, certs):
    path = web_config(tmp_path / "web.yml", certs)
    k = Kdiag(tmp_path, "--web-config", str(path), ca=certs / "ca.crt")
    k.web = path
    yield k
    k.close()


def test_curl_over_tls_needs_the_password(tls_kdiag):
    status, body = tls_kdiag.curl("/metrics", "-u", f"prom:{PASSWORD}")
    assert status == 200 and b"kdiag_build_info" in body
    assert tls_kdiag.curl("/metrics", "-u", "prom:wrong")[0] == 401
    assert tls_kdiag.curl("/metrics", "-u", f"nobody:{PASSWORD}")[0] == 401
    assert tls_kdiag.curl("/metrics")[0] == 401
    assert tls_kdiag.curl("/api/diagnoses")[0] == 401
    assert tls_kdiag.curl("/api/diagnoses", "-u", f"prom:{PASSWORD}")[0] == 200
    assert tls_kdiag.curl("/")[0] == 401 and tls_kdiag.curl("/api/page")[0] == 401  # the page, behind the same login
    status, page = tls_kdiag.curl("/", "-u", f"prom:{PASSWORD}")
    assert status == 200 and page.startswith(b"<!DOCTYPE html>")
    # /healthz stays open for liveness probes, with the status line only.
    assert tls_kdiag.curl("/healthz") == (200, b"ok\n")
    assert PASSWORD not in tls_kdiag.log.read_text()


def test_plain_http_on_the_tls_port_gets_no_answer(tls_kdiag):
    r = subprocess.run(["curl", "-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                        f"http://127.0.0.1:{tls_kdiag.port}/metrics"], capture_output=True, text=True)
    assert r.stdout == "000"
    with socket.create_connection(("127.0.0.1", tls_kdiag.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = s.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/")


def test_mtls_refuses_a_client_certificate_from_an_untrusted_ca(tmp_path, certs):
    path = web_config(tmp_path / "web.yml", certs, client_auth_type="RequireAndVerifyClientCert",
                      client_ca_file=str(certs / "ca.crt"))
    k = Kdiag(tmp_path, "--web-config", str(path), ca=certs / "ca.crt",
              client=("--cert", str(certs / "client.crt"), "--key", str(certs / "client.key")))
    creds = ("-u", f"prom:{PASSWORD}")
    try:
        assert k.curl("/metrics", *creds)[0] == 200
        assert k.curl("/metrics", *creds, client=False)[0] == 0  # no client certificate
        rogue = ("--cert", str(certs / "rogue-client.crt"), "--key", str(certs / "rogue-client.key"))
        assert k.curl("/metrics", *rogue, *creds, client=False)[0] == 0
    finally:
        k.close()


def test_a_changed_web_config_or_certificate_is_picked_up(tls_kdiag, certs, tmp_path):
    web_config(tls_kdiag.web, certs, password="new-password")
    wait_until(lambda: tls_kdiag.curl("/metrics", "-u", "prom:new-password")[0] == 200, 30, "the new password")
    assert tls_kdiag.curl("/metrics", "-u", f"prom:{PASSWORD}")[0] == 401

    # A broken file keeps the config in force, with one log line.
    tls_kdiag.web.write_text("tls_server_config:\n  cert_file: /nonexistent\n")
    wait_until(lambda: "web config not reloaded" in tls_kdiag.log.read_text(), 30, "the refused reload")
    assert tls_kdiag.curl("/metrics", "-u", "prom:new-password")[0] == 200

    # A new certificate in the files the config names: new connections get it, no restart.
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    for name in ("ca.crt", "ca.key"):
        (renewed / name).write_bytes((certs / name).read_bytes())
    make_cert(renewed, "server", "ca", SERVER_EXT)
    web_config(tls_kdiag.web, renewed, password="new-password")
    new_pem = (renewed / "server.crt").read_text()

    def served_cert() -> str:
        return ssl.get_server_certificate(("127.0.0.1", tls_kdiag.port), timeout=10)

    wait_until(lambda: ssl.PEM_cert_to_DER_cert(served_cert()) == ssl.PEM_cert_to_DER_cert(new_pem), 30,
               "the renewed certificate")
    assert tls_kdiag.curl("/metrics", "-u", "prom:new-password")[0] == 200
    assert tls_kdiag.log.read_text().count("web config not reloaded") == 1


@pytest.mark.parametrize(("text", "says"), [
    ("tls_server_confg: {}\n", "tls_server_confg: unknown key"),
    ("tls_server_config: {cert_file: CERT, key_file: KEY, client_auth_type: RequireAnyClientCert}\n",
     "tls_server_config.client_auth_type: RequireAnyClientCert is not supported"),
    ("tls_server_config: {cert_file: CERT, key_file: KEY, client_auth_type: RequireAndVerifyClientCert}\n",
     "tls_server_config.client_ca_file: required"),
    ("tls_server_config: {cert_file: /nonexistent.crt, key_file: KEY}\n", "tls_server_config.cert_file: /nonexistent.crt"),
    ("tls_server_config: {cert_file: CERT, key_file: KEY, min_version: TLS14}\n", "tls_server_config.min_version"),
    ("tls_server_config: {cert_file: CERT, key_file: KEY, cipher_suites: [X]}\n", "tls_server_config.cipher_suites"),
    ("basic_auth_users: {prom: hunter2}\n", "basic_auth_users.prom: not a bcrypt hash"),
    ("basic_auth_users: [prom]\n", "basic_auth_users: expected a mapping"),
    ("- just a list\n", "expected a mapping"),
    ("a: [\n", ":2:1: YAML: while parsing a flow node"),
])
def test_a_bad_web_config_stops_start_up_naming_the_key(tmp_path, certs, text, says):
    path = tmp_path / "web.yml"
    path.write_text(text.replace("CERT", str(certs / "server.crt")).replace("KEY", str(certs / "server.key")))
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    assert str(e.value).startswith(f"{path}:") and says in str(e.value)
    assert "hunter2" not in str(e.value)


def test_a_bad_web_config_is_one_line_and_exit_2_from_the_flag_or_the_config_key(tmp_path):
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users: {prom: hunter2}\n")
    config = tmp_path / "kdiag.yaml"
    config.write_text(f"web_config: {path}\n")
    for args in (["--web-config", str(path)], ["--config", str(config)]):
        r = subprocess.run([sys.executable, "-m", "kdiag", "run", "--from", str(RECORDING), "--listen",
                            f"127.0.0.1:{free_port()}", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr == f"kdiag: {path}: basic_auth_users.prom: not a bcrypt hash (make one with `htpasswd -nBC 10 \"\"`)\n"


def test_prometheus_scrapes_over_tls_with_basic_auth(tls_kdiag, certs, tmp_path):
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [{
        "job_name": "kdiag-tls", "scheme": "https", "static_configs": [{"targets": [f"127.0.0.1:{tls_kdiag.port}"]}],
        "tls_config": {"ca_file": str(certs / "ca.crt")},
        "basic_auth": {"username": "prom", "password": PASSWORD}}]}
    procs, logs = [], []

    def start(name: str, argv: list[str]) -> None:
        logs.append(tmp_path / f"{name}.log")
        with logs[-1].open("wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path))

    prometheus = start_prometheus(tmp_path, config, start)
    try:
        wait_until(lambda: [r for r in query(prometheus, 'up{job="kdiag-tls"}') if r["value"][1] == "1"], 90,
                   "Prometheus to scrape kdiag over TLS with basic auth (up == 1)", [*logs, tls_kdiag.log])
        assert query(prometheus, 'kdiag_build_info{job="kdiag-tls"}')
    finally:
        stop(procs)


def test_ipv6_listen_port_in_use_and_tls_on_the_http_port(tmp_path):
    k = Kdiag(tmp_path, host="[::1]")
    try:
        assert k.curl("/metrics")[0] == 200
        r = subprocess.run([sys.executable, "-m", "kdiag", "run", "--from", str(RECORDING), "--listen",
                            f"[::1]:{k.port}"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert r.stderr == f"kdiag: cannot listen on [::1]:{k.port}: Address already in use\n"
        # A TLS ClientHello on the plain HTTP port gets a 400 and the connection closed, at once.
        with socket.create_connection(("::1", k.port), timeout=10) as s:
            s.sendall(bytes.fromhex("16030100a5010000a10303") + bytes(32))
            answer = b""
            while chunk := s.recv(4096):  # until kdiag closes it (a timeout here fails the test)
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 400")
    finally:
        k.close()


def hold(port: int, slow: int, idle: int) -> list[socket.socket]:
    """Attacker sockets: `slow` that sent half a request head, `idle` that sent nothing."""
    socks = []
    for i in range(slow + idle):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i < slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-slow: ")
        s.setblocking(False)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket) -> bool:
    """The server closed (or reset) this attacker socket."""
    try:
        while s.recv(4096):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def scrape(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
            return r.status
    except OSError:
        return 0


def test_slowloris_and_idle_sockets_are_closed_while_scrapes_go_on(tmp_path):
    k = Kdiag(tmp_path)
    socks = hold(k.port, slow=300, idle=200)
    try:
        statuses = []

        def all_closed() -> bool:
            statuses.append(scrape(k.url("/metrics")))
            return all(map(closed_by_server, socks))

        took = time.monotonic()
        wait_until(all_closed, 90, "kdiag to close 500 attacker sockets", [k.log])
        took = time.monotonic() - took
        assert statuses.count(200) >= 0.9 * len(statuses), statuses
        assert took < 60
        threads = next(line for line in Path(f"/proc/{k.proc.pid}/status").read_text().splitlines()
                       if line.startswith("Threads:"))
        assert int(threads.split()[1]) < 20
    finally:
        for s in socks:
            s.close()
        k.close()


def test_low_fd_limit_with_idle_connections_held(tmp_path):
    """66 idle connections against live kdiag under RLIMIT_NOFILE 64: the collectors keep their descriptors, the idle
    connections are refused or timed out, scrapes come back, and the log has a warning, not a traceback per cycle."""
    k = Kdiag(tmp_path, nofile=64, source=())
    socks = hold(k.port, slow=0, idle=66)
    try:
        wait_until(lambda: sum(map(closed_by_server, socks)) >= 40, 90, "kdiag to time out the idle connections",
                   [k.log])
        wait_until(lambda: all(scrape(k.url("/metrics")) == 200 for _ in range(5)), 60, "5 scrapes in a row", [k.log])
        assert k.proc.poll() is None
        log = k.log.read_text()
        assert "Traceback" not in log
        assert "Too many open files" not in log  # no collector starved
        assert 1 <= log.count("refusing connections") <= 2
    finally:
        for s in socks:
            s.close()
        k.close()


def test_every_answer_says_no_sniffing_no_framing_and_no_caching(tmp_path):
    k = Kdiag(tmp_path)
    try:
        wait_until(lambda: k.curl("/api/diagnoses")[0] == 200, 60, "kdiag answering")
        for path in ("/", "/metrics", "/api/diagnoses", "/api/page", "/nothing-here"):
            with pytest.raises(urllib.error.HTTPError) if path == "/nothing-here" else contextlib.nullcontext():
                urllib.request.urlopen(f"http://127.0.0.1:{k.port}{path}", timeout=30)
            request = urllib.request.Request(f"http://127.0.0.1:{k.port}{path}")
            try:
                headers = urllib.request.urlopen(request, timeout=30).headers
            except urllib.error.HTTPError as e:
                headers = e.headers
            assert headers["X-Content-Type-Options"] == "nosniff", path
            assert headers["Cache-Control"] == "no-store", path
            policy = headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy, path
        page = urllib.request.urlopen(f"http://127.0.0.1:{k.port}/", timeout=30)
        assert "script-src 'sha256-" in page.headers["Content-Security-Policy"]
    finally:
        k.close()


def test_a_refused_login_says_nosniff_and_the_web_configs_headers_come_after_kdiags(tmp_path, certs):
    path = web_config(tmp_path / "web.yml", certs)
    config = yaml.safe_load(path.read_text())
    config["http_server_config"] = {"headers": {"Strict-Transport-Security": "max-age=31536000"}}
    path.write_text(yaml.safe_dump(config))
    k = Kdiag(tmp_path, "--web-config", str(path), ca=certs / "ca.crt")
    try:
        for path_, login in (("/metrics", ()), ("/", ("-u", f"prom:{PASSWORD}"))):
            status, answer = k.curl(path_, "-I", *login)  # HEAD: the headers are the output
            names = [line.split(b":", 1)[0].lower() for line in answer.splitlines() if b":" in line]
            assert status == (200 if login else 401) and b"x-content-type-options: nosniff" in answer.lower(), answer
            assert names.index(b"strict-transport-security") > names.index(b"content-security-policy"), answer
        page_policy = next(line.split(b": ", 1)[1].decode() for line in answer.splitlines()
                           if line.lower().startswith(b"content-security-policy:"))
        assert page_policy == f"{POLICY}; frame-ancestors 'none'"  # the page's own policy, hashes and all
    finally:
        k.close()
