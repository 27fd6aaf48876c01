"""Tests of `kdiag lab up --security` against real Kafka JVMs (the kafka tier)."""

import socket
import stat
import struct
import subprocess
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from tests.conftest import lab_client_conf
from tests.tools.lab.test_lab import kafka_running, run

from kdiag.tools.lab import lab
from kdiag.tools.lab.jars import jars_ok

pytestmark = pytest.mark.kafka

BASE = 29092


def up(d: Path, security: str) -> dict:
    """`kdiag lab up --brokers 1 --security S` in d; return lab.json."""
    rc, out = run("up", "--dir", str(d), "--base-port", str(BASE), "--security", security, "--timeout", "150")
    assert rc == 0, out
    assert f"lab: running brokers=1 security={security} " in out
    return lab.read_lab(d)


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory):
    """A 1-broker sasl_ssl lab at BASE in a tmp dir, purged afterwards; jars shared with the default lab's."""
    d = tmp_path_factory.mktemp("seclab")
    default_libs = lab.lab_dir() / "libs"
    if jars_ok(default_libs, lab.KAFKA_VERSION):
        (d / "libs").symlink_to(default_libs)
    up(d, "sasl_ssl")
    yield d
    info = lab.read_lab(d)
    assert run("down", "--dir", str(d), "--purge")[0] == 0
    assert not (d / "secrets").exists() and not (d / "kdiag.yaml").exists()
    assert not any(kafka_running(int(pid)) for pid in (info or {}).get("pids", {}).values())


def errors_of(conf: dict, timeout: float = 8) -> list[KafkaError]:
    """Try to list topics with conf; return the client errors (the listing must fail)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=timeout)
    admin.poll(1)
    return errors


def jmx_tool(d: Path, tmp_path: Path, url: str, *args: str, password: str | None = None) -> str:
    """Run JmxTool once through a 0600 java argfile (the password stays off argv); return its output."""
    s = d / "secrets"
    argv = ["-cp", str(d / "libs" / "*"), f"-Djavax.net.ssl.trustStore={s / 'truststore.p12'}",
            f"-Djavax.net.ssl.trustStorePassword={(s / 'truststore.password').read_text().strip()}",
            "org.apache.kafka.tools.JmxTool", "--jmx-url", url, "--one-time", "true",
            "--object-name", "kafka.server:type=KafkaServer,name=BrokerState", *args]
    if password is not None:
        argv += ["--jmx-auth-prop", f"kdiag={password}"]
    argfile = tmp_path / "jmxtool.args"
    argfile.write_text("".join(f'"{a}"\n' for a in argv))
    argfile.chmod(0o600)
    proc = subprocess.run(["java", f"@{argfile}"], capture_output=True, text=True, timeout=90, check=False)
    return proc.stdout + proc.stderr


def test_kdiag_yaml_names_secrets_in_private_files(lab_dir):
    info = lab.read_lab(lab_dir)
    assert info["security"] == "sasl_ssl"
    text = (lab_dir / "kdiag.yaml").read_text()
    kafka = yaml.safe_load(text)["kafka"]
    s = lab_dir / "secrets"
    assert kafka["bootstrap_servers"] == f"127.0.0.1:{BASE}" == info["bootstrap"]
    assert kafka["jmx"] == [info["jmx"]["1"]]
    assert kafka["client"] == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kdiag",
        "sasl.password_file": str(s / "kdiag.password"), "ssl.ca.location": str(s / "ca.crt"),
    }
    assert kafka["jmx_username"] == "kdiag" and kafka["jmx_ssl"] is True
    assert kafka["jmx_password_file"] == str(s / "jmx.password")
    assert kafka["jmx_truststore"] == str(s / "truststore.p12")
    assert stat.S_IMODE(s.stat().st_mode) == 0o700
    for f in s.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    for name in ("kdiag.password", "jmx.password", "broker.password", "truststore.password"):
        assert (s / name).read_text().strip() not in text
    node_dir = lab_dir / "node-1"
    assert stat.S_IMODE((node_dir / "server.properties").stat().st_mode) == 0o600  # holds the broker's JAAS
    cmdline = Path(f"/proc/{info['pids']['1']}/cmdline").read_text()
    assert (s / "jmx.password").read_text().strip() not in cmdline


def test_client_with_kdiag_yaml_settings_lists_topics(lab_dir):
    conf = lab_client_conf(lab_dir / "kdiag.yaml")
    admin = AdminClient(conf)
    assert admin.describe_cluster(request_timeout=15).result(timeout=20).nodes[0].id == 1
    admin.list_topics(timeout=15)


def test_plaintext_client_is_refused_by_the_broker(lab_dir):
    errors = errors_of({"bootstrap.servers": f"127.0.0.1:{BASE}"})
    assert errors and all(e.code() != KafkaError._AUTHENTICATION for e in errors)
    # A well-formed ApiVersions v0 request in plaintext gets no Kafka answer: the TLS listener drops it.
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    with socket.create_connection(("127.0.0.1", BASE), timeout=15) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply[4:8] != struct.pack(">i", 7), reply


def test_wrong_password_is_refused(lab_dir):
    conf = {**lab_client_conf(lab_dir / "kdiag.yaml"), "sasl.password": "not-the-password"}
    assert KafkaError._AUTHENTICATION in [e.code() for e in errors_of(conf)]


def test_jmx_needs_the_password_and_tls(lab_dir, tmp_path):
    url = lab.read_lab(lab_dir)["jmx"]["1"]
    password = (lab_dir / "secrets" / "jmx.password").read_text().strip()
    out = jmx_tool(lab_dir, tmp_path, url, "--jmx-ssl-enable", "true", password=password)
    assert "KafkaServer,name=BrokerState:Value" in out, out
    assert "Credentials required" in jmx_tool(lab_dir, tmp_path, url, "--jmx-ssl-enable", "true")
    assert "Invalid username or password" in jmx_tool(lab_dir, tmp_path, url, "--jmx-ssl-enable", "true",
                                                      password="wrong")
    assert "non-JRMP server" in jmx_tool(lab_dir, tmp_path, url, password=password)


def test_status_and_idempotent_up(lab_dir):
    before = lab.read_lab(lab_dir)["pids"]
    rc, out = run("status", "--dir", str(lab_dir))
    assert rc == 0 and "lab: running brokers=1 security=sasl_ssl " in out, out
    assert up(lab_dir, "sasl_ssl")["pids"] == before


@pytest.mark.parametrize("security", ["sasl_plaintext", "ssl"])
def test_other_modes_rebuild_the_lab_and_refuse_plaintext(lab_dir, security):
    before = lab.read_lab(lab_dir)
    info = up(lab_dir, security)
    assert info["pids"]["1"] != before["pids"]["1"] and info["cluster_id"] != before["cluster_id"]
    kafka = yaml.safe_load((lab_dir / "kdiag.yaml").read_text())["kafka"]
    assert kafka["client"]["security.protocol"] == security.upper()
    assert kafka.get("jmx_ssl", False) == (security == "ssl")
    AdminClient(lab_client_conf(lab_dir / "kdiag.yaml")).list_topics(timeout=15)
    assert errors_of({"bootstrap.servers": info["bootstrap"]})
