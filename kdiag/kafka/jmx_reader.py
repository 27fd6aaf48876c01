"""One resident Kafka JmxTool JVM per JMX endpoint, printing a CSV row per poll; a thread keeps the latest row."""

from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import threading
import time

from kdiag.kafka import jmx_legacy
from kdiag.kafka.jmx_auth import JmxAuth


# An endpoint reached inside the network namespace of a process: a container's JMX, bound to its own loopback.
NETNS = re.compile(r"(.+)@netns:([1-9][0-9]{0,9})")


def split_netns(endpoint: str) -> tuple[str, int | None]:
    """(the endpoint, the pid whose network namespace it is in) of "ENDPOINT@netns:PID"; (endpoint, None) otherwise."""
    m = NETNS.fullmatch(endpoint)
    return (m.group(1), int(m.group(2))) if m else (endpoint, None)


def parse_row(header: list[str], row: list[str]) -> dict[str, float]:
    """Finite numeric values of one JmxTool row keyed "<mbean>|<attribute>" (the time column dropped)."""
    values = {}
    for column, text in zip(header, row, strict=False):
        mbean, _, attribute = column.rpartition(":")
        try:
            value = float(text)
        except ValueError:
            continue
        if mbean and math.isfinite(value):
            values[f"{mbean}|{attribute}"] = value
    return values


class JmxReader:
    """One JmxTool JVM on one endpoint, its latest row kept by a thread."""

    # The JVM ignores a closed stdout and would outlive kdiag: a shell child kills it when our pipe
    # to its stdin closes (kdiag exited or close()), and `exec` keeps the JVM's pid ours to poll.
    WRAPPER = 'exec 3<&0; (read _ <&3; kill $$) & exec "$@" 3<&-'
    JVM_FLAGS = ("-Xmx32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")

    def __init__(self, url: str, classpath: str, poll_interval: float, queries: tuple[str, ...],
                 attributes: tuple[str, ...], java: str, auth: JmxAuth | None = None, nsenter: str = ""):
        """With url's "@netns:PID", the JVM runs in that process's network namespace (through `nsenter`, the trusted
        program's path); its files stay the host's."""
        self.url = url
        url, netns = split_netns(url)
        self.auth = auth or JmxAuth()
        self.started = time.monotonic()
        self.latest: tuple[float, dict[str, float]] | None = None
        self.error = ""
        self._output: list[str] = []
        self._fresh = threading.Condition()
        main = jmx_legacy.main_class(classpath)
        self.legacy = main == jmx_legacy.OLD_MAIN
        if self.legacy:
            args = jmx_legacy.args(url, int(poll_interval * 1000), queries)
        else:
            args = ["--jmx-url", url, "--reporting-interval", str(int(poll_interval * 1000)),
                    "--attributes", ",".join(attributes)]
            for query in queries:
                args += ["--object-name", query]
        # The main class and its arguments (credentials among them) come from an @argfile pipe, not argv.
        argfile = self.auth.pipe(main, args)
        enter = [nsenter, f"--net=/proc/{netns}/ns/net", "--"] if netns else []
        try:
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", self.WRAPPER, "sh", *enter, java, *self.JVM_FLAGS, "-cp", classpath,
                 f"@/dev/fd/{argfile}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                pass_fds=(argfile,),
            )
        finally:
            os.close(argfile)
        threading.Thread(target=self._read, name=f"jmx-reader {url}", daemon=True).start()

    def _publish(self, values: dict[str, float]) -> None:
        with self._fresh:
            self.latest = (time.monotonic(), values)
            self._fresh.notify_all()

    def _read(self) -> None:
        header: list[str] | None = None
        row: dict[str, float] | None = None  # the old tool's tsv poll being read, None once published
        lines = whole = 0  # its lines so far; the lines of the last whole poll (a poll that reaches it is whole)
        assert self.process.stdout is not None  # started with stdout=PIPE
        with self.process.stdout as stream:
            for line in stream:
                if self.legacy and line.startswith("time\t"):
                    if row is not None:  # the first poll, or one whose size changed: whole when the next begins
                        whole = lines
                        self._publish(row)
                    row, lines = {}, 0
                elif self.legacy and "\t" in line:
                    if row is None:  # the rest of a poll already published whole: its size grew
                        continue
                    key, _, text = line.partition("\t")
                    row.update(parse_row([key], [text.strip()]))
                    lines += 1
                    if lines == whole:
                        self._publish(row)
                        row = None
                elif line.startswith('"time"'):
                    header = next(csv.reader([line]))
                elif header and line[:1].isdigit():
                    self._publish(parse_row(header, next(csv.reader([line]))))
                elif not line.startswith("Trying") and len(self._output) < 40:
                    # A failure spans lines (the nested exception says why): judge them together.
                    self._output.append(line)
                    self.error = self.auth.explain("".join(self._output))
        with self._fresh:
            self._fresh.notify_all()

    def alive(self) -> bool:
        """Whether the JVM is still running."""
        return self.process.poll() is None

    def wait_row(self, deadline: float, max_age: float) -> dict[str, float] | None:
        """The latest row no older than max_age, waiting until `deadline` (monotonic) for the first one."""
        with self._fresh:
            while self.latest is None and self.alive() and time.monotonic() < deadline:
                self._fresh.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            # A JVM that died, or stopped printing, still holds its last row: that is not the broker now.
            if self.latest is None or not self.alive() or time.monotonic() - self.latest[0] > max_age:
                return None
            return self.latest[1]

    def close(self) -> None:
        """Stop the JVM and its watcher shell."""
        if self.process.stdin:
            self.process.stdin.close()
        if self.alive():
            self.process.kill()
        self.process.wait()
