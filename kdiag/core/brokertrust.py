"""Which kafka.Kafka processes kdiag takes for brokers: root's, kafka.broker_user's, or started by root.

A local user can start a process whose command line reads like a broker's, in namespaces of its own making too; it
cannot put it in a cgroup outside its own session (user.slice) nor make a root-owned process its parent. So a process
is a broker when it runs as root or kafka.broker_user, or when its cgroup is a system service's or a container's and
its ancestry (through processes of its own cgroup and of its own uid or root) reaches PID 1 or a root-owned container
runtime (containerd-shim, conmon, runc, crun). Every fact is read through the Root, so a recording keeps them and a
replay decides as the live daemon did: the uids' names too (the `users` state in kafka.json). A recording made before
kdiag kept them has no cgroups nor names: its processes are judged by their uids and ancestry, and the reason says so.
"""

from __future__ import annotations

import logging
import pwd
import re
from collections.abc import Iterable
from typing import NamedTuple

from kdiag.core.archive import KAFKA_STATE_VERSION, StateError
from kdiag.core.procfs import process_uids
from kdiag.core.quote import quote
from kdiag.core.root import Root

USERS_SOURCE = "users"  # not a file: recordings keep the uids' names with the other non-file states in kafka.json
RUNTIMES = frozenset({"containerd-shim", "conmon", "runc", "crun"})  # comm: containerd-shim-runc-v2 is cut to 15
MAX_ANCESTORS = 64
MAX_NAME = 64
_SCOPE = re.compile(r"(?:docker|cri-containerd|crio|libpod)-([0-9a-f]{64})\.scope")
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
_POD = re.compile(r"(?:kubepods-(?:[a-z]+-)?)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
                  r"(?:\.slice)?")
_PLAIN = re.compile(r"[A-Za-z0-9_.@:/-][A-Za-z0-9_.@:/$-]*")
_USER_MANAGER = re.compile(r"user@\d+\.service")
log = logging.getLogger(__name__)


class Workload(NamedTuple):
    """What a cgroup path says started a process: a system service, a container (and its pod), or neither ("")."""

    kind: str
    name: str = ""  # the unit (confluent-server.service) or the container id
    pod: str = ""  # the Kubernetes pod UID, as the API shows it


class Verdict(NamedTuple):
    """Whether a kafka.Kafka process is a broker kdiag trusts, and why (or why not)."""

    trusted: bool
    why: str
    workload: Workload = Workload("")


def parse_cgroup(text: str) -> str:
    """The process's cgroup path: the unified (v2) hierarchy's, else systemd's v1 one, else the first v1 controller's
    that says more than "/" (a host without systemd); "/" when none does."""
    paths = {}
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        paths[controllers] = path
    ordered = [paths.get("", "/"), paths.get("name=systemd", "/"), *paths.values()]
    return next((p for p in ordered if p and p != "/"), "/")


def workload(path: str) -> Workload:
    """The service or container a cgroup path belongs to; Workload("") for a user's session, the root or anything else.

    A kdiag in a cgroup namespace of its own (a Kubernetes pod) sees other cgroups as /../../<below the common
    ancestor>: the leading ".." are dropped, and what is left still shows a user's session wherever it is."""
    parts = [p for p in path.split("/") if p]
    while parts and parts[0] == "..":
        parts.pop(0)
    if not parts or "user.slice" in parts or ".." in parts:
        return Workload("")
    pod = next((m[1].replace("_", "-") for p in parts if (m := _POD.fullmatch(p))), "")
    for i, part in enumerate(parts):
        if m := _SCOPE.fullmatch(part):
            return Workload("container", m[1], pod)
        # cgroupfs drivers: /docker/<id>, /kubepods/burstable/pod<uid>/<id>
        if _CONTAINER_ID.fullmatch(part) and i and (pod or parts[i - 1] == "docker"):
            return Workload("container", part, pod)
    service = next((p for p in parts if p.endswith(".service") and not _USER_MANAGER.fullmatch(p)), "")
    return Workload("service", service) if service else Workload("")


def parse_users(state: object, version: int) -> dict[int, str]:
    """The recorded {uid: name} state; StateError when it is not one."""
    if not isinstance(state, dict):
        raise StateError("", "expected an object of uid: name")
    out = {}
    for uid, name in state.items():
        if not (isinstance(uid, str) and uid.isdigit() and len(uid) <= 10 and isinstance(name, str)
                and 0 < len(name) <= MAX_NAME and name.isprintable()):
            raise StateError(quote(uid, 20), "expected a uid and a user name")
        out[int(uid)] = name
    return out


def _host_names(uids: Iterable[int], user: str) -> dict[str, str]:
    out = {}
    for uid in uids:
        try:
            out[str(uid)] = pwd.getpwuid(uid).pw_name
        except KeyError:
            continue
    try:
        entry = pwd.getpwnam(user)
        out[str(entry.pw_uid)] = user
    except KeyError:
        pass
    return out


def user_names(root: Root, uids: Iterable[int], user: str) -> dict[int, str] | None:
    """{uid: name} of uids and of the user name, on the host root reads (as recorded, in a replay); None for a
    recording made before kdiag kept them."""
    wanted = sorted(set(uids))
    try:
        state = root.kafka(USERS_SOURCE, lambda: _host_names(wanted, user))
    except KeyError:
        return None
    try:
        return parse_users(state, KAFKA_STATE_VERSION)
    except StateError as e:  # a hostile recording: its uids stay nameless
        log.warning("the recorded users state is not one (%s): uids are judged without names", e)
        return {}


