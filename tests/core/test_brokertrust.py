"""The one broker trust rule (issues 32, 35): cgroup layouts in the kernel's format, and real processes in real
cgroups and namespaces: a service's or a container's broker is trusted whoever it runs as; a look-alike a local user
starts (in its session's cgroup, in namespaces of its own making, reparented to PID 1) is not."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.waiting import wait_until

from kdiag.collectors.host.processes import ProcessesCollector
from kdiag.core.brokertrust import BrokerTrust, Workload, parse_cgroup, workload
from kdiag.core.root import Root

CONTAINER = "4f1c9a0e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a10"
POD = "6b2f0f3e-5a1d-4c8e-9f7a-2d3c4b5a6e7f"
# /proc/self/cgroup of a shell on this project's VM (a hybrid hierarchy: v1 controllers, name=systemd, and v2)
THIS_HOST = ("9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n"
             "4:memory:/process_api/3bc0fa36929287b37f28ada3997920e3\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n")


@pytest.mark.parametrize(("text", "expected"), [
    (THIS_HOST, Workload("")),
    ("0::/system.slice/confluent-server.service\n", Workload("service", "confluent-server.service")),
    ("0::/system.slice/kafka.service/init.scope\n", Workload("service", "kafka.service")),
    (f"0::/system.slice/docker-{CONTAINER}.scope\n", Workload("container", CONTAINER)),
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/"
     f"cri-containerd-{CONTAINER}.scope\n", Workload("container", CONTAINER, POD)),
    (f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CONTAINER}.scope\n",
     Workload("container", CONTAINER, POD)),
    # cgroup v1 with the cgroupfs driver: the systemd hierarchy says it
    (f"12:memory:/kubepods/burstable/pod{POD}/{CONTAINER}\n1:name=systemd:/kubepods/burstable/pod{POD}/{CONTAINER}\n"
     "0::/\n", Workload("container", CONTAINER, POD)),
    (f"4:cpu:/docker/{CONTAINER}\n1:name=systemd:/docker/{CONTAINER}\n", Workload("container", CONTAINER)),
    (f"5:memory:/docker/{CONTAINER}\n4:cpu:/docker/{CONTAINER}\n", Workload("container", CONTAINER)),  # no systemd
    (f"0::/machine.slice/libpod-{CONTAINER}.scope/container\n", Workload("container", CONTAINER)),
    # a local user's: its session, its own service manager, rootless Podman under it
    ("0::/user.slice/user-1000.slice/session-3.scope\n", Workload("")),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/kafka.service\n", Workload("")),
    (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CONTAINER}.scope\n", Workload("")),
    ("0::/\n", Workload("")),
    # seen from a kdiag in a pod's own cgroup namespace: the path below the common ancestor
    (f"0::/../../kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n",
     Workload("container", CONTAINER, POD)),
    ("0::/../../../system.slice/kafka.service\n", Workload("service", "kafka.service")),
    ("0::/../../../user.slice/user-1000.slice/user@1000.service/app.slice/kafka.service\n", Workload("")),
    (f"0::/../../user.slice/user-1000.slice/user@1000.service/libpod-{CONTAINER}.scope\n", Workload("")),
    ("0::/system.slice/../user.slice/kafka.service\n", Workload("")),
])
def test_a_cgroup_path_says_what_started_the_process(text, expected):
    assert workload(parse_cgroup(text)) == expected


# -- real processes ------------------------------------------------------------------------------------------------

live = [pytest.mark.integration,
        pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
                           reason="real cgroups and other users' processes need root, setpriv and unshare")]


def live_test(f):
    """A test on real processes of other users in real cgroups."""
    for mark in live:
        f = mark(f)
    return f
BROKER_UID = 995  # Confluent's and many packages' system user: no such user on this machine
USER_UID = 1000  # an ordinary local user
# `exec -a java`: a shell whose argv is a broker's ("sleep; :" keeps the shell from exec'ing sleep); any user runs it
LOOK_ALIKE = "/bin/bash -c \"exec -a java /bin/sh -c 'sleep 600; :' kafka.Kafka /etc/kafka/server.properties\""


def cgroup2() -> Path:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    pytest.skip("no cgroup v2 hierarchy mounted")


@pytest.fixture
def cgroups() -> Iterator[list[Path]]:
    """The cgroups a test made (the top one of each path it created), emptied and removed after."""
    made: list[Path] = []
    yield made
    for top in reversed(made):
        for cg in sorted((top, *(p for p in top.rglob("*") if p.is_dir())), key=lambda p: -len(p.parts)):
            for pid in (cg / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            wait_until(lambda cg=cg: not (cg / "cgroup.procs").read_text().strip(), 30, f"{cg} to empty")
            cg.rmdir()


def make_cgroup(made: list[Path], rel: str) -> Path:
    """cgroup2()/rel, its directories made as needed (the top one made is removed after the test)."""
    path = cgroup2()
    for part in rel.split("/"):
        path = path / part
        if not path.exists():
            path.mkdir()
            if not any(m in path.parents for m in made):
                made.append(path)
    return path


def start(script: str, cgroup: Path, tmp_path: Path, detach: bool) -> int:
    """The pid of a process `script` runs in cgroup; detached: reparented to PID 1 (its starter exits)."""
    pidfile, body = tmp_path / f"pid-{secrets.token_hex(4)}", tmp_path / f"start-{secrets.token_hex(4)}.sh"
    body.write_text(f"echo $$ > {cgroup}/cgroup.procs\n" + (f"( {script} ) &\necho $! > {pidfile}\n" if detach
                                                            else f"echo $$ > {pidfile}\n{script}\n"))
    subprocess.Popen(["/bin/sh", str(body)], start_new_session=True, stdin=subprocess.DEVNULL)
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, "the process's pid"))
    if detach:
        wait_until(lambda: parent(pid) == 1, 30, "its reparenting to PID 1")
    return pid


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def look_alike_in(cgroup: Path) -> int:
    """The pid of the kafka.Kafka look-alike in cgroup, once there is one."""
    return int(wait_until(lambda: next((p for p in (cgroup / "cgroup.procs").read_text().split()
                                        if Path(f"/proc/{p}/cmdline").read_text().startswith("java\0")), None),
                          30, f"a look-alike in {cgroup}"))


def as_user(uid: int, command: str) -> str:
    return f"setpriv --reuid={uid} --regid={uid} --clear-groups -- {command}"


def judge(pid: int, broker_user: str = "kafka"):
    return BrokerTrust(broker_user).judge_all(Root(), [pid])[pid]


@live_test
def test_a_system_services_broker_is_trusted_whoever_runs_it(cgroups, tmp_path):
    unit = f"kdiag-test-{secrets.token_hex(3)}.service"
    cg = make_cgroup(cgroups, f"system.slice/{unit}")
    start(as_user(BROKER_UID, LOOK_ALIKE), cg, tmp_path, detach=True)
    verdict = judge(look_alike_in(cg))
    assert verdict.trusted, verdict.why
    assert verdict.why == f"PID 1 started it, in system service {unit}"


@live_test
def test_a_services_cgroup_alone_is_not_enough_root_must_have_started_it(cgroups, tmp_path):
    cg = make_cgroup(cgroups, f"system.slice/kdiag-test-{secrets.token_hex(3)}.service")
    # Started by a shell of root's in another cgroup (no service manager): the service's cgroup, no PID 1 parent.
    shell = tmp_path / "shell.sh"
    shell.write_text(f"{as_user(BROKER_UID, LOOK_ALIKE)} &\nwait\n")
    starter = start(f"exec /bin/sh {shell}", cg, tmp_path, detach=True)
    (cgroup2() / "cgroup.procs").write_text(str(starter))  # the starter leaves: its child stays in the service
    verdict = judge(look_alike_in(cg))
    assert not verdict.trusted
    assert verdict.why == (f"it runs as uid {BROKER_UID}, not as root (kafka.broker_user kafka: no such user on the "
                           f"host), and its ancestor pid {starter} ('sh', uid 0 (root)) is neither PID 1 nor a "
                           "root-owned containerd-shim, conmon or runc")


@live_test
def test_a_containers_broker_in_its_own_namespaces_is_trusted(cgroups, tmp_path):
    shim = tmp_path / "containerd-shim"  # a root process of that name: only root can make one
    shutil.copy("/bin/sh", shim)
    cg = make_cgroup(cgroups, f"system.slice/docker-{CONTAINER}.scope")
    container = tmp_path / "container.sh"
    container.write_text(f"echo $$ > {cg}/cgroup.procs\nexec unshare --pid --mount --uts --ipc --fork --kill-child -- "
                         f"{as_user(1001, LOOK_ALIKE)}\n")
    shim.with_suffix(".sh").write_text(f"{shim} {container} &\nwait\n")
    pid = start(f"exec {shim} {shim.with_suffix('.sh')}", cg.parent, tmp_path, detach=True)
    verdict = judge(look_alike_in(cg))
    assert verdict.trusted, verdict.why
    assert verdict.why == f"root's containerd-shim (pid {pid}) started it, in container {CONTAINER[:12]}"
    assert verdict.workload == Workload("container", CONTAINER)
    # The processes collector names its container (and the pod, when the cgroup has one).
    samples = ProcessesCollector(broker_user="kafka").collect(Root())
    (started,) = [dict(s.labels) for s in samples if s.name == "kdiag_process_broker_started_by"
                  and dict(s.labels)["pid"] == str(look_alike_in(cg))]
    assert (started["container"], started["pod"], started["service"]) == (CONTAINER, "", "")


@live_test
def test_a_local_users_look_alike_is_refused_in_namespaces_of_its_own_making(cgroups, tmp_path):
    session = make_cgroup(cgroups, f"user.slice/user-{USER_UID}.slice/session-kdiag{secrets.token_hex(3)}.scope")
    own = f"unshare --user --map-root-user --pid --mount --fork -- {LOOK_ALIKE}"
    start(as_user(USER_UID, own), session, tmp_path, detach=True)  # reparented to PID 1 as well
    verdict = judge(look_alike_in(session))
    assert not verdict.trusted
    assert verdict.why.startswith(f"it runs as uid {USER_UID}")
    rel = "/" + session.relative_to(cgroup2()).as_posix()
    assert verdict.why.endswith(f"and its cgroup {rel} is neither a system service's nor a container's (a process a "
                                "local user started)")
