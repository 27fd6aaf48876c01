"""A broker's MBeans read from the Prometheus jmx_exporter java agent's HTTP endpoint instead of a JmxTool JVM: its
text exposition (hostile input: bounded, parsed strictly) mapped back to the "<mbean>|<attribute>" keys JmxTool gives.

The agent's default names are `<domain>_<the value of one key>_<attribute>` with the other keys as labels, domain and
value made safe (anything but letters, digits, `_` and `:` becomes `_`); which key gave its value to the name is told
by the queries kdiag asks JmxTool: the one key of the query that is not a label (`name` for a `,*` query that has
them all)."""

from __future__ import annotations

import math
import re
import threading
import time

import urllib3

from kdiag.core.netns import enter_net
from kdiag.kafka.jmx_reader import split_netns

MAX_BYTES = 32 * 2**20  # a broker with 10,000 partitions serves ~10 MB in the agent's default names
MAX_LINE = 64 * 1024
LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)(?: -?[0-9]+)?")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
UNSAFE = re.compile(r"[^a-zA-Z0-9:_]")


def safe(text: str) -> str:
    """The agent's safe name of a domain or key value."""
    return UNSAFE.sub("_", text)


def parse_labels(text: str) -> dict[str, str]:
    """The `k="v",...` of one sample; ValueError unless it is all well-formed pairs."""
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if m is None:
            raise ValueError(f"malformed labels at column {pos}")
        labels[m.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        pos = m.end()
    return labels


def parse_exposition(text: str, prefixes: tuple[str, ...] = ("",)) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every finite sample whose line starts with one of the prefixes (the others are never
    read: a broker's thousands of per-topic series cost nothing); ValueError naming the first malformed line."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.startswith(prefixes) or line.startswith("#"):
            continue
        m = LINE.fullmatch(line) if len(line) <= MAX_LINE else None
        try:
            if m is None:
                raise ValueError("not a sample line")
            value = float(m.group(3))
            labels = parse_labels(m.group(2) or "")
        except ValueError as e:
            raise ValueError(f"line {lineno}: {e}") from None
        if math.isfinite(value):
            out.append((m.group(1), labels, value))
    return out


class Query:
    """One JmxTool object name query: its domain, fixed and wildcard keys, whether other keys may follow (`,*`)."""

    def __init__(self, query: str):
        self.domain, _, props = query.partition(":")
        parts = props.split(",")
        self.open = parts[-1] == "*"
        self.keys = dict(p.split("=", 1) for p in parts if "=" in p)
        self.prefix = safe(self.domain) + "_"
        # The values the agent's name may carry: a fixed key's (made safe), or any under a wildcard.
        self.names = None if "*" in self.keys.values() or self.open else {safe(v) for v in self.keys.values()}

    def mbean(self, name: str, labels: dict[str, str], attribute: str) -> str | None:
        """The object name this query matches for a sample of `attribute`, None when it matches none."""
        prefix, suffix = self.prefix, "_" + attribute
        if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) <= len(prefix) + len(suffix):
            return None
        value = name[len(prefix):-len(suffix)]
        if self.names is not None and value not in self.names:
            return None
        if any(k not in self.keys for k in labels) and not self.open:
            return None
        if any(labels.get(k, v) != v for k, v in self.keys.items() if v != "*"):
            return None
        missing = [k for k in self.keys if k not in labels]
        if len(missing) > 1 or (not missing and not self.open):
            return None
        key = missing[0] if missing else "name"
        wanted = self.keys.get(key, "*")
        if wanted != "*" and safe(wanted) != value:
            return None
        props = {**labels, key: value if wanted == "*" else wanted}
        return self.domain + ":" + ",".join(f"{k}={v}" for k, v in sorted(props.items()))


def to_values(samples: list[tuple[str, dict[str, str], float]], queries: tuple[str, ...],
              attributes: tuple[str, ...]) -> dict[str, float]:
    """The samples that kdiag's queries and attributes ask for, keyed "<mbean>|<attribute>" as JmxTool's."""
    by_prefix: dict[str, list[Query]] = {}
    for q in map(Query, queries):
        by_prefix.setdefault(q.prefix, []).append(q)
    values = {}
    for name, labels, value in samples:
        candidates = next((qs for prefix, qs in by_prefix.items() if name.startswith(prefix)), [])
        for attribute in attributes if candidates else ():
            if not name.endswith("_" + attribute):
                continue
            mbean = next((m for q in candidates if (m := q.mbean(name, labels, attribute))), None)
            if mbean:
                values[f"{mbean}|{attribute}"] = value
    return values


class ExporterReader:
    """A thread polling one jmx_exporter endpoint; the same reading interface as JmxReader. An "@netns:PID" after
    the URL: the thread joins that process's network namespace first (a container broker's agent on its own
    loopback), so its connections are made there, with no program run."""

    legacy = False

    def __init__(self, url: str, poll_interval: float, queries: tuple[str, ...], attributes: tuple[str, ...],
                 timeout: float = 10.0):
        self.url = url
        self._target, self._netns = split_netns(url)
        self.started = time.monotonic()
        self.latest: tuple[float, dict[str, float]] | None = None
        self.error = ""
        self.poll_interval = poll_interval
        self.queries, self.attributes, self.timeout = queries, attributes, timeout
        self._pool = urllib3.PoolManager(retries=False)
        self._fresh = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jmx-exporter {url}", daemon=True)
        self._thread.start()

    def fetch(self) -> dict[str, float]:
        """One scrape, mapped; ValueError or urllib3's errors when it fails."""
        response = self._pool.request("GET", self._target, preload_content=False, redirect=False,
                                      timeout=urllib3.Timeout(total=self.timeout))
        try:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            body = response.read(MAX_BYTES + 1, decode_content=True)
        finally:
            response.release_conn()
        if len(body) > MAX_BYTES:
            raise ValueError(f"over {MAX_BYTES // 2**20} MiB")
        prefixes = tuple({Query(q).prefix for q in self.queries})
        return to_values(parse_exposition(body.decode("utf-8", errors="strict"), prefixes), self.queries,
                         self.attributes)

    def _run(self) -> None:
        if self._netns is not None:
            try:
                enter_net(self._netns)
            except OSError as e:  # the thread ends: the collector tries a new reader later
                self.error = f"{self.url}: cannot join the network namespace of pid {self._netns}: {e.strerror or e}"
                return
        while not self._stop.is_set():
            try:
                values = self.fetch()
            except (ValueError, urllib3.exceptions.HTTPError) as e:
                self.error = f"{self.url}: {type(e).__name__}: {str(e)[:200]}"
            else:
                self.error = ""
                with self._fresh:
                    self.latest = (time.monotonic(), values)
                    self._fresh.notify_all()
            self._stop.wait(self.poll_interval)

    def alive(self) -> bool:
        """Whether the poller still runs."""
        return self._thread.is_alive()

    def wait_row(self, deadline: float, max_age: float) -> dict[str, float] | None:
        """The latest values no older than max_age, waiting until `deadline` (monotonic) for the first."""
        with self._fresh:
            while self.latest is None and time.monotonic() < deadline:
                self._fresh.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            if self.latest is None or time.monotonic() - self.latest[0] > max_age:
                return None
            return self.latest[1]

    def close(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join(self.timeout + 1)
        self._pool.clear()
