"""The composition root: one config (and maybe a recording) wired into the services a Daemon runs."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, replace

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.analysis.catalog import Rule
from kdiag.analysis.statefile import StateFile, state_path
from kdiag.app.background import Background
from kdiag.collectors import Collector
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.app.wiring import host_collectors, kafka_collectors, kafka_deadline, load_rules, replay_collectors
from kdiag.collectors.registry import discover
from kdiag.config.settings import Config
from kdiag.core.root import Root
from kdiag.kafka.coordination_process import CoordinatorProcess
from kdiag.kafka.coordination_records import Member
from kdiag.kafka.jars import kafka_version
from kdiag.probe.process import ProbeProcess
from kdiag.recording.recording import Recording
from kdiag.report.page import POLICY, LivePage
from kdiag.runtime.handover import Handover
from kdiag.runtime.pipeline import CollectorSet, Pipeline
from kdiag.serve.exporter import Published
from kdiag.serve.webserver import Exporter


@dataclass(frozen=True)
class Services:
    """Everything `kdiag run` runs, built and connected, none started; a reload swaps them whole (rebuild)."""

    config: Config
    recording: Recording | None
    rules: list[Rule]
    root: Root  # the live root, also the clock of the services' health
    collectors: CollectorSet  # each cycle's, on the cycle's thread
    background: list[Background]  # the Kafka collectors, each on its own schedule
    pipeline: Pipeline
    state_file: StateFile | None
    published: Published
    exporter: Exporter
    probe: ProbeProcess | None  # the probe's and the election's librdkafka clients live in child processes
    coordinator: CoordinatorProcess | None
    pusher: AlertPusher | None
    page: LivePage  # the page at /, with the evidence over the history window
    handover: Handover | None = None  # cluster scope shared through the election's state topic


def build(config: Config, recording: Recording | None = None) -> Services:
    """Wire collectors, pipeline, state file, exporter, background jobs, probe, coordinator and pusher for config."""
    rules = load_rules(config)
    root = Root(config.procfs, config.sysfs)
    collectors = CollectorSet(replay_collectors(config, recording) if recording else host_collectors(config))
    background: list[Background] = []
    live: dict[str, Collector] = {}
    jobs: dict[str, Background] = {}
    if not recording:
        # Kafka answers slower than /proc: its collectors run on their own schedule, merged each cycle. JmxTool
        # polls every kafka.jmx_interval by itself; its job looks each cycle whether a row came (ready()).
        every = {"admin": config.kafka.interval, "jmx": config.interval}
        live = kafka_collectors(config)
        for source, collector in live.items():
            jobs[source] = Background([collector], root, every[source], kafka_deadline(config), adaptive=source == "admin",
                                      trims=source == "admin")
        background += jobs.values()
    host = recording.host if recording else socket.gethostname()
    kafka = config.kafka
    pipeline = Pipeline(collectors, rules, host, config.history, config.signal_window, kafka.cluster_name,
                        kafka.local_broker_id, config.collector_timeout)
    path = state_path(config.state_dir, replay=recording is not None)
    state_file = StateFile(path, host) if path else None
    if state_file:
        pipeline.restore(state_file.load(rules, time.time()))
    live_kafka = bool(kafka.bootstrap_servers) and not recording
    probe = (ProbeProcess(kafka.bootstrap_servers, config.probe, host, kafka.client_settings)
             if live_kafka and config.probe.enabled else None)
    coordinator = (CoordinatorProcess(kafka.bootstrap_servers, kafka.client_settings, Member(host, kafka.local_broker_id),
                                      kafka.coordination_topic, kafka.coordination_group, kafka.cluster_scope,
                                      kafka.timeout, kafka.coordination_key,
                                      frozenset(r.id for r in rules if r.scope == "cluster")) if live_kafka else None)
    am = config.alertmanager
    handover = None
    if coordinator and coordinator.worker:
        admin = live.get("admin")
        handover = Handover(host, admin if isinstance(admin, KafkaAdminCollector) else None,
                            jobs["admin"].slow_down if "admin" in jobs else None)
    pusher = (AlertPusher(am.url, host, am.resend_interval, am.timeout, basic_auth=am.basic_auth,
                          authorization=am.authorization, tls_config=am.tls_config,
                          max_subjects=config.diagnosis.max_subjects_per_rule) if am.url else None)
    interval = recording.interval if recording else config.interval
    running = {c.name for c in [*collectors.collectors, *live.values()]}
    enabled = {name: name in running for name in sorted(discover())}
    published = Published(stale_after(config, interval), kafka.max_series, interval, page_policy=POLICY,
                          collectors_enabled=enabled, top_groups=kafka.top_groups,
                          max_subjects=config.diagnosis.max_subjects_per_rule)
    page = LivePage(config.history, kafka_version(kafka.jmx_classpath), off=[n for n, on in enabled.items() if not on],
                    max_subjects=config.diagnosis.max_subjects_per_rule)
    return Services(config, recording, rules, root, collectors, background, pipeline, state_file, published,
                    Exporter(config.listen, published, config.web_config), probe, coordinator, pusher, page, handover)


def rebuild(config: Config, rules: list[Rule], running: Services) -> Services:
    """The services for a re-read config and its loaded catalog: a pipeline with its signal window and collector
    deadline over the running collectors and their history, Kafka clients, probe and web server, none restarted (the
    Kafka jobs and /healthz take the new deadlines); what else changed takes effect at the next restart."""
    for background in running.background:
        background.retime(kafka_deadline(config))
    interval = running.recording.interval if running.recording else config.interval
    running.published.retime(stale_after(config, interval), interval)
    return replace(running, config=config, rules=rules,
                   pipeline=running.pipeline.reloaded(rules, config.signal_window, config.collector_timeout))


def stale_after(config: Config, interval: float) -> float:
    """How old the last published cycle may get before /healthz calls it stale."""
    return 3 * interval + config.collector_timeout
