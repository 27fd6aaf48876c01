"""A container broker's log dir on the host's disk (issue 32): its path mapped through both mountinfos, in the kernel's
format for Docker and Kubernetes layouts, and for a real process in a mount namespace of its own with a bind mount."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.waiting import wait_until

from kdiag.collectors.host.processes import ProcessesCollector, log_dir_samples
from kdiag.core.mountinfo import Placed, host_path, parse_mountinfo, place
from kdiag.core.root import Root, SnapshotRoot, TeeRoot

# The host: sda2 the root disk, sdb (8:16) mounted at /data, a kubelet local volume on sdc (8:32).
HOST = """\
22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 8:16 / /data rw,noatime shared:30 - xfs /dev/sdb rw,attr2,inode64,logbufs=8,logbsize=32k,noquota
25 22 8:32 / /mnt/disks/ssd0 rw,relatime shared:31 - ext4 /dev/sdc rw
26 22 8:32 / /var/lib/kubelet/pods/6b2f0f3e-5a1d-4c8e-9f7a-2d3c4b5a6e7f/volumes/kubernetes.io~local-volume/pv-0 \
rw,relatime shared:31 - ext4 /dev/sdc rw
27 22 8:16 /with\\040space /srv/with\\040space rw shared:32 - xfs /dev/sdb rw
"""
# `docker run -v /data/kafka:/var/lib/kafka/data apache/kafka`: its root an overlay, its log dir sdb's /kafka.
DOCKER = """\
812 733 0:66 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/\
overlay2/l/DEF,upperdir=/var/lib/docker/overlay2/0123/diff,workdir=/var/lib/docker/overlay2/0123/work
813 812 0:70 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
822 812 8:2 /var/lib/docker/containers/0123/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/sda2 rw
825 812 8:16 /kafka /var/lib/kafka/data rw,noatime - xfs /dev/sdb rw,attr2,inode64,logbufs=8,logbsize=32k,noquota
"""
# A Strimzi pod's broker on a local persistent volume: the kubelet's bind of sdc at /var/lib/kafka/data-0.
KUBERNETES = """\
1402 1303 0:88 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/containerd/snapshots/12/fs,upperdir=/var/lib/\
containerd/snapshots/13/fs,workdir=/var/lib/containerd/snapshots/13/work
1410 1402 8:32 / /var/lib/kafka/data-0 rw,relatime - ext4 /dev/sdc rw
1411 1402 8:2 /var/lib/kubelet/pods/6b2f0f3e-5a1d-4c8e-9f7a-2d3c4b5a6e7f/etc-hosts /etc/hosts rw - ext4 /dev/sda2 rw
"""


@pytest.mark.parametrize(("theirs", "path", "expected"), [
    (DOCKER, "/var/lib/kafka/data", "/data/kafka"),  # not / on sda, as the host's mounts alone would say
    (DOCKER, "/var/lib/kafka/data/orders-0", "/data/kafka/orders-0"),
    (DOCKER, "/opt/kafka/logs", None),  # the container's overlay: not a directory the host mounts
    (KUBERNETES, "/var/lib/kafka/data-0/kafka-log1", "/mnt/disks/ssd0/kafka-log1"),  # sdc's own mount, not the bind
    (HOST, "/data/kafka-logs", "/data/kafka-logs"),  # a broker on the host: its paths are the host's
    (HOST, "/srv/with space/k", "/srv/with space/k"),
])
def test_a_path_in_a_brokers_mount_namespace_is_found_on_the_hosts_mounts(theirs, path, expected):
    assert host_path(parse_mountinfo(theirs), parse_mountinfo(HOST), path) == expected


def test_a_volume_this_host_does_not_mount_is_named_by_its_disk(tmp_path):
    # kdiag in a pod of its own (a DaemonSet): its mounts have no /data, the broker's volume is still sdb's.
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "4242").mkdir()
    (tmp_path / "proc" / "self" / "mountinfo").write_text(HOST.splitlines()[0] + "\n")
    (tmp_path / "proc" / "4242" / "mountinfo").write_text(DOCKER)
    (tmp_path / "proc" / "mounts").write_text("/dev/sda2 / ext4 rw,relatime 0 0\n")
    (tmp_path / "sys" / "block" / "sdb").mkdir(parents=True)
    (tmp_path / "sys" / "dev" / "block").mkdir(parents=True)
    os.symlink("../../block/sdb", tmp_path / "sys" / "dev" / "block" / "8:16")
    root = Root(tmp_path / "proc", tmp_path / "sys")
    placed = place(root, 4242, ["/var/lib/kafka/data", "/opt/kafka/logs"])
    rootfs = f"{tmp_path}/proc/4242/root"
    assert placed == [Placed("/var/lib/kafka/data", "8:16", "/dev/sdb", "xfs", "/var/lib/kafka/data", rootfs),
                      Placed("/opt/kafka/logs", "0:66", "overlay", "overlay", "/", rootfs)]
    assert [dict(s.labels) for s in log_dir_samples(root, placed)] == [
        {"path": "/var/lib/kafka/data", "device": "sdb", "mountpoint": f"{rootfs}/var/lib/kafka/data"},
        {"path": "/opt/kafka/logs", "device": "overlay", "mountpoint": f"{rootfs}/"}]


def test_this_machines_mountinfo_parses_and_maps_onto_itself():
    text = (Path(__file__).parents[1] / "fixtures" / "mountinfo-vm.txt").read_text()
    mounts = parse_mountinfo(text)
    assert [(m.device, m.mountpoint, m.fstype) for m in mounts if m.mountpoint == "/"] == [("254:0", "/", "ext4")]
    assert host_path(mounts, mounts, "/var/lib/kafka") == "/var/lib/kafka"


def test_a_malformed_line_names_its_file_and_line():
    with pytest.raises(ValueError, match=r"/proc/9/mountinfo line 2: unexpected line"):
        parse_mountinfo(HOST.splitlines()[0] + "\n24 22 8:16 / /data rw\n", "/proc/9/mountinfo")


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a mount namespace and a bind mount need root")
def test_a_broker_in_its_own_mount_namespace_has_its_log_dir_on_the_hosts_device(tmp_path):
    # The host directory on another filesystem (tmpfs) than the path the broker sees it at (on the root disk).
    host_dir = Path("/dev/shm") / f"kdiag-test-{os.getpid()}"
    segment = "orders-0/00000000000000000000.log"
    (host_dir / "orders-0").mkdir(parents=True)
    (host_dir / segment).write_text("")
    inside = tmp_path / "var-lib-kafka-data"  # where the container mounts it
    inside.mkdir()
    script = (f"mount --make-rprivate / && mount --bind {host_dir} {inside} && "
              f"exec -a java /bin/sh -c 'exec 3<{inside}/{segment}; sleep 600; :' kafka.Kafka /etc/kafka/server.properties")
    # unshare and bash exec: the process started is the broker's, its one child the sleep.
    proc = subprocess.Popen(["unshare", "--mount", "--", "/bin/bash", "-c", script])
    pid = proc.pid
    try:
        wait_until(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"java\0"), 30, "the namespaced broker")
        wait_until(lambda: any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith(segment)
                               for fd in os.listdir(f"/proc/{pid}/fd")), 30, "its open segment")
        snapshot = tmp_path / "rec" / "0000"
        tee = TeeRoot(Root(), snapshot)
        infos = log_dir_infos(tee)
        (snapshot / "meta.json").write_text(json.dumps({"time": tee.now()}))
    finally:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        proc.kill()
        proc.wait()
        for child in children:
            os.kill(int(child), 9)
        shutil.rmtree(host_dir)
    # Other brokers on this machine (labs) have theirs: this one's is the host directory, on tmpfs, never the root disk.
    ours = [i for i in infos if i["path"] in (str(host_dir), str(inside))]
    assert ours == [{"path": str(host_dir), "device": "tmpfs", "mountpoint": "/dev/shm"}]
    # The recording keeps the broker's mountinfo: its replay, here or anywhere, maps it alike.
    assert (snapshot / "proc" / str(pid) / "mountinfo").is_file()
    assert log_dir_infos(SnapshotRoot(snapshot)) == infos


def log_dir_infos(root: Root) -> list[dict[str, str]]:
    collector = ProcessesCollector(broker_user="root")
    return [dict(s.labels) for s in collector.collect(root) if s.name == "kdiag_kafka_log_dir_info"]
