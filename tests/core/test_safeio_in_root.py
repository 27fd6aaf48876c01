"""Reading a container broker's files through /proc/PID/root (issue 32): its links name its own files, never this
host's; `..` stops at its root; what is not a regular file is refused."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from kdiag.core.safeio import read_in_root
from kdiag.runtime.discovery import find_brokers
from kdiag.core.root import Root

LIMIT = 1 << 20


@pytest.fixture
def container(tmp_path: Path) -> Path:
    """A root filesystem as a container's: /etc/kafka with the file the image generated, and a host file beside it."""
    base = tmp_path / "rootfs"
    (base / "etc" / "kafka").mkdir(parents=True)
    (base / "etc" / "kafka" / "kafka.properties").write_text("node.id=1\n")
    (tmp_path / "host-secret").write_text("host's\n")  # outside the container's root
    return base


@pytest.mark.parametrize("link", ["/etc/kafka/kafka.properties", "kafka.properties", "../../../../etc/kafka/kafka.properties",
                                  "../../../../../../../../etc/./kafka/../kafka/kafka.properties"])
def test_links_resolve_inside_the_root(container, link):
    os.symlink(link, container / "etc" / "kafka" / "server.properties")
    assert read_in_root(str(container), "/etc/kafka/server.properties", LIMIT) == b"node.id=1\n"
    assert read_in_root(str(container), "/../../etc/kafka/server.properties", LIMIT) == b"node.id=1\n"


def test_an_absolute_link_to_a_host_file_never_reads_it(container):
    secret = container.parent / "host-secret"
    os.symlink(str(secret), container / "etc" / "kafka" / "server.properties")  # the host's path, from inside
    os.symlink("/", container / "etc" / "up")
    with pytest.raises(FileNotFoundError):
        read_in_root(str(container), "/etc/kafka/server.properties", LIMIT)
    with pytest.raises(FileNotFoundError):
        read_in_root(str(container), f"/etc/up/..{secret}", LIMIT)


def test_loops_fifos_directories_and_large_files_are_refused(container):
    os.symlink("b", container / "etc" / "a")
    os.symlink("a", container / "etc" / "b")
    os.mkfifo(container / "etc" / "fifo")
    (container / "etc" / "big").write_bytes(b"x" * 11)
    for path, code in [("/etc/a", errno.ELOOP), ("/etc/fifo", errno.EINVAL), ("/etc/kafka", errno.EINVAL),
                       ("/etc/big", errno.EFBIG), ("/", errno.EISDIR)]:
        with pytest.raises(OSError) as e:
            read_in_root(str(container), path, 10)
        assert e.value.errno == code, path


def test_discovery_reads_a_brokers_config_inside_its_root(tmp_path, container):
    # A process tree whose broker's /proc/PID/root is the container's root (a live Root over a fixture tree).
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_text("java\0-cp\0/opt/kafka/libs/*\0kafka.Kafka\0/etc/kafka/server.properties\0")
    os.symlink("/", proc / "4242" / "cwd")
    os.symlink(str(container), proc / "4242" / "root")
    os.symlink(str(tmp_path / "host-secret"), container / "etc" / "kafka" / "server.properties")
    (broker,) = find_brokers(Root(proc, tmp_path / "sys"))
    assert broker.node_id is None and broker.problems[0].startswith("cannot read its server.properties")
    (container / "etc" / "kafka" / "server.properties").unlink()
    os.symlink("/etc/kafka/kafka.properties", container / "etc" / "kafka" / "server.properties")
    (broker,) = find_brokers(Root(proc, tmp_path / "sys"))
    assert broker.node_id == 1
