"""The coordination records read as hostile input, signed memberships, and the fleet key file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kdiag.kafka.coordination_records import (MAC_HEADER, MAX_RECORD_BYTES, Member, Refused, client_id, encode,
                                              mac_holds, member_of, nesting, parse, record_mac)
from kdiag.config.settings import ConfigError, load_config
from kdiag.kafka.fleet_key import FleetKeyError, read_key, write_key

GROUP = "kdiag-coordination"
RULES = frozenset({"broker_down", "partition_skew"})
NOW = 1_800_000_000.0
KEY = bytes(range(32))


def record(**changes: object) -> dict:
    """A valid state record as a reporter publishes it, with changes."""
    base = {"format": "kdiag-state", "version": 1, "group": GROUP, "kind": "state", "host": "hostA",
            "member_id": "kdiag/hostA/1-abc", "broker_id": 1, "saved": NOW - 1,
            "diagnoses": [{"rule": "broker_down", "subject": "1", "state": "firing", "since": NOW - 60,
                           "summary": "broker 1 is down", "evidence": {"up": 0.0, "why": "gone"}, "brokers": ["1"]}]}
    return {**base, **changes}


def diagnosis(**changes: object) -> dict:
    return {**record()["diagnoses"][0], **changes}


def refused(value: bytes) -> str:
    with pytest.raises(Refused) as e:
        parse(value, NOW, RULES, GROUP)
    return e.value.reason


def test_a_valid_record_reads_back() -> None:
    got = parse(encode(record()), NOW, RULES, GROUP)
    assert got["host"] == "hostA" and got["member_id"] == "kdiag/hostA/1-abc"
    assert got["diagnoses"][0]["since"] == NOW - 60 and got["diagnoses"][0]["evidence"] == {"up": 0.0, "why": "gone"}


@pytest.mark.parametrize("bad, reason", [
    (diagnosis(rule=[]), "schema"),  # finding 2: unhashable rule froze every standby
    (diagnosis(rule="no_such_rule"), "schema"),
    (diagnosis(rule="cpu0_softirq"), "schema"),  # a host-scope rule is no cluster fact
    (diagnosis(since=-1e12), "stale"),  # finding 7: killed the push thread
    (diagnosis(since=-1e20), "stale"),
    (diagnosis(since=NOW + 3600), "schema"),
    (diagnosis(since="1"), "schema"),
    (diagnosis(subject="x" * 1025), "schema"),
    (diagnosis(summary="x" * 1025), "schema"),
    (diagnosis(state="resolved"), "schema"),
    (diagnosis(evidence={"v": [1]}), "schema"),
    (diagnosis(evidence={f"k{i}": 1 for i in range(101)}), "schema"),
    (diagnosis(brokers=[True]), "schema"),
])
def test_a_bad_diagnosis_refuses_the_record(bad: dict, reason: str) -> None:
    assert refused(encode(record(diagnoses=[bad]))) == reason


def test_refused_records() -> None:
    assert refused(b'{"a":' + b"[" * 200_000) == "too_deep"  # finding 5: a RecursionError escaped the reader
    assert refused(b"[" * 3 + b"]" * 3) == "schema"
    assert refused(b"x" * (MAX_RECORD_BYTES + 1)) == "too_large"
    assert refused(b"{not json") == "not_json"
    assert refused(json.dumps(record()).replace("-60", "-60").encode().replace(b'"up": 0.0', b'"up": NaN')) \
        == "not_json"
    assert refused(encode(record(diagnoses=[diagnosis()] * 1001))) == "schema"
    assert refused(encode(record(group="another"))) == "schema"
    assert refused(encode(record(saved=NOW + 3600))) == "schema"
    assert refused(encode(record(host=None))) == "schema"
    assert refused(encode(record(broker_id=True))) == "schema"


def test_a_time_within_the_clock_skew_is_taken_as_now() -> None:
    got = parse(encode(record(diagnoses=[diagnosis(since=NOW + 30)])), NOW, RULES, GROUP)
    assert got["diagnoses"][0]["since"] == NOW


def test_strings_from_the_record_are_made_printable_but_subjects_kept() -> None:
    hostile = "\x1b[31m<script>\u2028"
    got = parse(encode(record(diagnoses=[diagnosis(subject=hostile, summary=hostile, evidence={"w": hostile})])),
                NOW, RULES, GROUP)["diagnoses"][0]
    assert "\x1b" not in got["summary"] and "\u2028" not in got["evidence"]["w"]
    assert got["subject"] == hostile  # the outputs escape it, as they escape kdiag's own subjects


def test_nesting_ignores_brackets_in_strings() -> None:
    assert nesting(b'{"a": "[[[[{{{{", "b": [{"c": "\\"]]"}]}') == 3
    assert nesting(b"[]") == 1 and nesting(b'"plain"') == 0


def test_the_mac_covers_key_and_value() -> None:
    value = encode(record())
    headers = [(MAC_HEADER, record_mac(KEY, b"g", value).encode())]
    assert mac_holds(KEY, b"g", value, headers)
    assert not mac_holds(KEY, b"g", value + b" ", headers)
    assert not mac_holds(KEY, b"h", value, headers)
    assert not mac_holds(bytes(32), b"g", value, headers)
    assert not mac_holds(KEY, b"g", value, None)


def test_a_signed_client_id_names_its_daemon_only_with_the_fleet_key() -> None:
    for me in (Member("broker-1.example", 1), Member("loadhost", None)):
        assert member_of(client_id(me, GROUP, None), GROUP, None) == me
        signed = client_id(me, GROUP, KEY)
        assert member_of(signed, GROUP, KEY) == me
        assert member_of(signed, GROUP, bytes(32)) is None
        assert member_of(signed, "another-group", KEY) is None
        assert member_of(client_id(me, GROUP, None), GROUP, KEY) is None  # unsigned in a signed fleet: foreign
    assert member_of("rdkafka", GROUP, None) is None
    assert member_of("kdiag/<b>evil</b>\x1b[31m/7", GROUP, KEY) is None


def test_the_key_file_is_refused_when_others_can_read_it(tmp_path: Path) -> None:
    path = tmp_path / "fleet.key"
    write_key(str(path))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(read_key(str(path))) == 32
    with pytest.raises(FleetKeyError, match="never overwritten"):
        write_key(str(path))
    os.chmod(path, 0o640)
    with pytest.raises(FleetKeyError, match="can be read by others"):
        read_key(str(path))
    os.chmod(path, 0o600)
    path.write_text("short\n")
    with pytest.raises(FleetKeyError, match="64 hex digits"):
        read_key(str(path))
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(FleetKeyError, match="cannot read"):
        read_key(str(link))
    with pytest.raises(FleetKeyError, match="cannot read"):
        read_key(str(tmp_path / "missing.key"))


def test_records_are_checked_against_the_time_they_are_read() -> None:
    fresh = encode(record(saved=time.time(), diagnoses=[diagnosis(since=time.time() - 31 * 86400)]))
    with pytest.raises(Refused, match="days ago"):
        parse(fresh, time.time(), RULES, GROUP)


def test_a_refused_key_file_stops_the_start_up_naming_the_key(tmp_path: Path) -> None:
    key = tmp_path / "fleet.key"
    write_key(str(key))
    os.chmod(key, 0o644)
    config = tmp_path / "kdiag.yaml"
    config.write_text(f"kafka:\n  bootstrap_servers: 127.0.0.1:1\n  coordination_key_file: {key}\n")
    with pytest.raises(ConfigError, match=r"kafka\.coordination_key_file .* can be read by others"):
        load_config(str(config))
    os.chmod(key, 0o600)
    assert load_config(str(config)).kafka.coordination_key == read_key(str(key))
