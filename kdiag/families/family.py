"""A metric family declared once: its name, kind, unit, labels and help; samples are made through it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from kdiag.core.sample import COUNTER, COUNTER32, GAUGE, HISTOGRAM, Sample, SampleKind

_NAME = re.compile(r"kdiag_[a-zA-Z0-9_]+")
_LABEL = re.compile(r"[a-z_][a-z0-9_]*")
# Base units by name suffix, as Prometheus names them; a family without one counts things.
UNITS = ("seconds", "bytes", "ratio", "cores", "celsius", "hertz", "mbps")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
DECLARED: dict[str, Family] = {}


class LabelError(ValueError):
    """A sample made with labels its family does not declare."""


@dataclass(frozen=True)
class Family:
    """One metric family; declaring it registers it, and a name declared twice is refused at import."""

    name: str
    kind: SampleKind
    help: str
    labels: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()  # labels some series carry and others do not
    register: bool = field(default=True, compare=False, repr=False)
    _required: frozenset[str] = field(init=False, compare=False, repr=False)
    _allowed: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"family {self.name!r}: a name is kdiag_ and [a-zA-Z0-9_]")
        if (self.kind in (COUNTER, COUNTER32)) != self.name.endswith("_total"):
            raise ValueError(f"family {self.name!r}: counters, and only counters, end in _total")
        bad = [label for label in (*self.labels, *self.optional) if not _LABEL.fullmatch(label) or label == "le"]
        if bad:
            raise ValueError(f"family {self.name!r}: bad label names {bad}")
        object.__setattr__(self, "_required", frozenset(self.labels))
        object.__setattr__(self, "_allowed", frozenset(self.labels + self.optional))
        if self.register:
            if self.name in DECLARED:
                raise ValueError(f"family {self.name!r} is declared twice")
            DECLARED[self.name] = self

    @property
    def unit(self) -> str:
        """The base unit its name ends in (before _total), or "" for a count."""
        stem = self.name.removesuffix("_total")
        return next((u for u in UNITS if stem.endswith("_" + u)), "")

    def sample(self, value: float, /, **labels: object) -> Sample:
        """One series value of this family; LabelError when the labels are not the declared ones."""
        self._check(labels)
        return Sample(self.name, tuple(sorted((k, str(v)) for k, v in labels.items())), float(value), self.kind)

    def labelled(self, value: float, labels: tuple[tuple[str, str], ...], /) -> Sample:
        """One series value whose labels the caller built: the declared names, sorted, str values. For loops over
        thousands of topics and groups, which build one labels tuple each for all its series (sample() costs 5x)."""
        return Sample(self.name, labels, float(value), self.kind)

    def series(self, suffix: str, value: float, /, **labels: object) -> Sample:
        """One _bucket (with `le`), _sum or _count series of a histogram family."""
        if self.kind != HISTOGRAM or suffix not in HISTOGRAM_SUFFIXES:
            raise ValueError(f"family {self.name!r}: no {suffix} series")
        self._check({k: v for k, v in labels.items() if not (suffix == "_bucket" and k == "le")})
        return Sample(self.name + suffix, tuple(sorted((k, str(v)) for k, v in labels.items())), float(value),
                      HISTOGRAM)

    def _check(self, labels: dict[str, object]) -> None:
        keys = labels.keys()
        if keys != self._required and not (self._required <= keys <= self._allowed):
            raise LabelError(f"family {self.name}: labels {sorted(keys)}, declared {sorted(self._allowed)}")


@dataclass(frozen=True)
class FamilyPattern:
    """Families named after a source's own keys (every /proc/meminfo field): declared by prefix and suffix."""

    prefix: str
    suffix: str
    kind: SampleKind
    help: str  # with {key}

    def family(self, key: str) -> Family:
        """The declared family of this key, or one made (once) for a key only this kernel has."""
        return _pattern_family(self, key)

    def matches(self, name: str) -> bool:
        """Whether a metric name is one of this pattern's."""
        return name.startswith(self.prefix) and name.endswith(self.suffix) and \
            len(name) > len(self.prefix) + len(self.suffix)


@functools.lru_cache(maxsize=4096)
def _pattern_family(p: FamilyPattern, key: str) -> Family:
    name = f"{p.prefix}{key}{p.suffix}"
    return DECLARED.get(name) or Family(name, p.kind, p.help.format(key=key), register=False)


PATTERNS: list[FamilyPattern] = []


def pattern(prefix: str, suffix: str, kind: SampleKind, help_text: str) -> FamilyPattern:
    """Declare a FamilyPattern."""
    p = FamilyPattern(prefix, suffix, kind, help_text)
    PATTERNS.append(p)
    return p


def gauge(name: str, help_text: str, *labels: str, optional: tuple[str, ...] = ()) -> Family:
    """Declare a gauge."""
    return Family(name, GAUGE, help_text, labels, optional)


def counter(name: str, help_text: str, *labels: str, optional: tuple[str, ...] = ()) -> Family:
    """Declare a counter."""
    return Family(name, COUNTER, help_text, labels, optional)


def counter32(name: str, help_text: str, *labels: str) -> Family:
    """Declare a counter the kernel keeps in 32 bits (a decrease near 2**32 is a wrap)."""
    return Family(name, COUNTER32, help_text, labels)


def histogram(name: str, help_text: str, *labels: str) -> Family:
    """Declare a histogram."""
    return Family(name, HISTOGRAM, help_text, labels)


def declared_family(name: str) -> Family | None:
    """The family a sample name belongs to (a histogram's series included), or None when undeclared."""
    if name in DECLARED:
        return DECLARED[name]
    for suffix in HISTOGRAM_SUFFIXES:
        base = DECLARED.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if base is not None and base.kind == HISTOGRAM:
            return base
    found = next((p for p in PATTERNS if p.matches(name)), None)
    return found.family(name[len(found.prefix):len(name) - len(found.suffix)]) if found else None


def keyed(prefix: str, suffix: str, *families: Family) -> dict[str, Family]:
    """Families by the key between prefix and suffix of their names (a source's field name)."""
    return {f.name.removeprefix(prefix).removesuffix(suffix): f for f in families}
