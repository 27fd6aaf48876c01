"""The Prometheus endpoint and JSON API: each cycle's state is rendered once; a scrape only serves bytes."""

from __future__ import annotations

import gzip
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import Metric

from kdiag import __version__
from kdiag.pipeline import State
from kdiag.sample import COUNTER, COUNTER32, HISTOGRAM, Sample

log = logging.getLogger(__name__)

MAX_REASON = 300
SCHEDULE_NOTE = "collected on kdiag's own schedule; a scrape serves the last snapshot and never reads /proc, Kafka or JMX"


def histogram_family(name: str) -> str:
    """The family name of a histogram series (without _bucket, _sum or _count)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exposition_type(s: Sample) -> str:
    """The Prometheus type of a sample's family: counters must end in _total, else they are gauges."""
    if s.kind == HISTOGRAM:
        return "histogram"
    return "counter" if s.kind in (COUNTER, COUNTER32) and s.name.endswith("_total") else "gauge"


def _family(name: str, kind: str, help_text: str) -> Metric:
    # prometheus_client names counter families without the _total suffix it adds to each sample.
    base = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
    return Metric(base, help_text, kind)


class StateCollector:
    """A prometheus_client collector over one published State."""

    def __init__(self, state: State, help_text: dict[str, str]):
        self.state = state
        self.help = help_text

    def collect(self):
        """Every sample of the state, collector health and diagnoses, as metric families."""
        families: dict[str, Metric] = {}
        for s in self.state.samples:
            family = histogram_family(s.name) if s.kind == HISTOGRAM else s.name
            fam = families.get(family)
            if fam is None:
                fam = families[family] = _family(family, exposition_type(s), self.help.get(family, family))
            fam.add_sample(s.name, dict(s.labels), s.value)
        yield from families.values()
        yield from self._health()
        yield from self._diagnoses()

    def _health(self):
        success = Metric("kdiag_collector_success", f"1 when the collector's last run succeeded; {SCHEDULE_NOTE}", "gauge")
        duration = Metric("kdiag_collector_duration_seconds", f"how long the collector's last run took; {SCHEDULE_NOTE}", "gauge")
        last = Metric("kdiag_collector_last_success_timestamp_seconds",
                      f"when the collector last succeeded; {SCHEDULE_NOTE}", "gauge")
        error = Metric("kdiag_collector_last_error_info", "why the collector is failing now (always 1; absent while it works)",
                       "gauge")
        for name, h in sorted(self.state.health.items()):
            success.add_sample("kdiag_collector_success", {"collector": name}, float(h.success))
            if not h.success and h.error:
                error.add_sample("kdiag_collector_last_error_info", {"collector": name, "reason": h.error[:MAX_REASON]}, 1.0)
            duration.add_sample("kdiag_collector_duration_seconds", {"collector": name}, h.duration)
            if h.last_success is not None:
                last.add_sample("kdiag_collector_last_success_timestamp_seconds", {"collector": name}, h.last_success)
        cycle = Metric("kdiag_last_cycle_timestamp_seconds", "time of the snapshot being served", "gauge")
        cycle.add_sample("kdiag_last_cycle_timestamp_seconds", {}, self.state.time)
        info = Metric("kdiag_build_info", "kdiag version", "gauge")
        info.add_sample("kdiag_build_info", {"version": __version__}, 1.0)
        return [success, duration, last, error, cycle, info]

    def _diagnoses(self):
        active = Metric("kdiag_diagnosis_active",
                        "1 while a rule fires for a subject, 0 while pending (condition true, `for` not yet met)", "gauge")
        evidence = Metric("kdiag_diagnosis_evidence", "the signal values behind an active diagnosis", "gauge")
        for d in self.state.diagnoses:
            labels = {"rule": d.rule.id, "subject": d.subject, "kind": d.rule.kind, "severity": d.rule.severity}
            active.add_sample("kdiag_diagnosis_active", labels, 1.0 if d.state == "firing" else 0.0)
            for signal, value in d.evidence.items():
                if isinstance(value, float):
                    evidence.add_sample("kdiag_diagnosis_evidence",
                                        {"rule": d.rule.id, "subject": d.subject, "signal": signal}, value)
        return [active, evidence]


def failing_lines(state: State) -> bytes:
    """One line per failing collector with its reason, for /healthz."""
    return "".join(f"{name}: {h.error[:MAX_REASON]}\n" for name, h in sorted(state.health.items())
                   if not h.success and h.error).encode()


def render_metrics(state: State, help_text: dict[str, str]) -> bytes:
    """The Prometheus text exposition of a state plus kdiag's own process metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state, help_text))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return generate_latest(registry)


class Published:
    """The bytes served for the latest state, swapped atomically by the collection thread."""

    def __init__(self):
        self.metrics = b"# kdiag: first collection still running\n"
        self.metrics_gzip = gzip.compress(self.metrics)
        self.diagnoses = b'{"host": "", "time": 0, "diagnoses": []}'
        self.failing = b""
        self.ready = False

    def publish(self, state: State, help_text: dict[str, str]) -> None:
        """Render a new state once; scrapes then serve it as it is."""
        metrics = render_metrics(state, help_text)
        self.metrics, self.metrics_gzip = metrics, gzip.compress(metrics, compresslevel=1)
        self.diagnoses = json.dumps(state.to_json()).encode()
        self.failing = failing_lines(state)
        self.ready = True

    def healthz(self) -> tuple[int, bytes]:
        """The /healthz status and body: "ok" while serving, then the failing collectors and why."""
        return (200, b"ok\n" + self.failing) if self.ready else (503, b"starting\n")


def _handler(published: Published) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle on, a keep-alive scrape waits ~40 ms for a delayed ACK.
        disable_nagle_algorithm = True

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                gz = "gzip" in self.headers.get("Accept-Encoding", "")
                self._send(200, "text/plain; version=0.0.4; charset=utf-8",
                           published.metrics_gzip if gz else published.metrics, gz)
            elif path == "/api/diagnoses":
                self._send(200, "application/json", published.diagnoses)
            elif path == "/healthz":
                code, body = published.healthz()
                self._send(code, "text/plain", body)
            elif path == "/":
                self._send(200, "text/html", b'<html><body><h1>kdiag</h1><a href="/metrics">/metrics</a> '
                                             b'<a href="/api/diagnoses">/api/diagnoses</a></body></html>')
            else:
                self._send(404, "text/plain", b"not found: try /metrics, /api/diagnoses or /healthz\n")

        def _send(self, code: int, ctype: str, body: bytes, gz: bool = False) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if gz:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


class Exporter:
    """The HTTP server of /metrics, /api/diagnoses and /healthz on its own thread."""

    def __init__(self, listen: str, published: Published):
        host, _, port = listen.rpartition(":")
        self.server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _handler(published))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="exporter", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self.server.server_address[1]

    def start(self) -> None:
        """Serve in the background."""
        self.thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
