"""The endpoint under attack: wrong-password floods, user enumeration, HTTP/2, idle connections, long passwords and
a certificate that appears after the web config naming it. A real kdiag on 127.0.0.1; clients on other loopback
addresses stand for other hosts."""

from __future__ import annotations

import base64
import collections
import http.client
import os
import secrets
import socket
import ssl
import threading
import time
from pathlib import Path

import bcrypt
import pytest
import yaml
from tests.promstack import binary
from tests.serve.test_webserver import PASSWORD as TLS_PASSWORD
from tests.serve.test_webserver import SERVER_EXT, Kdiag, closed_by_server, make_ca, make_cert, web_config
from tests.waiting import wait_until

from kdiag.serve.webauth import FREE_FAILURES
from kdiag.serve.webconfig import load_web_config

pytestmark = pytest.mark.integration

USER = "prom"
PASSWORD = b"right-password"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = bytes.fromhex("000000040000000000")  # an empty HTTP/2 SETTINGS frame
PING = bytes.fromhex("0000080600000000000102030405060708")


def basic(user: str, password: bytes) -> str:
    return "Basic " + base64.b64encode(user.encode() + b":" + password).decode()


def users_config(path: Path, cost: int, password: bytes = PASSWORD) -> Path:
    """A plain-HTTP web config with user prom; the hash is of the first 72 bytes, as htpasswd makes it."""
    hashed = bcrypt.hashpw(password[:72], bcrypt.gensalt(cost)).decode()
    path.write_text(yaml.safe_dump({"basic_auth_users": {USER: hashed}}))
    return path


