"""Every subject kind, registered in a fixed order, and the signals of all of them at once."""

from __future__ import annotations

# Host and CPU, then device and process, Kafka and probe, then load generator kinds register on import, in this order.
import kdiag.device_signals
import kdiag.kafka_signals
import kdiag.loadgen_signals  # noqa: F401
from kdiag.history import History
from kdiag.signals import SUBJECT_KINDS, Signals


def compute_signals(history: History, window: float) -> dict[str, dict[str, Signals]]:
    """Signals of every subject of every registered kind at the history's latest time."""
    return {kind: sk.compute(history, window) for kind, sk in SUBJECT_KINDS.items()}
