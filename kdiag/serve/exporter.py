"""What the endpoint serves: each cycle's state is rendered once (metrics, gzip, diagnoses JSON); a scrape only serves bytes."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from kdiag.core.finite import SKIPPED, dumps
from kdiag import __version__
from kdiag.core.quote import LABEL_LIMIT, label_value, printable
from kdiag.core.cardinality import KAFKA_PREFIX, cap_kafka_series, top_groups
from kdiag.runtime.pipeline import State
from kdiag.core.sample import COUNTER, COUNTER32, HISTOGRAM, Sample
from kdiag.analysis.scope import diagnosis_labels, explains_labels, exported, with_cluster
from kdiag.analysis.subject_cap import SubjectCap
from kdiag.families import declared_family
from kdiag.families.family import Family
from kdiag.families.own import (
    BUILD_INFO, CLUSTER_REPORTING, COLLECTOR_CPU_SECONDS_TOTAL, COLLECTOR_DURATION_SECONDS, COLLECTOR_ENABLED,
    COLLECTOR_LAST_ERROR_INFO, COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS, COLLECTOR_SUCCESS, CYCLE_INTERVAL_SECONDS, DIAGNOSIS_ACTIVE,
    DIAGNOSIS_EVIDENCE, DIAGNOSIS_EXPLAINS, DIAGNOSIS_SUBJECTS, DIAGNOSIS_SUBJECTS_OMITTED, LAST_CYCLE_TIMESTAMP_SECONDS,
    OUTPUT_VALUES_SKIPPED_TOTAL, RENDER_ERRORS_TOTAL, SERIES_DROPPED_TOTAL,
)

log = logging.getLogger(__name__)
MAX_REASON = 300


def histogram_family(name: str) -> str:
    """The family name of a histogram series (without _bucket, _sum or _count)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def help_of(family: str) -> str:
    """The declared HELP of a sample family (its name when undeclared: tests/families keeps that from happening)."""
    declared = declared_family(family)
    return declared.help if declared else family


def exposition_type(s: Sample) -> str:
    """The Prometheus type of a sample's family: counters must end in _total, else they are gauges."""
    if s.kind == HISTOGRAM:
        return "histogram"
    return "counter" if s.kind in (COUNTER, COUNTER32) and s.name.endswith("_total") else "gauge"


class ExportedMetric(Metric):
    """A metric family whose label values are added as printable() text.

    prometheus_client escapes only backslash, quote and newline; the other line breaks (\\r, \\x1c-\\x1e, \\x85,
    \\u2028, ...) would split the cached lines, terminal controls reach whoever reads /metrics, and a lone surrogate
    cannot be encoded at all. Process names, group ids and topics come from anyone: they are data, printed as text.
    """

    # The rest passes through as given: prometheus_client's versions differ in what follows the value.
    def add_sample(self, name: str, labels: dict[str, str], value: float, *args: Any, **kwargs: Any) -> None:
        """Add a sample, its label values made printable and cut (label_value)."""
        if not all(v.isprintable() and len(v) <= LABEL_LIMIT for v in labels.values()):
            labels = {k: label_value(v) for k, v in labels.items()}
        super().add_sample(name, labels, value, *args, **kwargs)


def _family(name: str, kind: str, help_text: str) -> Metric:
    # prometheus_client names counter families without the _total suffix it adds to each sample.
    base = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
    return ExportedMetric(base, help_text, kind)


def _declared(family: Family) -> ExportedMetric:
    """An empty exposition family of a declared one."""
    return cast(ExportedMetric, _family(family.name, "counter" if family.kind == COUNTER else family.kind, family.help))


