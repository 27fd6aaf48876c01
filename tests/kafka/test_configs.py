"""The configs kdiag reads: DescribeConfigs asking only their names, the answer picked, a sensitive value never kept."""

from __future__ import annotations

import io

from kafka.protocol.admin.configs import DescribeConfigsResponse

from kdiag.kafka import configs
from kdiag.kafka.configs import BROKER_CONFIGS, TOPIC_CONFIGS, pick, take_answer

SECRET = "s3cr3t-Pw_42"
Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult


def test_a_sensitive_config_entry_is_never_stored():
    entries = {"log.dirs": ("/data", 4, False), "num.io.threads": (SECRET, 2, True)}
    picked = pick(entries, ("log.dirs", "num.io.threads"))
    assert picked == {"values": {"log.dirs": "/data"}, "sources": {"log.dirs": "STATIC_BROKER_CONFIG"}}


def test_a_default_value_is_kept_without_a_source_and_an_unknown_source_is_named_unknown():
    picked = pick({"flush.ms": ("9223372036854775807", 5, False), "segment.ms": ("1000", 42, False)}, TOPIC_CONFIGS)
    assert picked == {"values": {"flush.ms": "9223372036854775807", "segment.ms": "1000"},
                      "sources": {"segment.ms": "UNKNOWN_CONFIG"}}


def test_the_topics_go_to_any_node_by_thousands_and_each_brokers_to_itself(monkeypatch):
    monkeypatch.setattr(configs, "TOPICS_PER_REQUEST", 2)
    sent = list(configs.requests(["a", "b", "c"], [1, 3], any_node=2))
    assert [(node, [(r.resource_type, r.resource_name) for r in req.resources]) for node, req in sent] == [
        (2, [(2, "a"), (2, "b")]), (2, [(2, "c")]), (1, [(4, "1")]), (3, [(4, "3")])]
    assert all(not req.include_synonyms for _, req in sent)
    assert {tuple(r.configuration_keys) for _, req in sent[:2] for r in req.resources} == {TOPIC_CONFIGS}
    assert [tuple(r.configuration_keys) for _, req in sent[2:] for r in req.resources] == [BROKER_CONFIGS] * 2


def test_an_answer_is_picked_per_resource_and_a_refused_one_left_out():
    answer = DescribeConfigsResponse(throttle_time_ms=0, results=[
        Result(error_code=0, error_message=None, resource_type=2, resource_name="orders", configs=[
            Entry(name="flush.messages", value="1", read_only=False, config_source=1, is_sensitive=False, synonyms=[],
                  config_type=5, documentation=None),
            Entry(name="min.insync.replicas", value="2", read_only=False, config_source=3, is_sensitive=False,
                  synonyms=[], config_type=3, documentation=None)]),
        Result(error_code=3, error_message="This server does not host this topic-partition.", resource_type=2,
               resource_name="gone", configs=[]),
        Result(error_code=0, error_message=None, resource_type=4, resource_name="1", configs=[
            Entry(name="log.dirs", value="/data", read_only=True, config_source=4, is_sensitive=False, synonyms=[],
                  config_type=7, documentation=None)])], version=4)
    # Through the wire format, as the brokers' answers come.
    data = answer.encode()
    decoded = DescribeConfigsResponse.decode(io.BytesIO(data), version=4)
    into: configs.Configs = ({}, {})
    take_answer(decoded, into)
    assert into == (
        {"orders": {"values": {"flush.messages": "1", "min.insync.replicas": "2"},
                    "sources": {"flush.messages": "DYNAMIC_TOPIC_CONFIG",
                                "min.insync.replicas": "DYNAMIC_DEFAULT_BROKER_CONFIG"}}},
        {"1": {"values": {"log.dirs": "/data"}, "sources": {"log.dirs": "STATIC_BROKER_CONFIG"}}})
