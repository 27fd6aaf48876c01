"""JMX credentials reach JmxTool through an @argfile pipe, and JmxTool's failures read as what to fix."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kdiag.kafka.jmx_auth import MIN_FD, JmxAuth

pytestmark = pytest.mark.integration

PASSWORD = 'pa ss"wo\\rd'


def auth(tmp_path, **kw) -> JmxAuth:
    (tmp_path / "jmx.pw").write_text(PASSWORD + "\n")
    (tmp_path / "ts.pw").write_text("tspass\n")
    return JmxAuth("monitor", str(tmp_path / "jmx.pw"), True, "/x/trust.p12", str(tmp_path / "ts.pw"), **kw)


def test_the_argfile_holds_the_credentials_quoted(tmp_path):
    text = auth(tmp_path).argfile("org.apache.kafka.tools.JmxTool", ["--jmx-url", "service:jmx:rmi:///x"])
    assert text.splitlines() == [
        '"-Djavax.net.ssl.trustStore=/x/trust.p12"', '"-Djavax.net.ssl.trustStorePassword=tspass"',
        '"org.apache.kafka.tools.JmxTool"', '"--jmx-url"', '"service:jmx:rmi:///x"',
        '"--jmx-auth-prop"', '"monitor=pa ss\\"wo\\\\rd"', '"--jmx-ssl-enable"', '"true"']
    assert JmxAuth().argfile("Main", ["a"]) == '"Main"\n"a"\n'


def test_the_pipe_is_a_high_fd_holding_the_argfile(tmp_path):
    a = auth(tmp_path)
    fd = a.pipe("Main", ["x"])
    try:
        assert fd >= MIN_FD
        assert os.read(fd, 4096).decode() == a.argfile("Main", ["x"])
    finally:
        os.close(fd)


@pytest.mark.skipif(not shutil.which("java"), reason="needs a JVM")
def test_java_reads_the_argfile_from_the_pipe(tmp_path):
    # The JVM's own view of its arguments: `-XshowSettings:properties` prints the password property it got.
    # (That no process's command line holds a secret is checked on the live daemon: test_kafka_client_live.py.)
    a = auth(tmp_path)
    (tmp_path / "ts.pw").write_text(PASSWORD)  # quotes, a backslash and a space must survive the argfile
    fd = a.pipe("-XshowSettings:properties", ["-version"])
    try:
        out = subprocess.run(["java", f"@/dev/fd/{fd}"], pass_fds=(fd,), capture_output=True, text=True, timeout=120)
    finally:
        os.close(fd)
    assert f"javax.net.ssl.trustStorePassword = {PASSWORD}\n" in out.stdout + out.stderr


# JmxTool's (Kafka 4.4, JDK 17) own output for each failure, as seen against a real JMX agent.
@pytest.mark.parametrize(("output", "reason"), [
    ("Could not connect to JMX url: service:jmx:rmi:///jndi/rmi://127.0.0.1:39199/jmxrmi. Exception: Authentication failed! "
     "Invalid username or password.\njava.lang.SecurityException: Authentication failed! Invalid username or password\n",
     "JMX authentication failed (invalid username or password): check kafka.jmx_username and kafka.jmx_password_file"),
    ("Could not connect to JMX url: x. Exception: Authentication failed! Credentials required.\n",
     "the JMX endpoint requires a password: set kafka.jmx_username and kafka.jmx_password_file"),
    ("Could not connect to JMX url: x. Exception: Failed to retrieve RMIServer stub: javax.naming.CommunicationException "
     "[Root exception is java.rmi.ConnectIOException: non-JRMP server at remote endpoint].\n",
     "the JMX endpoint speaks TLS: set kafka.jmx_ssl: true (and kafka.jmx_truststore)"),
    ("Could not connect to JMX url: x. Exception: Failed to retrieve RMIServer stub: javax.naming.CommunicationException "
     "[Root exception is java.rmi.ConnectIOException: error during JRMP connection establishment; nested exception is: \n"
     "\tjavax.net.ssl.SSLHandshakeException: PKIX path building failed: sun.security.provider.certpath."
     "SunCertPathBuilderException: unable to find valid certification path to requested target].\n",
     "the JMX endpoint's TLS certificate is not trusted: kafka.jmx_truststore must hold the CA that signed it"),
    ("Could not connect to JMX url: x. Exception: Failed to retrieve RMIServer stub: [Root exception is "
     "java.rmi.ConnectIOException: Exception creating connection to: 127.0.0.1; nested exception is: \n\tjava.net."
     "SocketException: java.security.NoSuchAlgorithmException: Error constructing implementation (algorithm: Default, "
     "provider: SunJSSE, class: sun.security.ssl.SSLContextImpl$DefaultSSLContext)].\n",
     "the JMX truststore cannot be opened: check kafka.jmx_truststore and kafka.jmx_truststore_password_file"),
    ("Could not connect to JMX url: x. Exception: Failed to retrieve RMIServer stub: [Root exception is java.rmi."
     "ConnectIOException: error during JRMP connection establishment; nested exception is: \n\tjavax.net.ssl."
     "SSLHandshakeException: Remote host terminated the handshake].\n",
     "the JMX endpoint does not speak TLS: set kafka.jmx_ssl: false"),
])
def test_jmxtool_failures_say_what_to_fix(tmp_path, output, reason):
    assert auth(tmp_path).explain(output) == reason


def test_an_unknown_failure_keeps_jmxtool_line_without_the_password(tmp_path):
    a = auth(tmp_path)
    assert a.explain(f"Could not connect: odd {PASSWORD} thing\nstack\n") == "Could not connect: odd *** thing"
