"""kdiag as a client of a secured Kafka: the sasl_ssl lab served at success 1, never a secret shown, and every refused
credential or certificate named with what to fix while the rest of kdiag goes on."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from kdiag.kafka.jmx_auth import JmxAuth
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.kafka.admin import KafkaAdminError
from kdiag.collectors.kafka.jmx import KafkaJmxCollector
from tests.promstack import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka


def lab_kafka(secure_lab: dict) -> dict:
    """The kafka section of the lab's kdiag.yaml."""
    return yaml.safe_load(Path(secure_lab["config"]).read_text())["kafka"]


def lab_secrets(secure_lab: dict) -> list[str]:
    """Every secret the lab's config points at: SASL, JMX and truststore passwords."""
    kafka = lab_kafka(secure_lab)
    files = [kafka["client"]["sasl.password_file"], kafka["jmx_password_file"], kafka["jmx_truststore_password_file"]]
    return [Path(f).read_text().strip() for f in files]


def kdiag(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdiag", *argv], capture_output=True, text=True, timeout=timeout)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


@contextlib.contextmanager
def daemon(config: Path, log: Path) -> Iterator[str]:
    """`kdiag run --config` on a free port, its output in log; stopped with SIGTERM."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kdiag", "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def success(metrics: str, collector: str) -> float | None:
    m = re.search(rf'^kdiag_collector_success{{collector="{collector}"}} (\S+)$', metrics, re.M)
    return float(m.group(1)) if m else None


def error_info(metrics: str, collector: str) -> str:
    m = re.search(rf'^kdiag_collector_last_error_info{{collector="{collector}",reason="(.*)"}} 1\.0$', metrics, re.M)
    return m.group(1).replace('\\"', '"') if m else ""


def cmdline(path: Path) -> str:
    """A process's command line, '' when it ended meanwhile."""
    with contextlib.suppress(OSError):
        return path.read_bytes().decode(errors="replace")
    return ""


def test_daemon_on_sasl_ssl_serves_and_never_shows_the_password(secure_lab, tmp_path):
    log = tmp_path / "kdiag.log"
    with daemon(Path(secure_lab["config"]), log) as url:
        metrics = wait_until(lambda: (body := get(f"{url}/metrics")) and all(
            success(body, c) == 1.0 for c in ("kafka_admin", "kafka_jmx", "probe")) and body, 180,
            "kafka_admin, kafka_jmx and probe at success 1 on the sasl_ssl lab", [log])
        assert re.search(r'^kdiag_kafka_jmx_up\{[^}]*endpoint="', metrics, re.M)  # with its cluster label
        served = metrics + get(f"{url}/api/diagnoses") + get(f"{url}/healthz")
        # /proc/PID/cmdline is world-readable: no process (the JmxTool JVM included) may carry a secret there.
        cmdlines = "".join(map(cmdline, Path("/proc").glob("[0-9]*/cmdline")))
    recording = tmp_path / "rec"
    recorded = kdiag("record", "--config", secure_lab["config"], "-o", str(recording), "--duration", "6s", "--interval", "3s")
    assert recorded.returncode == 0, recorded.stderr
    kafka_json = [p for p in recording.rglob("kafka.json")]
    assert kafka_json and '"admin"' in kafka_json[-1].read_text()
    reports = [kdiag("diagnose", "--from", str(recording), *fmt) for fmt in ((), ("--format", "json"))]
    reports.append(kdiag("diagnose", "--config", secure_lab["config"], "--duration", "4s", "--step", "2s"))
    assert all(r.returncode == 0 for r in reports), [r.stderr for r in reports]
    texts = {"log": log.read_text(), "served": served, "reports": "".join(r.stdout + r.stderr for r in reports),
             "record": recorded.stdout + recorded.stderr, "cmdlines": cmdlines}
    # Only what kdiag wrote: fd/ and cwd links point at other processes' files (a broker's log segments).
    texts.update({str(p): p.read_text(errors="replace") for p in recording.rglob("*") if p.is_file() and not p.is_symlink()})
    for secret in lab_secrets(secure_lab):
        assert len(secret) >= 8
        assert [name for name, text in texts.items() if secret in text] == []
    # The broker itself refuses a plaintext client on the same address.
    with pytest.raises(Exception, match=r"Failed to get metadata|Broker transport failure"):
        AdminClient({"bootstrap.servers": secure_lab["bootstrap"], "log_level": 0}).list_topics(timeout=5)


def test_bench_produce_and_consume_with_the_lab_config(secure_lab):
    topic = f"kdiag-client-bench-{os.getpid()}"
    produced = kdiag("bench", "produce", "--config", secure_lab["config"], "--topic", topic, "--num-records", "2000",
                     "--record-size", "100", "--throughput", "-1", "--no-stats")
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.startswith("2000 records sent")
    consumed = kdiag("bench", "consume", "--config", secure_lab["config"], "--topic", topic, "--messages", "2000",
                     "--timeout", "30000")
    assert consumed.returncode == 0, consumed.stderr
    assert ", 2000, " in consumed.stdout.splitlines()[-1]
    AdminClient(secure_lab["client"]).delete_topics([topic])


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def other_ca(tmp_path: Path) -> Path:
    """A CA that signed nothing the lab serves."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp_path / "other.key",
            "-out", tmp_path / "other.crt", "-days", "2", "-subj", "/CN=kdiag-test-other-ca")
    return tmp_path / "other.crt"


def bad_configs(secure_lab: dict, tmp_path: Path) -> dict[str, tuple[Path, str, str]]:
    """name -> (config, collector, what its reason must say) for each refused credential, certificate or protocol."""
    kafka = lab_kafka(secure_lab)
    client = kafka["client"]
    (tmp_path / "wrong.pw").write_text("not-the-password\n")
    no_sasl = {k: v for k, v in client.items() if not k.startswith("sasl.")}
    check_protocol = "check kafka.client.security.protocol"
    clients = {
        "wrong SASL password": ({**client, "sasl.password_file": str(tmp_path / "wrong.pw")}, "kafka_admin",
                                "SASL authentication failed for user kdiag: check kafka.client.sasl.password_file and "
                                "kafka.client.sasl.mechanism"),
        "untrusted CA": ({**client, "ssl.ca.location": str(other_ca(tmp_path))}, "kafka_admin",
                         "the broker's certificate is not trusted ("),
        "plaintext client at the TLS listener": ({}, "kafka_admin",
                                                 f"(a TLS listener?): {check_protocol} (PLAINTEXT)"),
        "SASL_PLAINTEXT client at the SASL_SSL listener": (
            {**{k: v for k, v in client.items() if not k.startswith("ssl.")}, "security.protocol": "SASL_PLAINTEXT"},
            "kafka_admin", f"(a TLS listener?): {check_protocol} (SASL_PLAINTEXT)"),
        # Whether the broker hangs up before or after librdkafka's first request depends on timing: the common part.
        "TLS client without SASL at the SASL_SSL listener": ({**no_sasl, "security.protocol": "SSL"}, "kafka_admin",
                                                             "the broker closed the connection"),
        "SASL mechanism the listener lacks": ({**client, "sasl.mechanism": "PLAIN"}, "kafka_admin",
                                              "SASL mechanism PLAIN is not enabled on the listener: "
                                              "check kafka.client.sasl.mechanism"),
        "wrong JMX password": (client, "kafka_jmx", "JMX authentication failed (invalid username or password): "
                                                    "check kafka.jmx_username and kafka.jmx_password_file"),
    }
    out = {}
    for i, (name, (client_conf, collector, reason)) in enumerate(clients.items()):
        config = {"interval": "2s", "kafka": {"bootstrap_servers": kafka["bootstrap_servers"], "client": client_conf,
                                               "interval": "3s", "timeout": "3s"}}
        if collector == "kafka_jmx":
            # The default timeout: JmxTool's JVM must start and be refused within it on a loaded machine.
            config["kafka"].update({k: v for k, v in kafka.items() if k.startswith("jmx")} | {
                "jmx_password_file": str(tmp_path / "wrong.pw"), "jmx_interval": "3s", "timeout": "10s"})
        path = tmp_path / f"case{i}.yaml"
        path.write_text(yaml.safe_dump(config))
        out[name] = (path, collector, reason)
    return out


def test_bad_credentials_fail_only_the_kafka_collectors_with_the_reason(secure_lab, tmp_path):
    cases = bad_configs(secure_lab, tmp_path)
    with contextlib.ExitStack() as stack:
        # One daemon per case, all at once: each waits out the same few client timeouts.
        urls = {name: stack.enter_context(daemon(path, tmp_path / f"{path.stem}.log")) for name, (path, _, _) in cases.items()}
        for name, url in urls.items():
            path, collector, reason = cases[name]
            log = tmp_path / f"{path.stem}.log"
            failing = [collector] if collector == "kafka_jmx" else [collector, "probe"]
            metrics = wait_until(lambda url=url, failing=failing, reason=reason: (body := get(f"{url}/metrics")) and all(
                success(body, c) == 0.0 and reason in error_info(body, c) for c in failing) and body, 120,
                f"{name}: {failing} at 0 with the reason", [log])
            assert success(metrics, "stat") == 1.0 and success(metrics, "meminfo") == 1.0, name
            if collector == "kafka_jmx":
                # Nothing else stops: the AdminClient and the probe still work with the right client settings.
                wait_until(lambda url=url: all(success(get(f"{url}/metrics"), c) == 1.0 for c in ("kafka_admin", "probe")),
                           120, f"{name}: kafka_admin and probe at 1", [log])
            assert reason in get(f"{url}/healthz"), name
            cases[name] = (path, collector, reason)
    for name, (path, collector, reason) in cases.items():
        text = (tmp_path / f"{path.stem}.log").read_text()
        assert reason in text, name
        assert text.count(f"collector {collector} failed") == 1, f"{name}: one log line per failure streak\n{text}"
        assert "not-the-password" not in text and "Traceback" not in text, name


@pytest.fixture
def lab_ca_signed(secure_lab, tmp_path) -> Iterator[dict[str, str]]:
    """openssl s_server listeners whose certificates the lab CA signed: one expired, one for another host."""
    secrets = Path(lab_kafka(secure_lab)["client"]["ssl.ca.location"]).parent
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp_path / "s.key",
            "-out", tmp_path / "s.csr", "-subj", "/CN=kdiag-test")
    servers, addresses = [], {}
    for name, days, san in (("expired", "-1", "IP:127.0.0.1,DNS:localhost"), ("wrong host", "2", "DNS:kafka.example.com")):
        (tmp_path / "san").write_text(f"subjectAltName={san}\n")
        crt = tmp_path / f"{name.replace(' ', '_')}.crt"
        openssl("x509", "-req", "-in", tmp_path / "s.csr", "-CA", secrets / "ca.crt", "-CAkey", secrets / "ca.key",
                "-CAcreateserial", "-CAserial", tmp_path / "ca.srl", "-out", crt, "-days", days, "-extfile", tmp_path / "san")
        port = free_port()
        servers.append(subprocess.Popen(["openssl", "s_server", "-quiet", "-accept", str(port), "-cert", str(crt),
                                         "-key", str(tmp_path / "s.key")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        addresses[name] = f"127.0.0.1:{port}"
    try:
        yield addresses
    finally:
        for s in servers:
            s.kill()
            s.wait()


def test_expired_and_wrong_host_certificates_are_named(secure_lab, lab_ca_signed):
    from kdiag.kafka.client import ClientSettings

    settings = ClientSettings.resolve(lab_kafka(secure_lab)["client"])
    expected = {"expired": "the broker's certificate has expired: renew it",
                "wrong host": "the broker's certificate does not name 127.0.0.1: fix the certificate (subjectAltName) or set "
                              "kafka.client.ssl.endpoint.identification.algorithm: none"}
    for name, address in lab_ca_signed.items():
        collector = KafkaAdminCollector(address, 3.0, settings=settings)
        with pytest.raises(KafkaAdminError) as e:
            collector.fetch()
        assert str(e.value) == f"Kafka at {address}: TLS handshake with {address} failed: {expected[name]}"


def test_jmx_tls_mistakes_are_named(secure_lab, tmp_path):
    kafka = lab_kafka(secure_lab)
    right = JmxAuth.from_config(SimpleNamespace(**kafka))
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "other", "-file", str(other_ca(tmp_path)), "-keystore",
                    str(tmp_path / "other.p12"), "-storetype", "PKCS12", "-storepass:file", kafka["jmx_truststore_password_file"]],
                   check=True, capture_output=True)
    cases = {
        "plain client": (JmxAuth(right.username, right.password_file), "the JMX endpoint speaks TLS: set kafka.jmx_ssl: true"),
        "untrusted": (JmxAuth(right.username, right.password_file, True, str(tmp_path / "other.p12"),
                              right.truststore_password_file),
                      "the JMX endpoint's TLS certificate is not trusted: kafka.jmx_truststore must hold the CA that signed it"),
        "no password": (JmxAuth(ssl=True, truststore=right.truststore, truststore_password_file=right.truststore_password_file),
                        "the JMX endpoint requires a password: set kafka.jmx_username and kafka.jmx_password_file"),
    }
    for name, (auth, reason) in cases.items():
        collector = KafkaJmxCollector(kafka["jmx"], timeout=30.0, poll_interval=2.0, classpath=kafka["jmx_classpath"], auth=auth)
        try:
            state = collector.fetch()
        finally:
            collector.close()
        (endpoint,) = state["endpoints"].values()
        assert endpoint.get("error", "").startswith(reason), name
