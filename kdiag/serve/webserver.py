"""The HTTP(S) endpoint: hypercorn on one event loop serving the published bytes over HTTP/1.1 only, with timeouts, TLS
and basic auth."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

import hypercorn.protocol
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from kdiag.core.errors import KdiagError
from kdiag.serve.exporter import Published
from kdiag.serve.webauth import BasicAuth, Verdict
from kdiag.serve.webconfig import CurrentTLS, WebConfigWatcher

if TYPE_CHECKING:
    import h11

log = logging.getLogger(__name__)

BACKLOG = 1024
# A client gets this long to send a whole request head, and an idle keep-alive connection is closed after it.
REQUEST_TIMEOUT_S = 20
TLS_HANDSHAKE_TIMEOUT_S = 5
# A longer request head is answered 431 and the connection closed. GET and HEAD only: a request body is never read.
MAX_REQUEST_HEAD = 16 * 1024
# Unacknowledged data older than this (a client that stopped reading) drops the connection; set on the listener,
# inherited by every accepted socket.
TCP_USER_TIMEOUT_MS = 20_000
RELOAD_CHECK_S = 1.0
# File descriptors kept free for the collection (files under /proc, Kafka and JMX connections): a connection that
# would eat into them is closed at once, so idle attackers can starve neither the collectors nor the log.
FDS_KEPT_FOR_COLLECTION = 32
WARN_EVERY_S = 60.0
NOT_FOUND = b"not found: try /, /metrics, /api/diagnoses or /healthz\n"


class ListenError(KdiagError):
    """The endpoint cannot listen on the address it was given."""

    exit_code = 1


_last_warning: dict[str, float] = {}


def _warn_now_and_then(what: str, message: str, *args: object) -> None:
    """A warning at most once a minute per kind (attacks repeat them many times a second)."""
    if time.monotonic() - _last_warning.get(what, -WARN_EVERY_S) >= WARN_EVERY_S:
        _last_warning[what] = time.monotonic()
        log.warning(message + " (next such warning in a minute at most)", *args)


class _ListenSocket(socket.socket):
    """The listening socket: refuses connections that would leave fewer than FDS_KEPT_FOR_COLLECTION descriptors."""

    def accept(self) -> tuple[socket.socket, tuple[str, int] | tuple[str, int, int, int]]:
        """socket.accept, closing the new connection at once when descriptors run short."""
        conn, address = super().accept()
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        # accept() returns the lowest free descriptor: every one below it is in use.
        used = conn.fileno()
        if limit != resource.RLIM_INFINITY and used >= limit - FDS_KEPT_FOR_COLLECTION:
            conn.close()
            _warn_now_and_then("fds", "refusing connections: %d of %d file descriptors in use, %d kept for collection",
                               used, limit, FDS_KEPT_FOR_COLLECTION)
            raise ConnectionAbortedError  # asyncio's accept loop takes this as "nothing more to accept now"
        return conn, address


def listen_socket(listen: str) -> _ListenSocket:
    """A bound (not yet listening) TCP socket for host:port or [v6]:port; ListenError in one line."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = _ListenSocket(family, kind, proto)
    except (OSError, ValueError) as e:
        raise ListenError(f"cannot listen on {listen[:100]}: {getattr(e, 'strerror', None) or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ListenError(f"cannot listen on {listen[:100]}: {e.strerror}") from None
    return sock


class _HTTP11Only(H11Protocol):
    """hypercorn's HTTP/1.1 without its two ways into HTTP/2, which it has no setting for: kdiag serves HTTP/1.1 only."""

    async def _check_protocol(self, event: h11.Request) -> None:
        """Neither switch: an h2c upgrade is ignored (HTTP lets a server do so), the prior-knowledge preface gets a 505."""


# hypercorn's ProtocolWrapper builds every connection's HTTP/1.1 protocol from this module attribute.
# A deliberate replacement of hypercorn's class, which hypercorn.protocol imports without exporting it.
hypercorn.protocol.H11Protocol = _HTTP11Only  # type: ignore[attr-defined]


class _Hypercorn(HypercornConfig):
    """hypercorn's config with kdiag's listening socket and the web config's TLS context."""

    def __init__(self, socket: _ListenSocket, tls: CurrentTLS | None):
        self.tls = tls
        self.socket = socket
        self.backlog = BACKLOG
        self.keep_alive_timeout = REQUEST_TIMEOUT_S
        self.h11_max_incomplete_size = MAX_REQUEST_HEAD
        self.alpn_protocols = ["http/1.1"]
        self.ssl_handshake_timeout = TLS_HANDSHAKE_TIMEOUT_S
        self.graceful_timeout = 1.0
        self.include_server_header = False
        # hypercorn's own INFO line ("Running on ... CTRL + C to quit") repeats the daemon's: warnings and errors only.
        self.errorlog = logging.getLogger("kdiag.serve.webserver.hypercorn")
        self.errorlog.setLevel(logging.WARNING)

    def create_sockets(self) -> Sockets:
        self.socket.setblocking(False)
        return Sockets([self.socket], [], []) if self.tls else Sockets([], [self.socket], [])

    @property
    def ssl_enabled(self) -> bool:
        return self.tls is not None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        return self.tls


class App:
    """The ASGI application: /metrics, /api/diagnoses, /healthz, / and /api/page from the published bytes, behind the web config."""

    def __init__(self, published: Published, web: WebConfigWatcher | None):
        self.published = published
        self.web = web
        self.auth = BasicAuth()

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        code, headers, body = await self._answer(scope)
        headers += self._always(scope["path"])
        headers.append((b"content-length", str(len(body)).encode()))
        if self.web:
            headers += self.web.config.headers
        await send({"type": "http.response.start", "status": code, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body, "more_body": False})

    def _always(self, path: str) -> list[tuple[bytes, bytes]]:
        """Headers of every answer: nothing is sniffed, framed or cached (/healthz aside), the page's policy enforced."""
        headers = [(b"x-content-type-options", b"nosniff"),
                   (b"content-security-policy", f"{self.published.page_policy}; frame-ancestors 'none'".encode()),
                   (b"x-frame-options", b"DENY")]
        return headers + ([] if path == "/healthz" else [(b"cache-control", b"no-store")])

    async def _login(self, scope: HTTPScope) -> tuple[Verdict, int]:
        config = self.web.config if self.web else None
        if not config or not config.users:
            return Verdict.ALLOWED, 0
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        return await self.auth.check(config.users, config.unknown_user_hash, header, scope.get("client"))

    async def _answer(self, scope: HTTPScope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        text = (b"content-type", b"text/plain")
        if scope["http_version"] not in ("1.0", "1.1"):
            return 505, [text, (b"connection", b"close")], b"kdiag serves HTTP/1.1 only\n"
        if scope["method"] not in ("GET", "HEAD"):
            return 405, [(b"allow", b"GET, HEAD"), text], b"only GET and HEAD\n"
        path = scope["path"]
        verdict, retry_after = await self._login(scope)
        if path == "/healthz":
            code, body = self.published.health()
            # Open for liveness probes, but only the status line: details are for authenticated callers.
            return code, [text], body if verdict is Verdict.ALLOWED else body.split(b"\n", 1)[0] + b"\n"
        if verdict is Verdict.DENIED:
            return 401, [(b"www-authenticate", b'Basic realm="kdiag"'), text], b"unauthorized\n"
        if verdict is not Verdict.ALLOWED:
            why = b"too many failed logins from your address" if verdict is Verdict.BACKED_OFF else b"too many logins at once"
            return verdict.value, [(b"retry-after", str(retry_after).encode()), text], why + b": try again later\n"
        if path == "/metrics":
            accept = next((v for k, v in scope["headers"] if k == b"accept-encoding"), b"")
            ctype = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
            if b"gzip" in accept:
                return 200, [ctype, (b"content-encoding", b"gzip")], self.published.metrics_gzip()
            return 200, [ctype], self.published.metrics
        if path == "/api/diagnoses":
            return 200, [(b"content-type", b"application/json")], self.published.diagnoses
        if path == "/api/page":
            return 200, [(b"content-type", b"application/json")], self.published.page()[1]
        if path == "/":
            return 200, [(b"content-type", b"text/html; charset=utf-8")], self.published.page()[0]
        return 404, [(b"content-type", b"text/plain")], NOT_FOUND


def _quiet_emfile(loop: asyncio.AbstractEventLoop) -> None:
    """Out of file descriptors, asyncio logs a traceback per failed accept (every second): a warning a minute instead."""
    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message", "").startswith("socket.accept() out of system resource"):
            _warn_now_and_then("emfile", "cannot accept connections: %s (retrying every second)", context.get("exception"))
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


class Exporter:
    """The endpoint on its own thread and event loop; start(), stop() and the bound port."""

    def __init__(self, listen: str, published: Published, web_config: str = ""):
        self.web = WebConfigWatcher(web_config) if web_config else None
        self.app = App(published, self.web)
        self.socket = listen_socket(listen)
        self.address = self.socket.getsockname()
        self.config = _Hypercorn(self.socket, self.web.tls if self.web else None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="exporter", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.address[1])

    @property
    def scheme(self) -> str:
        """https with a TLS web config, else http."""
        return "https" if self.config.tls else "http"

    def start(self) -> None:
        """Serve in the background; connections queue from now on, even before the event loop runs."""
        self.socket.listen(BACKLOG)
        self.thread.start()
        self._started.wait()

    def stop(self) -> None:
        """Stop serving and close the socket (also when never started)."""
        if self._loop and self._stopping and self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self.thread.join(10)
        else:
            self.socket.close()
        self.app.auth.close()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        _quiet_emfile(self._loop)
        self._stopping = asyncio.Event()
        watcher = asyncio.create_task(self._watch(self.web)) if self.web else None
        self._started.set()
        try:  # hypercorn closes the listening socket when it stops
            await serve(self.app, self.config, shutdown_trigger=self._stopping.wait)
        finally:
            if watcher:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    async def _watch(self, web: WebConfigWatcher) -> None:
        while True:
            await asyncio.sleep(RELOAD_CHECK_S)
            # Off the loop: a new config with a new bcrypt cost makes a hash for unknown users (seconds at a high cost).
            await asyncio.to_thread(web.poll)
