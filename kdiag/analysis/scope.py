"""Cluster scope: the `cluster` label of Kafka series, who reports cluster-scope diagnoses, and their labels."""

from __future__ import annotations

from typing import Any

from kdiag.analysis.engine import Diagnosis
from kdiag.core.sample import Sample
from kdiag.kafka.coordination import Reporting
from kdiag.kafka.coordination_records import Member
from kdiag.families.kafka import KAFKA_CLUSTER_INFO

# Series about the cluster or its brokers (AdminClient, broker JMX with its JVM, the probe): they carry `cluster`.
KAFKA_PREFIXES = ("kdiag_kafka_", "kdiag_consumer_", "kdiag_jvm_", "kdiag_probe_", "kdiag_coordination_")
CLUSTER_INFO = KAFKA_CLUSTER_INFO


def cluster_of(samples: list[Sample], configured: str, last: str) -> str:
    """The cluster label: kafka.cluster_name, else the id describe_cluster reported, else the last one known."""
    if configured:
        return configured
    for s in samples:
        if s.name == CLUSTER_INFO.name:
            return dict(s.labels).get("cluster_id") or last
    return last


def with_cluster(samples: list[Sample], cluster: str) -> list[Sample]:
    """Samples with `cluster` added to every Kafka series (unchanged while the cluster is unknown)."""
    if not cluster:
        return samples
    pair = ("cluster", cluster)
    return [s._replace(labels=tuple(sorted((*s.labels, pair)))) if s.name.startswith(KAFKA_PREFIXES) else s
            for s in samples]


def is_kafka(d: Diagnosis) -> bool:
    """Whether a diagnosis is about Kafka (a cluster fact, a broker, a probe verdict) rather than only this host."""
    return d.rule.scope == "cluster" or d.rule.each in ("broker", "probe")


def exported(d: Diagnosis, reporting: Reporting) -> bool:
    """Whether this daemon exports the diagnosis: host scope always, cluster scope only while it is the reporter."""
    return d.rule.scope == "host" or reporting.reporting


def single_broker(d: Diagnosis) -> str | None:
    """The one broker a diagnosis concerns, None when it concerns several or none."""
    return next(iter(d.brokers)) if d.brokers and len(d.brokers) == 1 else None


def diagnosis_labels(d: Diagnosis, cluster: str) -> dict[str, str]:
    """kdiag_diagnosis_active's labels: rule, subject, kind, severity, scope, and cluster and broker when known."""
    labels = {"rule": d.rule.id, "subject": d.subject, "kind": d.rule.kind, "severity": d.rule.severity,
              "scope": d.rule.scope}
    if cluster and (is_kafka(d) or d.brokers):
        labels["cluster"] = cluster
    if (broker := single_broker(d)) is not None:
        labels["broker"] = broker
    return labels


def diagnosis_json(d: Diagnosis, cluster: str, reporting: Reporting, me: Member | None) -> dict[str, Any]:
    """The contract JSON of a diagnosis plus scope, cluster and, for cluster scope, the daemon that reports it."""
    out = {**d.to_json(), "scope": d.rule.scope}
    if cluster and is_kafka(d):
        out["cluster"] = cluster
    if d.rule.scope == "cluster":
        who = me if reporting.reporting else reporting.reporter
        out["reported_by"] = who.to_json() if who else None
    return out


def explains_labels(d: Diagnosis, cluster: str) -> list[dict[str, str]]:
    """Labels of the kdiag_diagnosis_explains series (inhibition sources) of a firing cause: one per broker it
    concerns, or one without `broker` when it concerns none; none for other diagnoses."""
    if d.rule.kind != "cause" or not d.rule.explains or d.state != "firing":
        return []
    common = {k: v for k, v in diagnosis_labels(d, cluster).items() if k not in ("broker", "kind", "severity")}
    return [{**common, **({"broker": b} if b else {})} for b in sorted(d.brokers or [""], key=lambda b: (len(b), b))]
