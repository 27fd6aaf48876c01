"""A broker in a mount namespace of its own (issue 32): discovery reads its config and jars through /proc/PID/root and
gives its log dirs as the host's directories behind them; its jars run only when its root's and link-free."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.waiting import wait_until

from kdiag.config.settings import load_config
from kdiag.core.root import Root
from kdiag.runtime.discovery import discover

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                 reason="a mount namespace, a tmpfs and a bind mount need root")]
NODE_ID = 4711  # none of this machine's lab brokers


def container(tmp_path: Path, host_dir: Path, link: bool = False, jmx: str = "",
              namespaces: tuple[str, ...] = ("--mount",), libs: Path | None = None) -> subprocess.Popen[bytes]:
    """A root broker look-alike in its own mount namespace: /opt/kafka (a tmpfs only it sees: config and libs) and
    its log dir /var/lib/kafka/data (there at tmp_path/data), a bind of host_dir."""
    opt, data = tmp_path / "opt", tmp_path / "data"
    opt.mkdir()
    data.mkdir()
    setup = (f"mkdir -p {opt}/libs {opt}/config && echo jar > {opt}/libs/kafka.jar && "
             f"printf 'node.id={NODE_ID}\\nlog.dirs={data}\\nlisteners=PLAINTEXT://127.0.0.1:1\\n' "
             f"> {opt}/config/server.properties")
    if link:  # a link in its root: this host would resolve it against its own files
        setup += f" && ln -s /usr/share/java {opt}/libs/linked"
    if libs:  # its jars a bind of a host directory, as a container's volume is
        setup += f" && mount --bind {libs} {opt}/libs"
    script = (f"mount --make-rprivate / && mount -t tmpfs -o mode=755 kdiag-test {opt} && {setup} && "
              f"mount --bind {host_dir} {data} && "
              f"exec -a java /bin/sh -c 'sleep 600; :' {jmx} -cp '{opt}/libs/*:{opt}/libs/linked' kafka.Kafka "
              f"{opt}/config/server.properties")
    proc = subprocess.Popen(["unshare", *namespaces, "--", "/bin/bash", "-c", script])
    wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"java\0"), 30, "the broker")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    proc.kill()
    proc.wait()
    for child in children:
        os.kill(int(child), 9)


@pytest.mark.parametrize("link", [False, True])
def test_a_namespaced_brokers_config_jars_and_log_dirs_are_read_from_its_root(tmp_path, caplog, link):
    host_dir = Path("/dev/shm") / f"kdiag-test-{os.getpid()}"
    host_dir.mkdir()
    proc = container(tmp_path, host_dir, link)
    try:
        with caplog.at_level(logging.INFO, logger="kdiag.runtime.discovery"):
            config = discover(load_config(overrides={"kafka.local_broker_id": NODE_ID}), Root())
    finally:
        stop(proc)
        host_dir.rmdir()
    assert not (tmp_path / "opt" / "config").exists()  # only its mount namespace has them
    assert config.processes.log_dirs == [str(host_dir)]
    assert any(m.startswith(f"broker discovery: processes.log_dirs = {host_dir} (log.dirs in ") and
               m.endswith("/data in its mount namespace)") for m in caplog.messages)
    if link:
        assert config.kafka.jmx_classpath == ""
        assert (f"broker discovery: the -cp of pid {proc.pid} is not used to run JmxTool: {tmp_path}/opt/libs/linked is "
                "a symbolic link in another mount namespace's root; set kafka.jmx_classpath to Kafka's libs/*"
                ) in caplog.messages
    else:
        assert config.kafka.jmx_classpath == (f"/proc/{proc.pid}/root{tmp_path}/opt/libs/*:"
                                              f"/proc/{proc.pid}/root{tmp_path}/opt/libs/linked")


def test_a_namespaced_brokers_jars_the_host_mounts_are_given_as_the_host_dir(tmp_path):
    host_dir, libs = Path("/dev/shm") / f"kdiag-test-{os.getpid()}", tmp_path / "host-libs"
    host_dir.mkdir()
    libs.mkdir()
    (libs / "kafka.jar").write_text("jar")
    proc = container(tmp_path, host_dir, libs=libs)
    try:
        config = discover(load_config(overrides={"kafka.local_broker_id": NODE_ID}), Root())
    finally:
        stop(proc)
        host_dir.rmdir()
    assert config.kafka.jmx_classpath == f"{libs}/*:{libs}/linked"  # a JVM loads no jar through /proc/PID/root


JMX_OPTS = ("-Dcom.sun.management.jmxremote.port=31999 -Dcom.sun.management.jmxremote.host=127.0.0.1 "
            "-Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false")


@pytest.mark.parametrize("net", [False, True])
def test_a_brokers_jmx_port_in_its_own_network_namespace_is_reached_there(tmp_path, caplog, net):
    host_dir = Path("/dev/shm") / f"kdiag-test-{os.getpid()}"
    host_dir.mkdir()
    proc = container(tmp_path, host_dir, jmx=JMX_OPTS, namespaces=("--mount", "--net") if net else ("--mount",))
    try:
        config = discover(load_config(overrides={"kafka.local_broker_id": NODE_ID}), Root())
    finally:
        stop(proc)
        host_dir.rmdir()
    assert config.kafka.jmx == ["127.0.0.1:31999" + (f"@netns:{proc.pid}" if net else "")]


def test_an_image_configured_by_its_environment_gives_its_settings_and_never_its_secrets(tmp_path, caplog):
    # As Bitnami's image: KAFKA_CFG_* build a properties file at start, here one discovery cannot read.
    secret = "s3cret-keystore-password"
    env = {"PATH": "/usr/bin:/bin", "KAFKA_CFG_NODE_ID": str(NODE_ID), "KAFKA_CFG_LOG_DIRS": str(tmp_path / "data"),
           "KAFKA_CFG_LISTENERS": "PLAINTEXT://:19092", "KAFKA_LOG_DIRS": "/not/this/one",
           "KAFKA_CFG_SSL_KEYSTORE_PASSWORD": secret, "KAFKA_OPTS": f"-Dpass={secret}"}
    (tmp_path / "data").mkdir()
    proc = subprocess.Popen(["/bin/bash", "-c", "exec -a java /bin/sh -c 'sleep 600; :' kafka.Kafka "
                             "/opt/bitnami/kafka/config/server.properties"], env=env)
    try:
        # Until its child has become `sleep`, the forked child is a second "broker" of the same command line.
        wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"java\0")
                   and any(Path(f"/proc/{c}/cmdline").read_bytes().startswith(b"sleep\0")
                           for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()),
                   30, "the broker")
        with caplog.at_level(logging.DEBUG):
            config = discover(load_config(overrides={"kafka.local_broker_id": NODE_ID}), Root())
    finally:
        stop(proc)
    assert config.processes.log_dirs == [str(tmp_path / "data")]
    assert config.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert f"broker discovery: local broker is pid {proc.pid} (its KAFKA_* environment)" in caplog.messages
    assert secret not in caplog.text
