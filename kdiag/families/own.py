"""kdiag's own families: collector health, cycles, diagnoses, exposition bookkeeping and fleet coordination."""

from __future__ import annotations

from kdiag.families.family import counter, gauge

SCHEDULE_NOTE = "collected on kdiag's own schedule; a scrape serves the last snapshot and never reads /proc, Kafka or JMX"

# collector health
COLLECTOR_SUCCESS = gauge("kdiag_collector_success", f"1 when the collector's last run succeeded; {SCHEDULE_NOTE}",
                          "collector")
COLLECTOR_DURATION_SECONDS = gauge("kdiag_collector_duration_seconds",
                                   f"how long the collector's last run took; {SCHEDULE_NOTE}", "collector")
COLLECTOR_CPU_SECONDS_TOTAL = counter(
    "kdiag_collector_cpu_seconds_total", "CPU the collector's completed runs cost since kdiag started: the thread that "
    "ran them and the child process it keeps (the AdminClient's, JmxTool's), for what kdiag itself costs per source (not "
    "kept for the coordination and probe services)",
    "collector")
COLLECTOR_LAST_SUCCESS_TIMESTAMP_SECONDS = gauge("kdiag_collector_last_success_timestamp_seconds",
                                                 f"when the collector last succeeded; {SCHEDULE_NOTE}", "collector")
COLLECTOR_LAST_ERROR_INFO = gauge("kdiag_collector_last_error_info",
                                  "why the collector is failing now (always 1; absent while it works)", "collector", "reason")
COLLECTOR_ENABLED = gauge("kdiag_collector_enabled", "1 when the collector runs, 0 when switched off (`collectors:`, "
                          "--no-collector) or not configured (Kafka without its settings)", "collector")
COLLECTOR_SKIPPED_ENTRIES = gauge(
    "kdiag_collector_skipped_entries", "Entries (an interface, a block device) the collector's last run left out because "
    "reading them failed (gone meanwhile, or an attribute the driver refuses), by errno name.", "collector", "reason")

# cycles
LAST_CYCLE_TIMESTAMP_SECONDS = gauge("kdiag_last_cycle_timestamp_seconds",
                                     "time of the snapshot being served; it stops advancing when cycles stall")
CYCLE_INTERVAL_SECONDS = gauge("kdiag_cycle_interval_seconds", "seconds between kdiag's cycles (`interval`)")
BUILD_INFO = gauge("kdiag_build_info", "kdiag version", "version")

# diagnoses
DIAGNOSIS_ACTIVE = gauge("kdiag_diagnosis_active",
                         "1 while a rule fires for a subject, 0 while pending (condition true, `for` not yet met)",
                         "rule", "subject", "kind", "severity", "scope", optional=("broker", "cluster"))
DIAGNOSIS_EVIDENCE = gauge("kdiag_diagnosis_evidence", "the signal values behind an active diagnosis",
                           "rule", "subject", "signal", optional=("cluster",))
DIAGNOSIS_SUBJECTS = gauge("kdiag_diagnosis_subjects", "subjects a rule holds for now, by state (firing, pending), "
                           "whether or not /metrics carries their kdiag_diagnosis_active (diagnosis.max_subjects_per_rule)",
                           "rule", "state", optional=("cluster",))
DIAGNOSIS_SUBJECTS_OMITTED = gauge(
    "kdiag_diagnosis_subjects_omitted", "subjects of a rule, by state, whose kdiag_diagnosis_active and "
    "kdiag_diagnosis_evidence series diagnosis.max_subjects_per_rule left out of /metrics: the least bad "
    "ones (pending before firing, then by the rule's rank_by; /api/diagnoses lists every one)", "rule", "state", optional=("cluster",))
DIAGNOSIS_EXPLAINS = gauge("kdiag_diagnosis_explains", "1 per broker a firing cause concerns (one series without "
                           "`broker` when it concerns no broker): the source of the generated Alertmanager inhibitions",
                           "rule", "subject", optional=("broker", "cluster"))

# exposition
SERIES_DROPPED_TOTAL = counter("kdiag_series_dropped_total", "Kafka series left out of /metrics by kafka.max_series, "
                               "summed over every rendered cycle (rules still see them).")
OUTPUT_VALUES_SKIPPED_TOTAL = counter("kdiag_output_values_skipped_total", "values left out of an output because no "
                                      "calendar or JSON can show them (a time outside years 1-9999, NaN), by output",
                                      "output")
RENDER_ERRORS_TOTAL = counter("kdiag_render_errors_total", "cycles in which a metric family could not be rendered and "
                              "was left out of /metrics (logged)", "family")

# fleet coordination
CLUSTER_REPORTING = gauge("kdiag_cluster_reporting", "1 while this daemon exports the cluster's cluster-scope diagnoses "
                          "(elected, kafka.cluster_scope), 0 while another daemon does", optional=("cluster",))
COORDINATION_FOREIGN_MEMBERS = gauge(
    "kdiag_coordination_foreign_members", "Members of kdiag's coordination group without a valid kdiag membership "
    "(with kafka.coordination_key_file: no valid MAC) at the last look")
COORDINATION_RECORDS_REFUSED_TOTAL = counter("kdiag_coordination_records_refused_total",
                                             "Records of kdiag's coordination state topic refused, by reason", "reason")
COORDINATION_AUTHENTICATED = gauge("kdiag_coordination_authenticated",
                                   "1 when this daemon signs and checks its fleet's coordination with a key")
