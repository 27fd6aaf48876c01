"""The recorded Kafka states (kdiag/kafka/state.py): every recording in tests/ reads back into the types, and a state of
another version or shape is refused naming the file and the key."""

from __future__ import annotations

import copy
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kdiag.collectors.host.loadavg import LoadavgCollector
from kdiag.collectors.kafka.admin import KafkaAdminCollector
from kdiag.collectors.kafka.jmx import KafkaJmxCollector
from kdiag.core.archive import KAFKA_STATE_VERSION
from kdiag.core.root import Root, SnapshotRoot
from kdiag.kafka.state import ADMIN, JMX, read_admin_state, read_jmx_state
from kdiag.collectors.kafka.probe_samples import SOURCE as PROBE, read_probe_state
from kdiag.recording.recording import Recording, record
from kdiag.runtime.pipeline import CollectorSet
from tests import paths

pytestmark = pytest.mark.unit

TESTS = paths.TESTS
FIXTURES = TESTS / "fixtures" / "kafka"
READERS: dict[str, Callable[[object, int], object]] = {ADMIN: read_admin_state, JMX: read_jmx_state,
                                                      PROBE: read_probe_state}
# Host states recordings keep in kafka.json too; their readers check them (statvfs.py, loadgen.py, brokertrust.py).
CHECKED_BY_COLLECTOR = {"statvfs", "loadgen", "users"}
RECORDINGS = sorted(p for p in (TESTS / "recordings").iterdir() if p.is_dir() or p.name.endswith(".tar.gz"))


def not_live() -> object:
    raise AssertionError("a snapshot never fetches")


def snapshot(tmp_path: Path, kafka: object) -> Path:
    """A snapshot directory whose kafka.json holds `kafka`."""
    (tmp_path / "meta.json").write_text('{"time": 1764430000.0}')
    (tmp_path / "kafka.json").write_text(json.dumps(kafka))
    return tmp_path


def admin_fixture() -> dict:
    return json.loads((FIXTURES / "admin-state.json").read_text())


def test_a_recording_keeps_the_states_at_the_current_version_and_replays_the_same_samples(tmp_path: Path) -> None:
    admin, jmx = KafkaAdminCollector("127.0.0.1:1"), KafkaJmxCollector(["127.0.0.1:1"], classpath="unused")
    admin.fetch = admin_fixture  # type: ignore[method-assign]
    jmx.fetch = lambda: json.loads((FIXTURES / "jmx-state.json").read_text())  # type: ignore[method-assign]
    host = TESTS / "fixtures" / "host-vm2"
    live = Root(host / "proc", host / "sys", clock=lambda: 1764430000.0)
    out = record(tmp_path / "rec", 0, 1, CollectorSet([LoadavgCollector(), admin, jmx]), live, progress=lambda m: None)
    kafka = json.loads((out / "0000" / "kafka.json").read_text())
    assert kafka["version"] == KAFKA_STATE_VERSION and set(kafka["sources"]) == {ADMIN, JMX}
    [replayed] = Recording(out).roots()
    for collector in (admin, jmx):
        assert collector.collect(replayed) == collector.collect(live)


def snapshots(recording: Path, tmp_path: Path) -> list[Path]:
    """The snapshot directories of a recording; of an archive only their meta.json and kafka.json, taken out to tmp_path
    (extracting the whole of the real-host archives takes half a minute)."""
    if recording.is_dir():
        return [p for p in sorted(recording.iterdir()) if (p / "meta.json").exists()]
    with tarfile.open(recording, "r|gz") as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(("/meta.json", "/kafka.json")):
                target = tmp_path / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    return sorted(p.parent for p in tmp_path.rglob("meta.json"))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_every_recording_reads_back_into_the_types(path: Path, tmp_path: Path) -> None:
    sources = [(root, source) for root in map(SnapshotRoot, snapshots(path, tmp_path)) for source in root.kafka_sources]
    for root, source in sources:
        assert source in READERS or source in CHECKED_BY_COLLECTOR
        if source in READERS:
            assert root.kafka(source, not_live, READERS[source]) == root.kafka_sources[source]
    assert sources or path.is_dir()  # the archived recordings were taken live, with a kafka.json per snapshot


@pytest.mark.parametrize(("name", "source"), [("admin-state.json", ADMIN), ("jmx-state.json", JMX)])
def test_the_state_fixtures_are_of_the_current_version_exactly(name: str, source: str, tmp_path: Path) -> None:
    state = json.loads((FIXTURES / name).read_text())
    root = SnapshotRoot(snapshot(tmp_path, {"version": KAFKA_STATE_VERSION, "sources": {source: state}}))
    assert root.kafka(source, not_live, READERS[source]) == state  # no key left out: each is of its type


