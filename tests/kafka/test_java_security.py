"""The Java client's security props for `kdiag bench`: what maps to librdkafka, and what is refused with why."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kdiag.tools.bench import client as bench_client
from kdiag.kafka.java_security import JavaPropError, jaas_credentials, translate

pytestmark = pytest.mark.integration

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_scram_and_plain_jaas_lines_give_username_and_password():
    assert jaas_credentials(f'{SCRAM} required username="alice" password="p=w \\"x\\"";') == {
        "sasl.username": "alice", "sasl.password": 'p=w "x"'}
    assert jaas_credentials("org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password=pw;") == {
        "sasl.username": "bob", "sasl.password": "pw"}


def test_a_multiline_properties_file_maps_to_librdkafka(tmp_path):
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    text = (f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={SCRAM} required \\\n"
            f'    username="alice" \\\n    password="pw";\nssl.truststore.location={tmp_path / "ca.pem"}\n'
            "ssl.truststore.type=PEM\nssl.endpoint.identification.algorithm=\nacks=all\nssl.enabled.protocols=TLSv1.3\n")
    conf, warnings = bench_client.map_java_props(bench_client.parse_properties_file(text))
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": "pw", "ssl.ca.location": str(tmp_path / "ca.pem"),
                    "ssl.endpoint.identification.algorithm": "none", "acks": "all"}
    assert warnings == ["ignoring Java-only property ssl.enabled.protocols (librdkafka has no equivalent)"]


@pytest.mark.parametrize(("props", "message"), [
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "sasl.jaas.config: login module com.sun.security.auth.module.Krb5LoginModule is not supported"),
    ({"sasl.jaas.config": f"{SCRAM} required username=alice;"}, "sasl.jaas.config: password missing"),
    ({"sasl.client.callback.handler.class": "x.Y"}, "sasl.client.callback.handler.class: names a Java class"),
    ({"ssl.provider": "SunJSSE"}, "ssl.provider: configures Java's TLS stack"),
    ({"ssl.keymanager.algorithm": "SunX509"}, "ssl.keymanager.algorithm: configures Java's TLS stack"),
    ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}, "ssl.cipher.suites: Java (IANA) cipher suite names"),
    ({"ssl.keystore.location": "/x/ks.jks"}, "ssl.keystore.location: a JKS keystore cannot be read by librdkafka: "
                                             "convert it with `keytool -importkeystore"),
])
def test_java_only_props_are_refused_naming_the_prop_and_why(props, message):
    with pytest.raises(JavaPropError) as e:
        translate(props)
    assert str(e.value).startswith(message)


def test_bench_refuses_them_with_one_line_and_exit_2(capsys):
    argv = ["bench", "produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--num-records", "1",
            "--record-size", "1", "--throughput", "-1", "--no-stats", "--producer-props", "ssl.provider=SunJSSE"]
    from kdiag.cli import main as cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == "kdiag bench: ssl.provider: configures Java's TLS stack; librdkafka uses OpenSSL and has no equivalent\n"


def test_pkcs12_and_pem_keystores_map(tmp_path):
    assert translate({"ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "kp",
                      "ssl.key.password": "kk"})[0] == {
        "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "kp", "ssl.key.password": "kk"}
    assert translate({"ssl.keystore.location": "/k.pem", "ssl.keystore.type": "PEM"})[0] == {
        "ssl.certificate.location": "/k.pem", "ssl.key.location": "/k.pem"}


@pytest.mark.skipif(not (shutil.which("keytool") and shutil.which("openssl")), reason="needs keytool and openssl")
@pytest.mark.parametrize("store_type", ["PKCS12", "JKS"])
def test_a_keystore_truststore_is_converted_to_pem_with_keytool(tmp_path, store_type):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", tmp_path / "ca.key", "-out", tmp_path / "ca.pem", "-days", "2", "-subj", "/CN=kc-test-ca"],
                   check=True, capture_output=True)
    store = tmp_path / f"trust.{store_type.lower()}"
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", tmp_path / "ca.pem", "-keystore", store,
                    "-storetype", store_type, "-storepass", "tspass123"], check=True, capture_output=True)
    conf, _rest = translate({"ssl.truststore.location": str(store), "ssl.truststore.password": "tspass123",
                             "ssl.truststore.type": store_type})
    assert conf["ssl.ca.pem"].strip() == (tmp_path / "ca.pem").read_text().strip()
    with pytest.raises(JavaPropError, match=r"keytool cannot read .*check ssl\.truststore\.password"):
        translate({"ssl.truststore.location": str(store), "ssl.truststore.password": "wrong-pass"})
