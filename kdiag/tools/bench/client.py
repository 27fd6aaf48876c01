"""`kdiag bench`'s Kafka clients: Java client properties mapped to librdkafka ones, unknown ones dropped with a warning."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kdiag.config.settings import ConfigError, load_config
from kdiag.kafka.java_security import translate
from kdiag.kafka.client import ClientSettings, ErrorLog

# Java producer/consumer properties whose librdkafka name differs; values in bytes become kilobytes where noted.
RENAMED = {
    "max.in.flight.requests.per.connection": "max.in.flight",
    "max.request.size": "message.max.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
}
KILOBYTES = {"buffer.memory": "queue.buffering.max.kbytes"}
# Java-client settings librdkafka has no counterpart for: warned about and dropped (security ones: java_security.py).
JAVA_ONLY = {
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer", "partitioner.class",
    "partitioner.ignore.keys", "interceptor.classes", "max.block.ms", "metric.reporters", "metrics.num.samples",
    "metrics.sample.window.ms", "metrics.recording.level", "max.poll.records", "ssl.protocol", "ssl.enabled.protocols",
    "max.poll.interval.ms", "exclude.internal.topics", "default.api.timeout.ms", "client.dns.lookup",
}


def parse_props(items: list[str]) -> dict[str, str]:
    """`k=v` arguments as a dict; ValueError names an item without '='."""
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"invalid property '{item}': expected PROP-NAME=PROP-VALUE")
        props[key.strip()] = value.strip()
    return props


def parse_properties_file(text: str) -> dict[str, str]:
    """A Java .properties file's `k=v` / `k: v` lines (comments and blank lines skipped)."""
    props = {}
    # A line ending in a backslash goes on (multi-line sasl.jaas.config values are written that way).
    for line in re.sub(r"\\\n[ \t]*", "", text).splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def map_java_props(props: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Java client properties as librdkafka properties, with a warning for each one dropped; JavaPropError if refused."""
    out, props = translate(props)
    warnings = []
    for key, value in props.items():
        if key in KILOBYTES:
            out[KILOBYTES[key]] = str(max(1, int(value) // 1024))
        elif key in JAVA_ONLY:
            warnings.append(f"ignoring Java-only property {key} (librdkafka has no equivalent)")
        else:
            out[RENAMED.get(key, key)] = value
    return out, warnings


def warn(message: str) -> None:
    """A kdiag bench warning on stderr."""
    print(f"kdiag bench: {message}", file=sys.stderr, flush=True)


def client_conf(config_file: str | None, props: list[str] | None, kdiag_config: str | None = None) -> dict[str, Any]:
    """librdkafka properties: kdiag's kafka.client and bootstrap servers (--config), then a Java --*.config file, then
    --*-props k=v pairs; dropped ones are warned about. ConfigError or ValueError on what cannot be used."""
    conf: dict[str, Any] = {}
    if kdiag_config:
        kafka = load_config(kdiag_config).kafka
        conf = {**kafka.client_settings.props, "bootstrap.servers": kafka.bootstrap_servers}
    java = parse_properties_file(Path(config_file).read_text()) if config_file else {}
    java.update(parse_props(props or []))
    mapped, warnings = map_java_props(java)
    for w in warnings:
        warn(w)
    return {**conf, **mapped}


def bench_conf(config_file: str | None, props: list[str] | None, kdiag_config: str | None, bootstrap_server: str | None,
               missing: str) -> dict[str, Any] | None:
    """client_conf() with --bootstrap-server applied; None, said on stderr, when it cannot be used or names no servers."""
    try:
        conf = client_conf(config_file, props, kdiag_config)
    except (OSError, ValueError, ConfigError) as e:
        warn(str(e))
        return None
    if bootstrap_server:
        conf["bootstrap.servers"] = bootstrap_server
    if not conf.get("bootstrap.servers"):
        warn(missing)
        return None
    return conf


def error_log(conf: dict[str, Any]) -> ErrorLog:
    """An ErrorLog for a bench client: refusals name the librdkafka property to check."""
    props = {k: str(v) for k, v in conf.items() if isinstance(v, str | int | float)}
    return ErrorLog(ClientSettings(props, {k: k for k in props}, prefix=""), str(conf.get("bootstrap.servers", "")))


_Client = TypeVar("_Client")


def make_client(cls: Callable[[dict[str, Any]], _Client], conf: dict[str, Any], warn: Callable[[str], None]) -> _Client:
    """A confluent-kafka client; properties librdkafka does not know are warned about and dropped."""
    from confluent_kafka import KafkaException

    conf = dict(conf)
    while True:
        try:
            return cls(conf)
        except KafkaException as e:
            message = str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)
            unknown = next((k for k in conf if f'"{k}"' in message and "No such configuration property" in message), None)
            if unknown is None:
                raise
            # Never the value: a misspelt password property would print the password.
            conf.pop(unknown)
            warn(f"ignoring unknown property {unknown}")
