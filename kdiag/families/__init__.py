"""Every metric family kdiag exports, declared once: collectors emit through them, signals read through them, and
the exposition's HELP and TYPE and docs/METRICS.md come from them. Importing the package declares them all."""

from kdiag.families import host, kafka, network, own, probe, process, storage
from kdiag.families.family import DECLARED, PATTERNS, Family, FamilyPattern, LabelError, declared_family

__all__ = ["DECLARED", "PATTERNS", "Family", "FamilyPattern", "LabelError", "declared_family", "host", "kafka",
           "network", "own", "probe", "process", "storage"]
