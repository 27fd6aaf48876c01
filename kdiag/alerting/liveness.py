"""kdiag's own alerts, beside the catalog's: a dead or frozen daemon, a cluster nobody reports, a foreign member in
the coordination group; with their promtool unit tests."""

from __future__ import annotations

from typing import Any

KDIAG_JOBS = 'job=~"kdiag.*"'
LIVENESS_FOR = "1m"  # one failed scrape or one slow cycle is not yet an outage
# Every daemon reports after two election intervals (20 s) without a valid reporter: longer than this is no handover.
NO_REPORTER_FOR = "2m"
LIVENESS_ALERTS: list[dict[str, Any]] = [{
    "alert": "KdiagDown",
    "expr": f"up{{{KDIAG_JOBS}}} == 0",
    "for": LIVENESS_FOR,
    "labels": {"severity": "critical", "kdiag_class": "liveness"},
    "annotations": {
        "summary": "kdiag on {{ $labels.instance }} is down: Prometheus cannot scrape it",
        "remediation": "Check the kdiag service on that host (systemctl status kdiag, its journal): while it is down, "
                       "nothing diagnoses that host or its broker."}}, {
    "alert": "KdiagStale",
    # Measured at the scrape (timestamp()): the evaluation's own lag behind the last scrape is not kdiag's.
    "expr": "timestamp(kdiag_last_cycle_timestamp_seconds) - kdiag_last_cycle_timestamp_seconds"
            " > 3 * kdiag_cycle_interval_seconds",
    "for": LIVENESS_FOR,
    "labels": {"severity": "critical", "kdiag_class": "liveness"},
    "annotations": {
        "summary": "kdiag on {{ $labels.instance }} serves a snapshot {{ printf \"%.0f\" $value }}s old: its cycles stopped",
        "remediation": "kdiag answers but no longer completes cycles (/healthz says stale): read its log for what hangs, "
                       "then restart it."}}, {
    "alert": "KdiagNoReporter",
    "expr": f"max by (cluster) (kdiag_cluster_reporting{{{KDIAG_JOBS}}}) == 0",
    "for": NO_REPORTER_FOR,
    "labels": {"severity": "critical", "kdiag_class": "liveness"},
    "annotations": {
        "summary": "no kdiag daemon of cluster {{ $labels.cluster }} reports its cluster-scope diagnoses",
        "remediation": "Every daemon that can read the cluster reports when no valid reporter speaks, so none can: read "
                       "their logs (kdiag.kafka.coordination) and /api/diagnoses `coordination.why`; check that they "
                       "reach the brokers and that their principal has the ACLs of docs/ACLS.md."}}, {
    "alert": "KdiagForeignCoordinationMember",
    "expr": f"max by (cluster) (kdiag_coordination_foreign_members{{{KDIAG_JOBS}}}) > 0",
    "for": LIVENESS_FOR,
    "labels": {"severity": "warning", "kdiag_class": "liveness"},
    "annotations": {
        "summary": "{{ $value }} foreign member(s) in kdiag's coordination group of cluster {{ $labels.cluster }}",
        "remediation": "A client that is no kdiag daemon of this fleet joined the group (kafka-consumer-groups "
                       "--describe --members --group kdiag-coordination names its client id and host). While it "
                       "holds the group's partition every daemon reports. Keep other principals off kdiag's group "
                       "and topics (docs/ACLS.md) and sign the fleet (kafka.coordination_key_file)."}}]