class _Families:
    """A registry stand-in for generate_latest: just these families."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def group_families(samples: list[Sample]) -> dict[str, list[Sample]]:
    """Samples by family (a histogram's _bucket, _sum and _count series together), in order of first appearance."""
    grouped: dict[str, list[Sample]] = {}
    for s in samples:
        grouped.setdefault(histogram_family(s.name) if s.kind == HISTOGRAM else s.name, []).append(s)
    return grouped


_Key = tuple[list[list[Sample]], str, str]  # the sources' lists of a family's samples, its help, the cluster label
_Series = list[tuple[str, tuple[tuple[str, str], ...]]]  # (name, labels) of each sample, in order


@dataclasses.dataclass
class _Text:
    """One family's exposition, what it was rendered from, and each sample line up to its value."""

    key: _Key
    text: bytes
    series: _Series
    header: str  # its HELP and TYPE lines
    prefixes: list[str]  # each sample's line up to its value; empty when the lines do not follow the samples


class FamilyCache:
    """Each sample family's exposition text, rendered again only when its samples or help change.

    Kafka's thousands of series change once per fetch (15 s or more), not every cycle: a carried batch (the same list
    cycle after cycle) is grouped once, and its families are not rendered again. A family whose series stayed the
    same and only moved in value (a fetch's new offsets, a host counter) is its cached line prefixes and the new
    values: prometheus_client costs ~28 us a line, the prefix ~1 us.
    """

    def __init__(self) -> None:
        self._rendered: dict[str, _Text] = {}
        self._grouped: list[tuple[list[Sample], dict[str, list[Sample]]]] = []
        self.render_errors: dict[str, float] = {}  # family -> cycles it was left out of
        self._failed: set[str] = set()  # families left out of the last cycle (logged once per streak)
        self._failing: set[str] = set()  # families left out of this cycle so far

    def groups(self, sources: list[list[Sample]]) -> list[dict[str, list[Sample]]]:
        """Each source's samples by family; a source seen at the last call (the same list) is not grouped again."""
        grouped = [(source, next((g for s, g in self._grouped if s is source), {}) or group_families(source))
                   for source in sources]
        self._grouped = grouped
        return [g for _, g in grouped]

    def render(self, sources: list[list[Sample]], cluster: str = "") -> bytes:
        """The exposition of every family of the sources' samples, in their order, Kafka's with the `cluster` label."""
        parts: dict[str, list[list[Sample]]] = {}
        for groups in self.groups(sources):
            for family, members in groups.items():
                parts.setdefault(family, []).append(members)
        self._failed, self._failing = self._failing, set()
        rendered = {}
        for family, lists in parts.items():
            # A carried family is the same list cycle after cycle: comparing it costs an identity check.
            key = (lists, help_of(family), cluster)
            previous = self._rendered.get(family)
            if previous and previous.key == key:
                rendered[family] = previous
                continue
            try:
                rendered[family] = _rerender(family, previous, key, lists)
            except Exception as e:  # one family that cannot be rendered never holds back the cycle
                self._leave_out(family, e)
        self._rendered = rendered
        return b"".join(r.text for r in rendered.values())

    def render_families(self, families: Iterable[Metric]) -> bytes:
        """Each family's exposition (one that fails is left out and counted), then kdiag_render_errors_total."""
        texts = []
        for family in families:
            try:
                texts.append(generate_latest(_Families([family])))
            except Exception as e:  # as in render()
                self._leave_out(family.name + ("_total" if family.type == "counter" else ""), e)
        errors = _declared(RENDER_ERRORS_TOTAL)
        for name, count in sorted(self.render_errors.items()):
            errors.add_sample(RENDER_ERRORS_TOTAL.name, {"family": name}, count)
        return b"".join(texts) + generate_latest(_Families([errors]))

    def _leave_out(self, family: str, error: Exception) -> None:
        if family not in self._failed:
            log.warning("metric family %s left out of /metrics: %s: %s", family, type(error).__name__, str(error)[:MAX_REASON])
        self._failing.add(family)
        self.render_errors[family] = self.render_errors.get(family, 0.0) + 1


def _rerender(family: str, previous: _Text | None, key: _Key, lists: list[list[Sample]]) -> _Text:
    """A family's new text: its cached line prefixes with the new values while its series stay the same, else rendered."""
    members = [s for m in lists for s in m]
    series = [(s.name, s.labels) for s in members]
    if previous and previous.prefixes and previous.key[1:] == key[1:] and previous.series == series:
        values = zip(previous.prefixes, members, strict=True)
        # prometheus_client leaves floatToGoString unannotated.
        lines = "".join([p + floatToGoString(s.value) + "\n" for p, s in values])  # type: ignore[no-untyped-call]
        return _Text(key, (previous.header + lines).encode(), series, previous.header, previous.prefixes)
    return _render(family, members, key, series)


def _render(family: str, members: list[Sample], key: _Key, series: _Series) -> _Text:
    """A family rendered by prometheus_client, with its line prefixes when its lines follow its samples one to one."""
    fam = _family(family, exposition_type(members[0]), key[1])
    for s in with_cluster(members, key[2]):
        fam.add_sample(s.name, dict(s.labels), s.value)
    text = generate_latest(_Families([fam]))
    # Only \n ends a line: prometheus_client escapes it in label values and HELP (str.splitlines breaks on more).
    lines = [line + "\n" for line in text.decode().split("\n")[:-1]]
    header = "".join(line for line in lines if line.startswith("#"))
    samples = [line for line in lines if not line.startswith("#")]
    # A value has no space, whatever the labels hold: the prefix ends at the line's last space.
    prefixes = [line[: line.rindex(" ") + 1] for line in samples] if len(samples) == len(members) else []
    return _Text(key, text, series, header, prefixes)


class StateCollector:
    """A prometheus_client collector over one published State's health and diagnoses (samples: FamilyCache)."""

    def __init__(self, state: State, dropped_total: float = 0.0, interval: float = 0.0,
                 collectors_enabled: dict[str, bool] | None = None, cap: SubjectCap | None = None):
        self.state = state
        self.cap = cap or SubjectCap(0)  # diagnosis.max_subjects_per_rule, with the subjects it kept last cycle
        self.dropped_total = dropped_total
        self.interval = interval  # seconds between cycles; 0 when unknown
        self.collectors_enabled = collectors_enabled or {}  # every registered collector: whether it runs

    def collect(self) -> Iterator[Metric]:
        """Collector health, the series the cap dropped, and diagnoses, as metric families."""
        yield from self._health()
        dropped = _declared(SERIES_DROPPED_TOTAL)
        dropped.add_sample(SERIES_DROPPED_TOTAL.name, {}, self.dropped_total)
        yield dropped
        skipped = _declared(OUTPUT_VALUES_SKIPPED_TOTAL)
        for output, count in sorted(SKIPPED.items()):
            skipped.add_sample(OUTPUT_VALUES_SKIPPED_TOTAL.name, {"output": output}, float(count))
        yield skipped
        yield from self._diagnoses()

    def _health(self) -> list[Metric]:
        success = _declared(COLLECTOR_SUCCESS)
        duration = _declared(COLLECTOR_DURATION_SECONDS)
        cpu = _declared(COLLECTOR_CPU_SECONDS_TOTAL)
        last = _declared(COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS)
        error = _declared(COLLECTOR_LAST_ERROR_INFO)
        for name, h in sorted(self.state.health.items()):
            success.add_sample(COLLECTOR_SUCCESS.name, {"collector": name}, float(h.success))
            if not h.success and h.error:
                error.add_sample(COLLECTOR_LAST_ERROR_INFO.name, {"collector": name, "reason": h.error[:MAX_REASON]}, 1.0)
            duration.add_sample(COLLECTOR_DURATION_SECONDS.name, {"collector": name}, h.duration)
            if h.cpu_total is not None:
                cpu.add_sample(COLLECTOR_CPU_SECONDS_TOTAL.name, {"collector": name}, h.cpu_total)
            if h.last_success is not None:
                last.add_sample(COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS.name, {"collector": name}, h.last_success)
        cycle = _declared(LAST_CYCLE_TIMESTAMP_SECONDS)
        cycle.add_sample(LAST_CYCLE_TIMESTAMP_SECONDS.name, {}, self.state.time)
        enabled = _declared(COLLECTOR_ENABLED)
        for name, on in sorted(self.collectors_enabled.items()):
            enabled.add_sample(COLLECTOR_ENABLED.name, {"collector": name}, float(on))
        families = [success, duration, cpu, last, error, cycle, enabled]
        if self.interval:
            # The liveness alert's yardstick (kdiag-alerts.yml, KdiagStale): a snapshot older than three is stale.
            every = _declared(CYCLE_INTERVAL_SECONDS)
            every.add_sample(CYCLE_INTERVAL_SECONDS.name, {}, self.interval)
            families.append(every)
        info = _declared(BUILD_INFO)
        info.add_sample(BUILD_INFO.name, {"version": __version__}, 1.0)
        reporting = _declared(CLUSTER_REPORTING)
        reporting.add_sample(CLUSTER_REPORTING.name, {"cluster": self.state.cluster} if self.state.cluster else {},
                             float(self.state.reporting.reporting))
        return [*families, info, reporting]

    def _diagnoses(self) -> list[Metric]:
        active = _declared(DIAGNOSIS_ACTIVE)
        evidence = _declared(DIAGNOSIS_EVIDENCE)
        explains = _declared(DIAGNOSIS_EXPLAINS)
        # A cluster-scope diagnosis is exported by the elected daemon only; the others list it in /api/diagnoses.
        mine = [d for d in self.state.diagnoses if exported(d, self.state.reporting)]
        kept, counts = self.cap.select(mine, self.state.cluster)
        for d in kept:
            labels = diagnosis_labels(d, self.state.cluster)
            active.add_sample(DIAGNOSIS_ACTIVE.name, labels, 1.0 if d.state == "firing" else 0.0)
            which: dict[str, str] = {k: labels[k] for k in ("rule", "subject", "cluster") if k in labels}
            for signal, value in d.evidence.items():
                if isinstance(value, float):
                    evidence.add_sample(DIAGNOSIS_EVIDENCE.name, {**which, "signal": signal}, value)
        # Every firing cause is an inhibition source, kept or not: its symptoms stay muted.
        for d in mine:
            for source in explains_labels(d, self.state.cluster):
                explains.add_sample(DIAGNOSIS_EXPLAINS.name, source, 1.0)
        subjects, omitted = _declared(DIAGNOSIS_SUBJECTS), _declared(DIAGNOSIS_SUBJECTS_OMITTED)
        for c in counts:
            rule = {"rule": c.rule, **({"cluster": self.state.cluster} if c.cluster else {})}
            for state in c.subjects:
                subjects.add_sample(DIAGNOSIS_SUBJECTS.name, {**rule, "state": state}, float(c.subjects[state]))
                omitted.add_sample(DIAGNOSIS_SUBJECTS_OMITTED.name, {**rule, "state": state}, float(c.omitted[state]))
        return [active, evidence, explains, subjects, omitted]


def failing_lines(state: State) -> bytes:
    """One line per failing collector with its reason, for /healthz."""
    return "".join(f"{printable(name)}: {printable(h.error[:MAX_REASON])}\n" for name, h in sorted(state.health.items())
                   if not h.success and h.error).encode()


def render_metrics(state: State, cache: FamilyCache | None = None,
                   dropped_total: float = 0.0, interval: float = 0.0,
                   collectors_enabled: dict[str, bool] | None = None, cap: SubjectCap | None = None) -> bytes:
    """The Prometheus text exposition of a state plus kdiag's own process metrics."""
    cache = cache or FamilyCache()
    samples = cache.render(state.sources or [state.samples], state.cluster)
    own = cache.render_families(StateCollector(state, dropped_total, interval, collectors_enabled, cap).collect())
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return samples + own + generate_latest(registry)


class Published:
    """The bytes served for the latest state, swapped atomically by the collection thread."""

    def __init__(self, stale_after: float = float("inf"), max_kafka_series: int = 100_000, interval: float = 0.0,
                 page_policy: str = "default-src 'none'", collectors_enabled: dict[str, bool] | None = None,
                 top_groups: int = 0, max_subjects: int = 0):
        self.cap = SubjectCap(max_subjects)  # diagnosis.max_subjects_per_rule
        self.collectors_enabled = collectors_enabled or {}  # exported as kdiag_collector_enabled
        self.page_policy = page_policy  # the page's Content-Security-Policy, sent as a header with frame-ancestors
        self.metrics = b"# kdiag: first collection still running\n"
        self._gzipped = (b"", b"")  # (metrics, compressed) of the last gzip scrape
        self.diagnoses = b'{"host": "", "time": 0, "diagnoses": []}'
        self._page = (b'<!DOCTYPE html><title>kdiag</title><p>kdiag: first collection still running; '
                      b'<a href="/metrics">metrics</a> &#183; <a href="/api/diagnoses">diagnoses as JSON</a></p>\n',
                      b'{"time": 0, "updated": "", "main": "<p>first collection still running</p>"}')
        self._draw: Callable[[], tuple[bytes, bytes] | None] | None = None
        self._page_lock = threading.Lock()
        self.failing = b""
        self.ready = False
        # /healthz turns 503 when no cycle completed for this long.
        self.stale_after = stale_after
        self.interval = interval  # exported as kdiag_cycle_interval_seconds
        self.completed = time.monotonic()
        self.max_kafka_series = max_kafka_series
        self.top_groups = top_groups  # kafka.top_groups: consumer group series only for the groups lagging most
        self._top: list[tuple[list[Sample], list[Sample]]] = []  # (source, its top groups' samples), last cycle's
        self.dropped_total = 0.0
        self._families = FamilyCache()

    def metrics_gzip(self) -> bytes:
        """The metrics gzipped, compressed by the first scrape that asks after a publish: Prometheus scrapes every 15 s
        or more and kdiag publishes every cycle (5 s; at 100,000 partitions 4 MB took 25 ms each)."""
        metrics, (source, compressed) = self.metrics, self._gzipped
        if source is not metrics:
            compressed = gzip.compress(metrics, compresslevel=1)
            self._gzipped = (metrics, compressed)
        return compressed

    def retime(self, stale_after: float, interval: float) -> None:
        """A reloaded config's terms: how old a cycle may get before /healthz calls it stale, and the interval."""
        self.stale_after, self.interval = stale_after, interval

    def publish(self, state: State) -> None:
        """Render a new state once (at most max_kafka_series Kafka series); scrapes then serve it as it is."""
        if self.top_groups:
            state = self._top_groups(state)
        kafka = sum(len(members) for groups in self._families.groups(state.sources or [state.samples])
                    for family, members in groups.items() if family.startswith(KAFKA_PREFIX))
        if kafka > self.max_kafka_series:
            samples, dropped = cap_kafka_series([s for source in state.sources or [state.samples] for s in source],
                                                self.max_kafka_series)
            if self.dropped_total == 0:
                log.warning("kafka.max_series: %d Kafka series over the cap of %d are left out of /metrics (kdiag_series_"
                            "dropped_total counts them; the rules still see them)", dropped, self.max_kafka_series)
            self.dropped_total += dropped
            state = dataclasses.replace(state, samples=samples, sources=[samples])
        metrics = render_metrics(state, self._families, self.dropped_total, self.interval,
                                 self.collectors_enabled, self.cap)
        self.metrics = metrics
        self.diagnoses = dumps(state.to_json(), "api").encode()
        self.failing = failing_lines(state)
        self.ready = True
        self.completed = time.monotonic()

    def _top_groups(self, state: State) -> State:
        """The state with consumer group series only for the top_groups groups lagging most; a source carried from
        the last cycle (the same list: Kafka's batch between fetches) is not ranked again."""
        last = {id(s): t for s, t in self._top}  # the sources are alive in self._top: their ids are theirs
        top = [(source, last[id(source)] if id(source) in last else top_groups(source, self.top_groups))
               for source in state.sources or [state.samples]]
        self._top = top
        return dataclasses.replace(state, sources=[t for _, t in top])

    def publish_page(self, draw: Callable[[], tuple[bytes, bytes] | None]) -> None:
        """How to draw the page at `/` and its JSON at `/api/page` for the state just published (None: the last stays)."""
        self._draw = draw

    def page(self) -> tuple[bytes, bytes]:
        """The page and its JSON, drawn by the first request after a publish: at 10,000 lagging groups a drawing costs
        25 ms a cycle, and most cycles nobody looks."""
        with self._page_lock:
            draw, self._draw = self._draw, None
            if draw is not None and (drawn := draw()) is not None:
                self._page = drawn
            return self._page

    def health(self) -> tuple[int, bytes]:
        """/healthz: 200, "ok" and the failing collectors with why while cycles complete; 503 before the first or once stalled."""
        age = time.monotonic() - self.completed
        if age > self.stale_after:
            what = f"the last cycle completed {age:.0f}s ago" if self.ready else f"no cycle completed in {age:.0f}s"
            return 503, f"stale: {what}\n".encode()
        return (200, b"ok\n" + self.failing) if self.ready else (503, b"starting\n")
