"""JMX credentials and TLS for the JmxTool readers, and JmxTool's failures as reasons that say what to fix.

Secrets never go on the JVM's command line (/proc/PID/cmdline is world-readable): the main class and its
arguments travel in a java @argfile read from a pipe (/dev/fd/N), written once and closed.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdiag.core.redact import mask_values

# The JmxTool wrapper shell uses fds 0-3: the argfile pipe goes above them.
MIN_FD = 10
MAX_REASON = 300


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8").rstrip("\r\n") if path else ""


def _quoted(arg: str) -> str:
    """One argument in java @argfile syntax: double-quoted, backslash and quote escaped."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class JmxAuth:
    """kafka.jmx_username / jmx_password_file / jmx_ssl / jmx_truststore / jmx_truststore_password_file."""

    username: str = ""
    password_file: str = ""
    ssl: bool = False
    truststore: str = ""
    truststore_password_file: str = ""

    @classmethod
    def from_config(cls, kafka: Any) -> JmxAuth:
        """The JMX settings of a KafkaConfig."""
        return cls(kafka.jmx_username, kafka.jmx_password_file, kafka.jmx_ssl, kafka.jmx_truststore,
                   kafka.jmx_truststore_password_file)

    def secrets(self) -> list[str]:
        """The passwords, read now (a changed file counts from the next reader start)."""
        return [s for s in (_read(self.password_file), _read(self.truststore_password_file)) if s]

    def argfile(self, main: str, args: list[str]) -> str:
        """The @argfile text: truststore JVM properties, the main class, its arguments and the credentials."""
        out = []
        if self.truststore:
            out.append(f"-Djavax.net.ssl.trustStore={self.truststore}")
            if self.truststore_password_file:
                out.append(f"-Djavax.net.ssl.trustStorePassword={_read(self.truststore_password_file)}")
        out += [main, *args]
        if self.username:
            out += ["--jmx-auth-prop", f"{self.username}={_read(self.password_file)}"]
        if self.ssl:
            out += ["--jmx-ssl-enable", "true"]
        return "\n".join(_quoted(a) for a in out) + "\n"

    def pipe(self, main: str, args: list[str]) -> int:
        """A readable fd (>= MIN_FD, not inherited unless passed) holding the argfile; the caller closes it."""
        text = self.argfile(main, args).encode()
        read, write = os.pipe()
        try:
            # An argfile fits the pipe buffer (64 KiB), so this write never blocks.
            os.write(write, text)
        finally:
            os.close(write)
        high = fcntl.fcntl(read, fcntl.F_DUPFD_CLOEXEC, MIN_FD)
        os.close(read)
        return high

    def explain(self, output: str) -> str:
        """JmxTool's failure output as one line that says what to fix; passwords redacted."""
        low = output.lower()
        for pattern, reason in self._reasons():
            if re.search(pattern, low):
                return reason
        line = next((x for x in output.splitlines() if x.startswith("Could not")), output.strip().split("\n")[0])
        line = mask_values(line, self.secrets())
        return " ".join(line.split())[:MAX_REASON]

    def _reasons(self) -> list[tuple[str, str]]:
        tls = "kafka.jmx_truststore"
        return [
            ("invalid username or password",
             "JMX authentication failed (invalid username or password): check kafka.jmx_username and kafka.jmx_password_file"),
            ("credentials required", "the JMX endpoint requires a password: set kafka.jmx_username and kafka.jmx_password_file"),
            ("non-jrmp server", "the JMX endpoint speaks TLS: set kafka.jmx_ssl: true (and kafka.jmx_truststore)"),
            ("remote host terminated the handshake|unsupported or unrecognized ssl message",
             "the JMX endpoint does not speak TLS: set kafka.jmx_ssl: false"),
            ("certificateexpiredexception|certificate expired", "the JMX endpoint's TLS certificate has expired: renew it"),
            ("pkix path|unable to find valid certification path",
             f"the JMX endpoint's TLS certificate is not trusted: {tls} must hold the CA that signed it"),
            ("defaultsslcontext|keystore password was incorrect|truststore",
             f"the JMX truststore cannot be opened: check {tls} and kafka.jmx_truststore_password_file"),
            ("connection refused", "the JMX endpoint refused the connection: is the broker up with JMX on that port?"),
        ]