def liveness_tests(instance: str, peer: str, cluster: str) -> list[dict[str, Any]]:
    """promtool tests: a dead daemon (up 0) and a frozen one (its snapshot stops at 2m; cycles every 15 s) page after
    LIVENESS_FOR, a live one and one whose 60 s old snapshot is within three of its 30 s cycles do not; a cluster
    none of whose daemons reports pages, one where two report (a fallback) does not; a foreign member warns."""
    def alert(name: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
        rule = next(a for a in LIVENESS_ALERTS if a["alert"] == name)
        return {"exp_labels": {**labels, **rule["labels"]},
                "exp_annotations": {"summary": summary, "remediation": rule["annotations"]["remediation"]}}

    def on(at: str, **labels: str) -> str:
        return "{" + ",".join(f'{k}="{v}"' for k, v in {"instance": at, "job": "kdiag", **labels}.items()) + "}"

    daemon = {"instance": instance, "job": "kdiag"}
    slow, other = "broker-3:9745", f"{cluster}-other"
    return [{
        "name": "KdiagDown pages for a target Prometheus cannot scrape",
        "interval": "1m",
        "input_series": [{"series": f"up{on(instance)}", "values": "1 0 0 0"},
                         {"series": f"up{on(peer)}", "values": "1 1 1 1"}],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "KdiagDown", "exp_alerts": []},
            {"eval_time": "3m", "alertname": "KdiagDown", "exp_alerts": [
                alert("KdiagDown", daemon, f"kdiag on {instance} is down: Prometheus cannot scrape it")]}]}, {
        "name": "KdiagStale pages for a snapshot older than three of the daemon's cycles",
        "interval": "1m",
        "input_series": [
            {"series": f"kdiag_last_cycle_timestamp_seconds{on(instance)}", "values": "0 60 120 120 120 120"},
            {"series": f"kdiag_cycle_interval_seconds{on(instance)}", "values": "15x5"},
            {"series": f"kdiag_last_cycle_timestamp_seconds{on(peer)}", "values": "0+60x5"},
            {"series": f"kdiag_cycle_interval_seconds{on(peer)}", "values": "15x5"},
            {"series": f"kdiag_last_cycle_timestamp_seconds{on(slow)}", "values": "-60+60x5"},
            {"series": f"kdiag_cycle_interval_seconds{on(slow)}", "values": "30x5"}],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "KdiagStale", "exp_alerts": []},
            {"eval_time": "5m", "alertname": "KdiagStale", "exp_alerts": [
                alert("KdiagStale", daemon, f"kdiag on {instance} serves a snapshot 180s old: its cycles stopped")]}]}, {
        "name": "KdiagNoReporter pages for a cluster none of whose daemons reports, not for one where two do",
        "interval": "1m",
        "input_series": [
            {"series": f"kdiag_cluster_reporting{on(instance, cluster=cluster)}", "values": "1 0 0 0 0 0"},
            {"series": f"kdiag_cluster_reporting{on(peer, cluster=cluster)}", "values": "0 0 0 0 0 0"},
            {"series": f"kdiag_cluster_reporting{on(instance, cluster=other)}", "values": "1 1 1 1 1 1"},
            {"series": f"kdiag_cluster_reporting{on(peer, cluster=other)}", "values": "1 1 1 1 1 1"}],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "KdiagNoReporter", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "KdiagNoReporter", "exp_alerts": [
                alert("KdiagNoReporter", {"cluster": cluster},
                      f"no kdiag daemon of cluster {cluster} reports its cluster-scope diagnoses")]}]}, {
        "name": "KdiagForeignCoordinationMember warns for a foreign member in the coordination group",
        "interval": "1m",
        "input_series": [
            {"series": f"kdiag_coordination_foreign_members{on(instance, cluster=cluster)}", "values": "0 3 3 3"},
            {"series": f"kdiag_coordination_foreign_members{on(peer, cluster=cluster)}", "values": "0 0 3 3"},
            {"series": f"kdiag_coordination_foreign_members{on(instance, cluster=other)}", "values": "0 0 0 0"}],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "KdiagForeignCoordinationMember", "exp_alerts": []},
            {"eval_time": "3m", "alertname": "KdiagForeignCoordinationMember", "exp_alerts": [
                alert("KdiagForeignCoordinationMember", {"cluster": cluster},
                      f"3 foreign member(s) in kdiag's coordination group of cluster {cluster}")]}]}]