def test_version_1_admin_state_with_lag_per_partition_reads_as_the_current_one(tmp_path: Path) -> None:
    current = admin_fixture()
    old = copy.deepcopy(current) | {"version": 1}
    old["consumer_groups"]["admintest-lag"]["lag"] = {"admintest-balanced": {"0": 20, "1": 23, "2": 0, "3": 22, "4": 2,
                                                                             "5": 13}}
    root = SnapshotRoot(snapshot(tmp_path, {"version": 1, "sources": {ADMIN: old}}))
    assert current["consumer_groups"]["admintest-lag"]["lag"] == {"admintest-balanced": {"sum": 80, "max": 23}}
    assert root.kafka(ADMIN, not_live, read_admin_state) == current


def test_version_1_states_of_their_own_current_shape_read_as_they_are() -> None:
    jmx = json.loads((FIXTURES / "jmx-state.json").read_text())
    assert read_admin_state(admin_fixture() | {"version": 2}, 1) == admin_fixture()
    assert read_jmx_state(jmx | {"version": 1}, 1) == jmx


@pytest.mark.parametrize(("kafka", "said"), [
    ({"version": KAFKA_STATE_VERSION + 1, "sources": {}}, f"version {KAFKA_STATE_VERSION + 1} is not a kafka.json version"),
    ({"version": "2", "sources": {}}, "version '2' is not a kafka.json version"),
    ({"version": True, "sources": {}}, "version True is not a kafka.json version"),
    ({"sources": {}}, "version None is not a kafka.json version"),
    ({"version": 1, "sources": {ADMIN: {"cluster_id": "c"}}}, "sources.admin.version: None is not one of 1, 2"),
    ({"version": 1, "sources": {JMX: {"version": 2, "endpoints": {}}}}, "sources.jmx.version: 2 is not one of 1"),
])
def test_a_kafka_json_of_another_version_is_refused_naming_the_file_and_key(kafka: dict, said: str, tmp_path: Path) -> None:
    root = SnapshotRoot(snapshot(tmp_path, kafka))
    source = next(iter(kafka["sources"]), ADMIN)
    with pytest.raises(ValueError, match="^" + str(tmp_path / "kafka.json")) as refused:
        root.kafka(source, not_live, READERS[source])
    assert said in str(refused.value)


def wrong(path: list[str | int], value: object) -> dict:
    """The admin fixture with the value at path replaced (or its key removed when value is ...)."""
    state = admin_fixture()
    *parents, last = path
    where = state
    for key in parents:
        where = where[key]
    if value is ...:
        del where[last]
    else:
        where[last] = value
    return state


@pytest.mark.parametrize(("state", "said"), [
    (wrong(["topics", "admintest-skew", "partitions", 0, "leader"], "1"),
     "sources.admin.topics['admintest-skew'].partitions[0].leader: expected an integer, got '1'"),
    (wrong(["topics", "admintest-skew", "partitions", 0, "leader"], None),
     "sources.admin.topics['admintest-skew'].partitions[0].leader: expected an integer, got None"),
    (wrong(["brokers", 0, "port"], 9092.5), "sources.admin.brokers[0].port: expected an integer, got 9092.5"),
    (wrong(["brokers", 0, "id"], True), "sources.admin.brokers[0].id: expected an integer, got True"),
    (wrong(["broker_configs", "1", "num.io.threads"], 8),
     "sources.admin.broker_configs['1']['num.io.threads']: expected a string or null, got 8"),
    (wrong(["consumer_groups", "admintest-lag", "lag"], [1]),
     "sources.admin.consumer_groups['admintest-lag'].lag: expected an object, got [1]"),
    (wrong(["consumer_groups", "admintest-lag", "lag", "admintest-balanced", "record_time"], "soon"),
     "sources.admin.consumer_groups['admintest-lag'].lag['admintest-balanced'].record_time: expected a number, got 'soon'"),
    (wrong(["scope"], "everywhere"), "sources.admin.scope: expected 'local', got 'everywhere'"),
    (wrong(["controller_id"], ...), "sources.admin.controller_id: missing"),
    (wrong(["topics"], {"t\x1b[2J": {"partitions": "many", "configs": {}}}),
     "sources.admin.topics['t\\x1b[2J'].partitions: expected a list, got 'many'"),
    ([], "sources.admin: expected an object, got []"),
])
def test_a_wrong_typed_key_is_refused_naming_the_file_and_key(state: object, said: str, tmp_path: Path) -> None:
    root = SnapshotRoot(snapshot(tmp_path, {"version": KAFKA_STATE_VERSION, "sources": {ADMIN: state}}))
    with pytest.raises(ValueError) as refused:
        root.kafka(ADMIN, not_live, read_admin_state)
    assert str(refused.value) == f"{tmp_path / 'kafka.json'}: {said}"


def test_a_wrong_typed_jmx_value_is_refused_naming_the_key(tmp_path: Path) -> None:
    state = {"endpoints": {"u": {"broker_id": "1", "values": {"kafka.server:type=X|Value": "1.0"}}}}
    root = SnapshotRoot(snapshot(tmp_path, {"version": KAFKA_STATE_VERSION, "sources": {JMX: state}}))
    with pytest.raises(ValueError, match=r"sources\.jmx\.endpoints\['u'\]\.values\['kafka.server:type=X\|Value'\]: "
                                         r"expected a number, got '1.0'"):
        root.kafka(JMX, not_live, read_jmx_state)
