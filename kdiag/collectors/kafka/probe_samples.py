"""The synthetic probe's samples as a source: live from a probe running in this process (a drill's), from kafka.json's
`probe` state in a replay, so a recording keeps what the probe's rules read (replica_slow's pair histograms)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kdiag.collectors import Collector
from kdiag.collectors.registry import registered
from kdiag.config.settings import Config
from kdiag.core.archive import StateError, is_number
from kdiag.core.root import Root
from kdiag.core.sample import HISTOGRAM, Sample
from kdiag.families.family import LabelError, declared_family
from kdiag.families.probe import FAMILIES

SOURCE = "probe"
MAX_SAMPLES = 20_000
MAX_LABEL = 64
_OURS = {f.name for f in FAMILIES}


def probe_state(samples: list[Sample]) -> dict[str, Any]:
    """The recorded shape: {"samples": [[name, {label: value}, value], ...]}."""
    return {"samples": [[s.name, dict(s.labels), s.value] for s in samples]}


def samples_of(state: object) -> list[Sample]:
    """The samples of a probe state, each remade through its declared probe family; StateError naming the entry that
    is not one."""
    entries = state.get("samples") if isinstance(state, dict) else None
    if not isinstance(entries, list):
        raise StateError("samples", "expected a list")
    if len(entries) > MAX_SAMPLES:
        raise StateError("samples", f"{len(entries)} entries, at most {MAX_SAMPLES}")
    return [_sample(i, entry) for i, entry in enumerate(entries)]


def read_probe_state(recorded: object, _version: int) -> dict[str, Any]:
    """A recorded probe state, checked (samples_of)."""
    samples_of(recorded)
    assert isinstance(recorded, dict)  # samples_of refused anything else
    return recorded


def _sample(i: int, entry: object) -> Sample:
    key = f"samples[{i}]"
    if not isinstance(entry, list) or len(entry) != 3:
        raise StateError(key, "expected [name, {label: value}, value]")
    name, labels, value = entry
    family = declared_family(name) if isinstance(name, str) else None
    if family is None or family.name not in _OURS:
        raise StateError(key, "not a series of the probe's families")
    if not isinstance(labels, dict) or not all(isinstance(v, str) and len(v) <= MAX_LABEL and v.isprintable()
                                               for v in labels.values()):
        raise StateError(key, f"labels: expected printable texts of at most {MAX_LABEL} characters")
    if not is_number(value) or value < 0:
        raise StateError(key, "value: expected a finite number, not negative")
    try:
        if family.kind == HISTOGRAM:  # declared_family found it by one of its series' suffixes, or by its bare name
            return family.series(name[len(family.name):], value, **labels)
        return family.sample(value, **labels)
    except (LabelError, ValueError) as e:
        raise StateError(key, str(e)) from None


@registered(default=lambda config: False, kafka_source=SOURCE)
class ProbeSamplesCollector(Collector):
    """The probe's series through the root: recorded by a drill's monitor, read back by a replay."""

    name = "probe"
    families = FAMILIES

    def __init__(self, samples: Callable[[], list[Sample]] | None = None):
        self.samples = samples

    @classmethod
    def from_config(cls, config: Config, shared: object) -> ProbeSamplesCollector:
        """A replay's: the samples come from the recording."""
        return cls()

    def collect(self, root: Root) -> list[Sample]:
        """The probe's samples at this step."""
        return samples_of(root.kafka(SOURCE, self._fetch, read_probe_state))

    def _fetch(self) -> dict[str, Any]:
        if self.samples is None:
            raise LookupError("no probe runs in this process: its samples are only in a drill's recording")
        return probe_state(self.samples())