def who(uid: int, names: dict[int, str] | None) -> str:
    """uid N (name), or uid N when the host has no name for it."""
    name = "root" if uid == 0 else (names or {}).get(uid)
    return f"uid {uid} ({shown(name, MAX_NAME)})" if name else f"uid {uid}"


def shown(text: str, limit: int = 200) -> str:
    """A name or path from outside as it is, when it is plain; quoted (escaped, cut) otherwise."""
    return text if len(text) <= limit and _PLAIN.fullmatch(text) else quote(text, limit)


class BrokerTrust:
    """The trust rule, with kafka.broker_user (a name or a uid) as the configured user."""

    def __init__(self, broker_user: str = "kafka"):
        self.broker_user = broker_user

    def judge_all(self, root: Root, pids: Iterable[int]) -> dict[int, Verdict]:
        """The verdict on each of pids (kafka.Kafka processes), the uids' names read once for all of them."""
        owners: dict[int, tuple[int, ...] | OSError | ValueError] = {}
        for pid in pids:
            try:
                owners[pid] = process_uids(root, pid)
            except (OSError, ValueError) as e:
                owners[pid] = e
        names = user_names(root, {u for uids in owners.values() if isinstance(uids, tuple) for u in uids},
                           self.broker_user)
        out = {}
        for pid, uids in owners.items():
            if isinstance(uids, tuple):
                out[pid] = self._judge(root, pid, uids, names)
            else:
                out[pid] = Verdict(False, f"its owner cannot be read ({getattr(uids, 'strerror', None) or uids})")
        return out

    def configured_uid(self, names: dict[int, str] | None) -> int | None:
        """kafka.broker_user's uid on the host judged (as recorded, in a replay), None when it has none."""
        if self.broker_user.isdigit():
            return int(self.broker_user)
        return next((uid for uid, name in sorted((names or {}).items()) if name == self.broker_user), None)

    def trusted_users(self, names: dict[int, str] | None) -> str:
        """Who kdiag trusts by uid, in words."""
        uid = self.configured_uid(names)
        if uid is None:
            return f"root (kafka.broker_user {self.broker_user}: no such user on the host)"
        return f"root and kafka.broker_user {self.broker_user} (uid {uid})"

    def _judge(self, root: Root, pid: int, uids: tuple[int, ...], names: dict[int, str] | None) -> Verdict:
        configured = self.configured_uid(names)
        # A setuid program keeps its caller's real uid: each of the four must be trusted.
        stranger = next((u for u in uids if u not in {0, configured}), None)
        if stranger is None:
            return Verdict(True, "it runs as root" if set(uids) == {0} else f"it runs as kafka.broker_user "
                           f"{self.broker_user}")
        runs_as = f"it runs as {who(stranger, names)}, not as {self.trusted_users(names)}"
        try:
            cgroup: str | None = parse_cgroup(root.read_proc(f"{pid}/cgroup"))
        except OSError as e:
            if names is not None:
                return Verdict(False, f"{runs_as}, and its cgroup cannot be read ({e.strerror or e})")
            cgroup = None  # a recording made before kdiag kept cgroups: judged by its ancestry alone
        work = workload(cgroup) if cgroup is not None else Workload("")
        if cgroup is not None and not work.kind:
            return Verdict(False, f"{runs_as}, and its cgroup {shown(cgroup)} is neither a system service's nor "
                           "a container's (a process a local user started)", work)
        starter, why_not = _starter(root, pid, cgroup, set(uids) | {0}, names)
        if not starter:
            return Verdict(False, f"{runs_as}, and {why_not}", work)
        if cgroup is None:
            return Verdict(True, f"{starter} started it (recorded without its cgroup: judged by its ancestry)")
        what = f"container {work.name[:12]}" + (f" of pod {work.pod}" if work.pod else "") \
            if work.kind == "container" else f"system service {shown(work.name)}"
        return Verdict(True, f"{starter} started it, in {what}", work)


def _parent(root: Root, pid: int) -> tuple[int, str]:
    """(the parent's pid, the process's comm) from /proc/PID/stat."""
    text = root.read_proc(f"{pid}/stat")
    head, _, tail = text.rpartition(")")
    return int(tail.split()[1]), head.partition("(")[2]


def _starter(root: Root, pid: int, cgroup: str | None, own: set[int],
             names: dict[int, str] | None) -> tuple[str, str]:
    """(what started the process: PID 1 or a root-owned runtime, or ""; why not): its ancestors are walked through
    processes running as its uid or root, of its own cgroup (any, without one: an old recording)."""
    child = pid
    for _ in range(MAX_ANCESTORS):
        try:
            ppid = _parent(root, child)[0]
            if ppid == 1:
                return "PID 1", ""
            if ppid <= 0:
                return "", f"pid {child} has no parent"
            comm = _parent(root, ppid)[1]
            uids = process_uids(root, ppid)
        except (OSError, ValueError, IndexError):
            return "", f"its ancestry cannot be read past pid {child}"
        ancestor = f"pid {ppid} ({quote(comm, 40)}, {who(uids[0], names)})"
        if comm in RUNTIMES and set(uids) == {0}:
            return f"root's {comm} (pid {ppid})", ""
        try:
            same = cgroup is None or parse_cgroup(root.read_proc(f"{ppid}/cgroup")) == cgroup
        except OSError:
            same = False
        if not same or not set(uids) <= own:
            return "", f"its ancestor {ancestor} is neither PID 1 nor a root-owned containerd-shim, conmon or runc"
        child = ppid
    return "", f"its ancestry is deeper than {MAX_ANCESTORS} processes"
