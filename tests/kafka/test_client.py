"""kafka.client: secrets by file or ${VAR}, librdkafka's own check naming the key, and refusals explained without secrets."""

from __future__ import annotations

import pytest

from kdiag.cli import main as cli
from kdiag.config.settings import ConfigError, load_config
from kdiag.kafka.client import ClientConfigError, ClientSettings, ErrorLog, explain

SECRET = "s3cr3t-Pw_42"


def test_secrets_come_from_files_and_the_environment(tmp_path):
    (tmp_path / "pw").write_text(SECRET + "\n")
    settings = ClientSettings.resolve({
        "security.protocol": "SASL_SSL", "sasl.username": "${KC_USER}", "sasl.password_file": str(tmp_path / "pw"),
        "enable.ssl.certificate.verification": True, "socket.timeout.ms": 5000,
    }, {"KC_USER": "kdiag"})
    assert settings.props == {"security.protocol": "SASL_SSL", "sasl.username": "kdiag", "sasl.password": SECRET,
                              "enable.ssl.certificate.verification": "true", "socket.timeout.ms": "5000"}
    assert settings.key_of("sasl.password") == "kafka.client.sasl.password_file"
    assert settings.redact(f"login {SECRET} failed") == "login *** failed"
    conf = settings.conf({"bootstrap.servers": "b:9092", "client.id": "kdiag"})
    assert conf["sasl.password"] == SECRET and conf["bootstrap.servers"] == "b:9092"


def test_an_environment_secret_is_redacted_too():
    settings = ClientSettings.resolve({"sasl.password": "${KC_PW}"}, {"KC_PW": SECRET})
    assert settings.props["sasl.password"] == SECRET
    assert SECRET not in settings.redact(f"x {SECRET} y")


