"""Tests of `kdiag lab` against real Kafka JVMs (the kafka tier)."""

import argparse
import contextlib
import io
import re
import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.waiting import wait_until

from kdiag.tools.lab import lab
from kdiag.tools.lab import cli as lab_cli
from kdiag.tools.lab import nodes as lab_nodes
from kdiag.tools.lab import sizing as lab_sizing
from kdiag.config.settings import load_config

pytestmark = pytest.mark.kafka


def run(*argv: str) -> tuple[int, str]:
    """Run `kdiag lab ARGV` in-process and return its exit code and stdout."""
    parser = argparse.ArgumentParser(prog="kdiag")
    lab_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lab", *argv])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = args.func(args)
    return rc, out.getvalue()


def broker_ids(bootstrap: str) -> list[int]:
    """Return the broker ids an AdminClient sees."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return sorted(n.id for n in admin.describe_cluster(request_timeout=10).result(timeout=15).nodes)


def kafka_running(pid: int) -> bool:
    """Whether pid is a live Kafka broker (a zombie has an empty cmdline)."""
    try:
        return "kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def test_default_lab_up_status_and_idempotent_up():
    before = lab.read_lab()
    brokers = before["brokers"] if before else 1
    try:
        rc, out = run("up", "--brokers", str(brokers))
        assert rc == 0, out
        info = lab.read_lab()
        assert info is not None and info["brokers"] == brokers
        assert f"bootstrap: {info['bootstrap']}\n" in out
        assert re.search(r"^jmx: 1 service:jmx:rmi:///jndi/rmi://127\.0\.0\.1:\d+/jmxrmi$", out, re.MULTILINE)

        rc, status = run("status")
        assert rc == 0, status
        assert f"node: 1 running pid={info['pids']['1']}" in status

        assert broker_ids(info["bootstrap"]) == list(range(1, brokers + 1))
        jmx_port = int(re.search(r":(\d+)/jmxrmi$", info["jmx"]["1"]).group(1))
        socket.create_connection(("127.0.0.1", jmx_port), timeout=5).close()

        rc, again = run("up", "--brokers", str(brokers))
        assert rc == 0
        assert again == out
        assert lab.read_lab()["pids"] == info["pids"]
    finally:
        if before is None:  # leave the default lab as we found it
            run("down")


def test_three_broker_lab_and_down_leaves_nothing(tmp_path):
    base = 29092
    d = str(tmp_path / "lab3")
    try:
        rc, out = run("up", "--brokers", "3", "--dir", d, "--base-port", str(base), "--timeout", "120")
        assert rc == 0, out
        info = lab.read_lab(d)
        assert info["bootstrap"] == "127.0.0.1:29092,127.0.0.1:29102,127.0.0.1:29112"
        assert broker_ids(info["bootstrap"]) == [1, 2, 3]
        pids = [int(p) for p in info["pids"].values()]
        assert len(pids) == 3
        config = load_config(lab.lab_config(d))  # `kdiag run --config DIR/kdiag.yaml` works on a plain lab too
        assert (config.kafka.bootstrap_servers, config.kafka.jmx) == (info["bootstrap"], list(info["jmx"].values()))
    finally:
        rc, _ = run("down", "--dir", d, "--purge")
    assert rc == 0
    assert lab.read_lab(d) is None
    assert not any(kafka_running(pid) for pid in pids)
    # A connection the broker closed first can hold its port for a moment (FIN_WAIT2 until the client closes too).
    wait_until(lambda: all(lab_nodes.port_free(p) for n in (1, 2, 3) for p in lab.ports(n, base).values()), 120,
               "the lab's ports free again after down")
    assert run("status", "--dir", d)[0] == 1


def test_a_lab_sized_for_its_partitions_starts_its_broker_with_that_heap_and_files_limit(tmp_path, capsys):
    """The files limit raised where this process may (CAP_SYS_RESOURCE), else the inherited one and a warning."""
    d = str(tmp_path / "sized")
    sized = lab_sizing.size(30_000, 5_000, 1)
    try:
        rc, out = run("up", "--dir", d, "--base-port", "29392", "--partitions", "30000", "--groups", "5000",
                      "--timeout", "120")
        assert rc == 0, out
        info = lab.read_lab(d)
        pid = info["pids"]["1"]
        limits = Path(f"/proc/{pid}/limits").read_text()
        files = next(line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files"))
        assert files == [str(info["nofile"])] * 2 and info["nofile"] == sized.nofile
        assert (sized.nofile == sized.wanted_nofile) if lab_sizing.can_raise() else sized.note
        if sized.note:
            assert f"want {sized.wanted_nofile} open files for 30000 partitions and get {sized.nofile}" in \
                capsys.readouterr().err
        assert info["heap"] in Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        assert info["heap"] == f"-Xmx{sized.heap_mb}m" == "-Xmx2304m"
        assert f"sizing: heap={info['heap']} nofile={info['nofile']}" in out
    finally:
        run("down", "--dir", d, "--purge")
