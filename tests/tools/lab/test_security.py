"""lab_security without Kafka: the secrets, certificates and settings a secured lab is started with."""

import os
import pwd
import stat
import subprocess

import pytest

from kdiag.tools.lab import security as lab_security
from kdiag.tools.lab.jars import LabError


@pytest.fixture(scope="module")
def sasl_ssl_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("lab")
    lab_security.prepare(d, "sasl_ssl")
    return d


@pytest.mark.integration
def test_secrets_are_private_and_the_certificate_serves_127_0_0_1(sasl_ssl_dir):
    s = lab_security.secrets_dir(sasl_ssl_dir)
    assert stat.S_IMODE(s.stat().st_mode) == 0o700
    assert {f.name for f in s.iterdir()} >= {"kdiag.password", "jmx.password", "ca.crt", "broker.pem", "broker.p12",
                                            "truststore.p12", "jmxremote.password", "jmxremote.access"}
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in s.iterdir())
    verify = subprocess.run(["openssl", "verify", "-CAfile", "ca.crt", "-verify_ip", "127.0.0.1", "-purpose", "sslserver",
                             "broker.crt"], cwd=s, capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "CA:FALSE" in subprocess.run(["openssl", "x509", "-noout", "-ext", "basicConstraints", "-in", "broker.crt"],
                                        cwd=s, capture_output=True, text=True, check=True).stdout


def test_a_second_prepare_keeps_the_passwords(sasl_ssl_dir):
    s = lab_security.secrets_dir(sasl_ssl_dir)
    before = {f.name: f.read_bytes() for f in s.iterdir()}
    lab_security.prepare(sasl_ssl_dir, "sasl_ssl")
    assert {f.name: f.read_bytes() for f in s.iterdir()} == before


def test_passwords_stay_off_argv_and_out_of_kdiag_config(sasl_ssl_dir):
    s = lab_security.secrets_dir(sasl_ssl_dir)
    password = (s / "kdiag.password").read_text().strip()
    cmd = lab_security.format_command(sasl_ssl_dir, "sasl_ssl", 1, ["java", "-cp", "x", "kafka.tools.StorageTool", "format"])
    assert cmd == ["java", f"@{s / 'format-1.args'}"]
    assert f'"SCRAM-SHA-512=[name=kdiag,password={password}]"' in (s / "format-1.args").read_text()
    info = {"security": "sasl_ssl", "bootstrap": "127.0.0.1:1", "jmx": {"1": "service:jmx:x"}}
    assert password not in repr(lab_security.kdiag_config(sasl_ssl_dir, info))
    assert lab_security.redact(sasl_ssl_dir, f"bad value password={password}]") == "bad value password=***]"
    assert lab_security.client_conf(sasl_ssl_dir, "sasl_ssl")["sasl.password"] == password


def test_plain_lab_config_has_no_security_keys(tmp_path):
    info = {"bootstrap": "127.0.0.1:9092", "jmx": {"2": "service:jmx:b", "1": "service:jmx:a"}}
    assert lab_security.kdiag_config(tmp_path, info) == {"kafka": {
        "bootstrap_servers": "127.0.0.1:9092", "jmx": ["service:jmx:a", "service:jmx:b"],
        "jmx_classpath": str(tmp_path / "libs" / "*"), "broker_user": pwd.getpwuid(os.geteuid()).pw_name}}
    lab_security.prepare(tmp_path, "none")
    assert not lab_security.secrets_dir(tmp_path).exists()


def test_missing_openssl_is_one_line_with_an_install_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match=r"^openssl not found: .*apt-get install openssl\)$") as e:
        lab_security.prepare(tmp_path, "ssl")
    assert e.value.exit_code == 2