@pytest.mark.parametrize(("client", "message"), [
    ({"sasl.password_file": "/nonexistent/pw"}, "kafka.client.sasl.password_file: cannot read /nonexistent/pw"),
    ({"sasl.password": "${KC_UNSET_VAR}"}, "kafka.client.sasl.password: environment variable KC_UNSET_VAR is not set"),
    ({"sasl.password": "a", "sasl.password_file": "/etc/hostname"}, "kafka.client.sasl.password_file: sasl.password is given twice"),
    ({"bootstrap.servers": "x:1"}, "kafka.client.bootstrap.servers: set kafka.bootstrap_servers instead"),
    ({"sasl.mechanism": ["PLAIN"]}, "kafka.client.sasl.mechanism: expected a single value"),
])
def test_unresolvable_entries_name_their_key(client, message):
    with pytest.raises(ClientConfigError) as e:
        ClientSettings.resolve(client, {})
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(("client", "key"), [
    ({"sasl.pasword": SECRET}, "kafka.client.sasl.pasword: No such configuration property"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/etc/hostname"}, "kafka.client.ssl.ca.location: ssl.ca.location failed"),
    ({"security.protocol": "bogus"}, "kafka.client.security.protocol: Invalid value"),
])
def test_librdkafka_judges_the_settings_at_start_and_the_error_names_the_key(tmp_path, client, key):
    f = tmp_path / "kdiag.yaml"
    f.write_text("kafka:\n  bootstrap_servers: 127.0.0.1:1\n  client:\n"
                 + "".join(f"    {k}: {v}\n" for k, v in client.items()))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(e.value).startswith(f"{f}: {key}")
    assert SECRET not in str(e.value)


def test_a_bad_client_setting_stops_kdiag_run_with_one_line_and_exit_2(tmp_path, capsys):
    f = tmp_path / "kdiag.yaml"
    f.write_text(f"kafka:\n  bootstrap_servers: 127.0.0.1:1\n  client:\n    sasl.pasword: {SECRET}\n")
    assert cli.main(["run", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kafka.client.sasl.pasword" in err and SECRET not in err


def test_jmx_credentials_files_must_be_readable(tmp_path):
    f = tmp_path / "kdiag.yaml"
    f.write_text("kafka:\n  bootstrap_servers: 127.0.0.1:1\n  jmx_username: u\n  jmx_password_file: /nonexistent/jmx\n")
    with pytest.raises(ConfigError, match=r"kafka\.jmx_password_file: cannot read /nonexistent/jmx"):
        load_config(f)
    f.write_text("kafka:\n  bootstrap_servers: 127.0.0.1:1\n  jmx_username: u\n")
    with pytest.raises(ConfigError, match=r"kafka\.jmx_username: set kafka\.jmx_password_file too"):
        load_config(f)


def test_the_client_mapping_must_be_a_mapping(tmp_path):
    f = tmp_path / "kdiag.yaml"
    f.write_text("kafka:\n  client: [security.protocol]\n")
    with pytest.raises(ConfigError, match=r"kafka\.client: expected a mapping"):
        load_config(f)


SASL = ClientSettings({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kdiag",
                       "sasl.password": SECRET}, {"security.protocol": "security.protocol", "sasl.mechanism": "sasl.mechanism",
                                                  "sasl.username": "sasl.username", "sasl.password": "sasl.password_file"})

# librdkafka's own words (2.16), as the live cases produced them.
@pytest.mark.parametrize(("raw", "reason"), [
    ("sasl_ssl://127.0.0.1:39092/bootstrap: SASL authentication error: Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-512 (after 162ms in state AUTH_REQ)",
     "SASL authentication failed for user kdiag: check kafka.client.sasl.password_file and kafka.client.sasl.mechanism"),
    ("sasl_ssl://127.0.0.1:39092/bootstrap: SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL mechanism: "
     "broker's supported mechanisms: SCRAM-SHA-512 (after 301ms in state AUTH_HANDSHAKE)",
     "SASL mechanism SCRAM-SHA-512 is not enabled on the listener: check kafka.client.sasl.mechanism"),
    ("127.0.0.1:39092/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN "
     "(after 1ms in state APIVERSION_QUERY)",
     "the broker closed the connection before answering (a TLS listener?): check kafka.client.security.protocol (SASL_SSL)"),
    ("ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to a "
     "PLAINTEXT broker listener? (after 5ms in state SSL_HANDSHAKE)",
     "TLS handshake failed: the broker closed the connection (not a TLS listener?): "
     "check kafka.client.security.protocol (SASL_SSL)"),
    ("sasl_plaintext://127.0.0.1:9092/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: Broker: Request not valid "
     "in current SASL state: broker's supported mechanisms:  (after 0ms in state AUTH_HANDSHAKE)",
     "the listener does not use SASL: check kafka.client.security.protocol (SASL_SSL)"),
    ("Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)", ""),
])
def test_refusals_are_explained_with_the_key_to_check(raw, reason):
    assert explain(SASL, raw) == reason


def test_a_disconnect_at_the_first_request_hints_at_a_sasl_listener():
    ssl_only = ClientSettings({"security.protocol": "SSL"}, {"security.protocol": "security.protocol"})
    raw = "ssl://127.0.0.1:39092/bootstrap: Disconnected: SSL connection closed by peer (after 14ms in state UP)"
    assert explain(ssl_only, raw).startswith("the broker closed the connection at the first request (a SASL listener?)")
    # An idle connection closed after minutes is no hint at all.
    assert explain(ssl_only, raw.replace("14ms", "600000ms")) == ""


class _Error:
    def __init__(self, name: str, text: str):
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text


def test_error_log_keeps_the_telling_error_and_never_a_secret():
    log = ErrorLog(SASL, "127.0.0.1:1")
    assert log.reason() == ""
    log.log(20, "%s [%s] %s", "FAIL", "rdkafka#producer-1", f"b: Disconnected: {SECRET} (after 1ms in state APIVERSION_QUERY)")
    log.record(_Error("_ALL_BROKERS_DOWN", "1/1 brokers are down"))
    assert log.refusal().startswith("the broker closed the connection before answering")
    log.record(_Error("_TRANSPORT", f"weird failure mentioning {SECRET} (after 3ms in state UP)"))
    assert log.refusal() == "" and log.reason() == "weird failure mentioning ***"
    log.clear()
    assert log.reason() == ""
