"""Every subject kind, registered in a fixed order, and the signals of all of them at once."""

from __future__ import annotations

# Host and CPU, then device and process, Kafka and probe, then load generator kinds register on import, in this order.
import kdiag.analysis.device_signals
import kdiag.analysis.broker_signals
import kdiag.analysis.kafka_signals
import kdiag.analysis.loadgen_signals  # noqa: F401
from kdiag.core.history import History
from kdiag.analysis.signals import SUBJECT_KINDS, Signals

# SUBJECT_KINDS is exported from here: importing this module is what fills it.
__all__ = ["SUBJECT_KINDS", "SignalCache", "compute_signals"]


def compute_signals(history: History, window: float) -> dict[str, dict[str, Signals]]:
    """Signals of every subject of every registered kind at the history's latest time."""
    return {kind: sk.compute(history, window) for kind, sk in SUBJECT_KINDS.items()}


class SignalCache:
    """compute_signals, but a kind whose input series did not change keeps its last signals (the same objects).

    Signals are functions of the history's points alone: Kafka's thousands of topics and groups change once per
    fetch (15-60 s), so their kinds are computed once per fetch, not every 5 s cycle.
    """

    def __init__(self) -> None:
        # kind -> (history, window, {name read: its version then}, signals)
        self._held: dict[str, tuple[History, float, dict[str, int | None], dict[str, Signals]]] = {}

    def compute(self, history: History, window: float) -> dict[str, dict[str, Signals]]:
        """Signals of every kind, computed again only for kinds whose input names' versions moved."""
        out = {}
        for kind, sk in SUBJECT_KINDS.items():
            held = self._held.get(kind)
            if held and held[0] is history and held[1] == window and all(
                    history.versions.get(name) == version for name, version in held[2].items()):
                out[kind] = held[3]
                continue
            names = history.read_names()
            try:
                out[kind] = sk.compute(history, window)
            finally:
                history.stop_reading()
            self._held[kind] = (history, window, {name: history.versions.get(name) for name in names}, out[kind])
        return out

    def reads(self) -> dict[str, frozenset[str]]:
        """Per kind, the series names its last computation read (whether or not any series had them)."""
        return {kind: frozenset(held[2]) for kind, held in self._held.items()}