def ask(port: int, password: bytes | None, source: str = "127.0.0.1", user: str = USER,
        path: str = "/metrics") -> tuple[int, float, http.client.HTTPResponse]:
    """(status, seconds, response) of one GET on a new connection from the loopback address `source`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20, source_address=(source, 0))
    t0 = time.monotonic()
    try:
        conn.request("GET", path, headers={"Authorization": basic(user, password)} if password is not None else {})
        r = conn.getresponse()
        r.read()
        return r.status, time.monotonic() - t0, r
    finally:
        conn.close()


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Flood:
    """Keep-alive connections sending GET /metrics as prom with a new wrong password each time, until the block ends."""

    def __init__(self, port: int, sources: list[str]):
        self.port = port
        self.statuses: collections.Counter = collections.Counter()
        self.refused_sources: set[str] = set()  # addresses that got a 401
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._attack, args=(s,), daemon=True) for s in sources]

    def _attack(self, source: str) -> None:
        while not self.stopping.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10, source_address=(source, 0))
            try:
                while not self.stopping.is_set():
                    conn.request("GET", "/metrics", headers={"Authorization": basic(USER, secrets.token_hex(8).encode())})
                    r = conn.getresponse()
                    r.read()
                    self.statuses[r.status] += 1
                    if r.status == 401:
                        self.refused_sources.add(source)
            except (OSError, http.client.HTTPException):
                self.statuses["error"] += 1
                self.stopping.wait(0.1)
            finally:
                conn.close()

    def __enter__(self) -> Flood:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(15)


@pytest.fixture
def flooded(tmp_path):
    """kdiag with user prom at bcrypt cost 11 (0.1-0.2 s a check here, 3-4 times cheaper than a common 12)."""
    k = Kdiag(tmp_path, "--web-config", str(users_config(tmp_path / "web.yml", 11)))
    yield k
    k.close()


def test_one_client_flooding_wrong_passwords_is_backed_off_and_a_first_login_stays_fast(flooded):
    with Flood(flooded.port, ["127.0.0.1"] * 30) as flood:
        wait_until(lambda: flood.statuses[401] >= FREE_FAILURES, 60, "the flood's first failures", [flooded.log])
        cpu, t0 = cpu_seconds(flooded.proc.pid), time.monotonic()
        # Another host's first login needs one bcrypt (two if it meets one of the flood's), not a place behind the flood.
        status, took, _ = ask(flooded.port, PASSWORD, source="127.0.0.2")
        assert status == 200 and took < 1.0, (status, took, flood.statuses)
        # The flooding host's own scrape, already verified, pays no bcrypt and no backoff.
        status, took, _ = ask(flooded.port, PASSWORD)
        assert status == 200 and took < 1.0, (status, took)
        wait_until(lambda: time.monotonic() - t0 > 5, 10, "a 5 s window of CPU use")
        cores = (cpu_seconds(flooded.proc.pid) - cpu) / (time.monotonic() - t0)
    assert cores < 0.5, f"kdiag used {cores:.2f} cores under the flood ({flood.statuses})"
    assert flood.statuses[429] > 0 and flood.statuses[200] == 0, flood.statuses


def test_thirty_clients_flooding_meet_a_bounded_pool_and_scrapes_stay_fast(flooded):
    with Flood(flooded.port, [f"127.0.1.{i}" for i in range(1, 31)]) as flood:
        wait_until(lambda: flood.statuses[503] >= 30 and len(flood.refused_sources) == 30, 60,
                   "the pool to turn away 30 checks and every flooding address to fail", [flooded.log])
        # Addresses with failures on record leave places in the pool for first logins: a few checks ahead at most.
        status, took, _ = ask(flooded.port, PASSWORD, source="127.0.0.2")
        assert status == 200 and took < 3.0, (status, took, flood.statuses)
        for _ in range(5):
            status, took, _ = ask(flooded.port, PASSWORD)
            assert status == 200 and took < 1.0, (status, took, flood.statuses)
    assert set(flood.statuses) <= {401, 429, 503}, flood.statuses


def test_a_repeated_wrong_password_costs_no_bcrypt_and_failures_back_a_client_off(tmp_path):
    k = Kdiag(tmp_path, "--web-config", str(users_config(tmp_path / "web.yml", 12)))
    try:
        status, first, _ = ask(k.port, b"wrong", source="127.0.3.1")
        assert status == 401 and first > 0.1
        status, again, _ = ask(k.port, b"wrong", source="127.0.3.1")
        assert status == 401 and again < first / 2, (first, again)

        client = "127.0.3.2"
        assert [ask(k.port, f"wrong-{i}".encode(), source=client)[0] for i in range(5)] == [401] * 5
        status, _, answer = ask(k.port, b"wrong-5", source=client)
        assert status == 429 and int(answer.headers["Retry-After"]) >= 1
        assert ask(k.port, PASSWORD, source="127.0.3.3")[0] == 200
        assert ask(k.port, PASSWORD, source=client)[0] == 200  # verified now: served from the cache
    finally:
        k.close()


def test_an_unknown_user_costs_what_a_known_user_costs(tmp_path):
    path = users_config(tmp_path / "web.yml", 12)
    assert load_web_config(path).unknown_user_hash.startswith(b"$2b$12$")
    k = Kdiag(tmp_path, "--web-config", str(path))
    try:
        times: dict[str, list[float]] = {USER: [], "nobody": []}
        for i in range(5):  # a new address and password each time: no cached failure, no backoff
            for n, user in enumerate(times):  # interleaved, so a busy moment of a shared machine slows both
                status, took, _ = ask(k.port, secrets.token_hex(8).encode(), source=f"127.0.2.{1 + 2 * i + n}",
                                      user=user)
                assert status == 401
                times[user].append(took)
        # The fastest of each: what the check costs when nothing else on the machine gets in its way.
        known, unknown = min(times[USER]), min(times["nobody"])
        assert 0.5 < unknown / known < 2, f"known user {known * 1000:.0f} ms, unknown {unknown * 1000:.0f} ms"
    finally:
        k.close()


def test_passwords_longer_than_72_bytes_are_checked_on_their_first_72_like_htpasswd_and_go(tmp_path):
    long = bytes(range(65, 91)) * 4  # 104 bytes
    k = Kdiag(tmp_path, "--web-config", str(users_config(tmp_path / "web.yml", 4, password=long)))
    try:
        assert ask(k.port, long)[0] == 200
        assert ask(k.port, long[:72] + b"another tail")[0] == 200
        assert ask(k.port, long[:72])[0] == 200
        assert ask(k.port, b"x" + long[1:], source="127.0.4.1")[0] == 401
    finally:
        k.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    binary("openssl")
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_cert(d, "server", "ca", SERVER_EXT)
    return d


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a 10 s timeout fails the test)."""
    s.settimeout(10)
    answer = b""
    try:
        while chunk := s.recv(4096):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def test_http2_is_refused_in_http11_prior_knowledge_h2c_and_alpn_over_tls(tmp_path, certs):
    plain = Kdiag(tmp_path)
    tls = Kdiag(tmp_path, "--web-config", str(web_config(tmp_path / "web.yml", certs)), ca=certs / "ca.crt")
    try:
        with socket.create_connection(("127.0.0.1", plain.port), timeout=10) as s:
            s.sendall(PREFACE + SETTINGS)
            assert read_until_closed(s).startswith(b"HTTP/1.1 505 ")
        with socket.create_connection(("127.0.0.1", plain.port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                      b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            s.settimeout(10)
            assert s.recv(4096).startswith(b"HTTP/1.1 200 ")
        for offered in (["h2"], ["h2", "http/1.1"]):
            context = ssl.create_default_context(cafile=certs / "ca.crt")
            context.set_alpn_protocols(offered)
            with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost") as s:
                assert s.selected_alpn_protocol() in (None, "http/1.1")
                s.sendall(PREFACE + SETTINGS)
                assert read_until_closed(s).startswith(b"HTTP/1.1 505 ")
    finally:
        plain.close()
        tls.close()


def test_idle_half_sent_and_http2_connections_are_closed_within_the_20_s_limit(tmp_path):
    k = Kdiag(tmp_path)
    sent = {
        "idle": b"",
        "half-sent head": b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-slow: ",
        "idle after a request": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "HTTP/2 preface": PREFACE + SETTINGS,
        "HTTP/2 pinging": PREFACE + SETTINGS,
        "h2c upgrade": b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                       b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    }
    socks = {}
    for name, data in sent.items():
        socks[name] = socket.create_connection(("127.0.0.1", k.port), timeout=10)
        socks[name].sendall(data)
        socks[name].setblocking(False)
    t0 = time.monotonic()
    closed_after: dict[str, float] = {}
    last_ping = t0

    def all_closed() -> bool:
        nonlocal last_ping
        if "HTTP/2 pinging" not in closed_after and time.monotonic() - last_ping > 5:
            last_ping = time.monotonic()
            try:
                socks["HTTP/2 pinging"].sendall(PING)
            except OSError:
                closed_after["HTTP/2 pinging"] = time.monotonic() - t0
        for name, s in socks.items():
            if name not in closed_after and closed_by_server(s):
                closed_after[name] = time.monotonic() - t0
        return len(closed_after) == len(socks)

    try:
        wait_until(lambda: all_closed() or time.monotonic() - t0 > 45, 60, "45 s of watching the connections")
        assert closed_after.keys() == socks.keys(), f"open after 45 s: {socks.keys() - closed_after.keys()}"
        for name in ("idle", "half-sent head", "idle after a request"):
            assert 18 <= closed_after[name] <= 30, closed_after  # the documented 20 s
        assert max(closed_after.values()) <= 30, closed_after
    finally:
        for s in socks.values():
            s.close()
        k.close()


def test_a_certificate_named_before_it_exists_is_picked_up_when_it_appears(tmp_path, certs):
    path = web_config(tmp_path / "web.yml", certs)
    k = Kdiag(tmp_path, "--web-config", str(path), ca=certs / "ca.crt")
    try:
        renewed = tmp_path / "renewed"
        renewed.mkdir()
        web_config(path, renewed)  # names renewed/server.crt and .key, not there yet
        wait_until(lambda: "web config not reloaded" in k.log.read_text(), 30, "the refused reload", [k.log])
        for name in ("ca.crt", "ca.key"):
            (renewed / name).write_bytes((certs / name).read_bytes())
        make_cert(renewed, "server", "ca", SERVER_EXT)
        new = ssl.PEM_cert_to_DER_cert((renewed / "server.crt").read_text())
        wait_until(lambda: ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", k.port), timeout=10)) == new,
                   30, "the certificate that appeared later", [k.log])
        assert k.curl("/metrics", "-u", f"prom:{TLS_PASSWORD}")[0] == 200
    finally:
        k.close()
