"""Command line redaction: each secret form masked, everything else left as it was; other processes allow-listed."""

from __future__ import annotations

import pytest

from kdiag.core.redact import (
    ARG_MAX,
    ARGS_MAX,
    FULL,
    LABEL_MAX,
    MASKED,
    SCRIPTS_MAX,
    TOTAL_MAX,
    cmdline_label,
    mask_argv,
    redact_argv,
    redact_cmdline_file,
)

CASES = [
    # (argv, masked argv)
    (["app", "--db-password=hunter2"], ["app", "--db-password=***"]),
    (["app", "--api-token", "tok3n", "--verbose"], ["app", "--api-token", "***", "--verbose"]),
    (["app", "--db-password=my secret pass", "-pa b"], ["app", "--db-password=***", "-p***"]),
    (["bench", "--producer-props", 'sasl.jaas.config=a.PlainLoginModule required username="u" password="pw";'],
     ["bench", "--producer-props", "sasl.jaas.config=a.PlainLoginModule required username=u password=***"]),
    (["app", "--auth", "--verbose"], ["app", "--auth", "--verbose"]),  # a secret-named switch with no value
    (["app", "--client-secret", "s"], ["app", "--client-secret", "***"]),
    (["app", "--ssl-key-password=x", "--credentials-file", "/etc/c"], ["app", "--ssl-key-password=***", "--credentials-file", "***"]),
    (["mysql", "-uroot", "-phunter2", "db"], ["mysql", "-uroot", "-p***", "db"]),
    (["sshpass", "-p", "hunter2", "ssh", "h"], ["sshpass", "-p", "***", "ssh", "h"]),
    (["keytool", "-storepass", "changeit", "-v"], ["keytool", "-storepass", "***", "-v"]),
    (["tool", "-password", "x"], ["tool", "-p***", "***"]),  # deliberately both: -pPASSWORD or a -password flag
    (["fetch", "http://admin:s3cretPW@host:9093/x"], ["fetch", "http://admin:***@host:9093/x"]),
    (["fetch", "--url=jdbc:mysql://u:p/w:d@db/k"], ["fetch", "--url=jdbc:mysql://u:***@db/k"]),
    (["git", "clone", "https://ghp_T0KEN@github.example/x"], ["git", "clone", "https://***@github.example/x"]),
    (["git", "clone", "ssh://git@host/x"], ["git", "clone", "ssh://git@host/x"]),
    (["curl", "https://h/p?a=1&access_token=abc&b=2"], ["curl", "https://h/p?a=1&access_token=***&b=2"]),
    (["env", "PGPASSWORD=x", "AWS_SECRET_ACCESS_KEY=y", "HOME=/root", "psql"],
     ["env", "PGPASSWORD=***", "AWS_SECRET_ACCESS_KEY=***", "HOME=/root", "psql"]),
    (["java", "-Djavax.net.ssl.keyStorePassword=ks", "-Xmx1g", "kafka.Kafka", "server.properties"],
     ["java", "-Djavax.net.ssl.keyStorePassword=***", "-Xmx1g", "kafka.Kafka", "server.properties"]),
    (["spark", "--conf=spark.ssl.keyPassword=k"], ["spark", "--conf=spark.ssl.keyPassword=***"]),
    (["curl", "-u", "admin:pw", "--user=bob:pw2"], ["curl", "-u", "admin:***", "--user=bob:***"]),
    (["curl", "-H", "Authorization: Bearer abc.def"], ["curl", "-H", "Authorization: ***"]),
    (["sh", "-c", "mysqldump -phunter2 db | gzip > /backup/db.gz"], ["sh", "-c", "mysqldump -p*** db | gzip > /backup/db.gz"]),
    (["bash", "-c", "curl -H 'X-Api-Key: k1' http://u:p@h/ --token=t"],
     ["bash", "-c", "curl -H 'X-Api-Key: ***' http://u:***@h/ --token=***"]),
    (["sh", "-c", "echo 'unbalanced --password hunter2"], ["sh", "-c", "echo unbalanced --password ***"]),
    (["app", "--config", '{"user": "a", "password": "pw", "port": 1}'],
     ["app", "--config", '{"user": "a", "password": "***", "port": 1}']),
    (["postgres: alice db 127.0.0.1 idle"], ["postgres: alice db 127.0.0.1 idle"]),  # a rewritten title, no secret
    (["tar", "czf", "/backup/k.tgz", "/data/kafka-logs"], ["tar", "czf", "/backup/k.tgz", "/data/kafka-logs"]),
    (["du", "-sh", "/data/kafka-logs", "--exclude=*.index"], ["du", "-sh", "/data/kafka-logs", "--exclude=*.index"]),
    (["redis-cli", "-h", "r", "-a", "hunter2", "ping"], ["redis-cli", "-h", "r", "-a", "***", "ping"]),
    (["sudo", "/usr/bin/redis-cli", "-a", "hunter2"], ["sudo", "/usr/bin/redis-cli", "-a", "***"]),
    (["sh", "-c", "redis-cli -a hunter2 --scan > /tmp/keys"], ["sh", "-c", "redis-cli -a *** --scan > /tmp/keys"]),
    (["cp", "-a", "/data/kafka-logs", "/backup"], ["cp", "-a", "/data/kafka-logs", "/backup"]),
    ([], []),
]


@pytest.mark.parametrize(("argv", "masked"), CASES, ids=[" ".join(a)[:40] for a, _ in CASES])
def test_redact_argv_masks_the_secret_and_keeps_the_rest(argv: list[str], masked: list[str]) -> None:
    assert redact_argv(argv) == masked
    assert redact_argv(masked) == masked  # a recording's masked text replays unchanged


def test_the_cmdline_file_keeps_its_nul_separators() -> None:
    assert redact_cmdline_file("app\0--password\0x\0") == "app\0--password\0***\0"
    assert redact_cmdline_file("") == ""


def test_the_label_is_masked_full_or_bounded() -> None:
    argv = ["app", "--password=x", *(["/data/kafka-logs/topic-0"] * 20)]
    label = cmdline_label(argv)
    assert len(label) == LABEL_MAX and label.endswith("...") and label.startswith("app --password=*** /data")
    # full shows every value, but still none of a known secret form.
    assert cmdline_label(["app", "--password=x", "--every", "15m"], FULL) == "app --password=*** --every 15m"
    assert cmdline_label(["app", "--password=x", "--every", "15m"], MASKED) == "app --password=*** --every ***"


ALLOWED = [
    # (argv, what the default masked form shows): the program, flags and plain absolute paths; no other value.
    (["python3", "/opt/ops/dir_stats.py", "--every", "15m"], ["python3", "/opt/ops/dir_stats.py", "--every", "***"]),
    (["tar", "czf", "/backup/k.tgz", "/data/kafka-logs", "--exclude=*.index", "--files-from=/etc/list"],
     ["tar", "***", "/backup/k.tgz", "/data/kafka-logs", "--exclude=***", "--files-from=/etc/list"]),
    (["/usr/bin/mytool", "-xHunter2", "-q:Hunter2", "--odd:Hunter2", "-", "--", "Hunter2"],
     ["/usr/bin/mytool", "-xHunter2", "-q***", "--***", "-", "--", "***"]),  # a glued value no pattern knows shows
    (["postgres: alice orders 10.0.0.7(5432) idle"], ["postgres: ***"]),
    (["sshd: root@pts/0"], ["sshd: ***"]),
    (["\x1b]0;pwned\x07", "x"], ["***", "***"]),
    (["mysql", "-uroot", "-phunter2", "orders"], ["mysql", "-uroot", "-p***", "***"]),
    # Kafka's JVMs and kdiag keep their arguments: only the known secret forms are masked.
    (["java", "-Xmx6G", "-Djavax.net.ssl.keyStorePassword=ks", "-cp", "/opt/kafka/libs/*", "kafka.Kafka", "server.properties"],
     ["java", "-Xmx6G", "-Djavax.net.ssl.keyStorePassword=***", "-cp", "/opt/kafka/libs/*", "kafka.Kafka", "server.properties"]),
    (["java", "-cp", "libs/*", "org.apache.kafka.tools.ProducerPerformance", "--topic", "t", "--num-records", "10"],
     ["java", "-cp", "libs/*", "org.apache.kafka.tools.ProducerPerformance", "--topic", "t", "--num-records", "10"]),
    (["/usr/bin/python3", "/usr/local/bin/kdiag", "run", "--config", "kdiag.yaml"],
     ["/usr/bin/python3", "/usr/local/bin/kdiag", "run", "--config", "kdiag.yaml"]),
    (["python3", "-m", "kdiag", "record", "-o", "rec"], ["python3", "-m", "kdiag", "record", "-o", "rec"]),
    ([], []),
]


@pytest.mark.parametrize(("argv", "shown"), ALLOWED, ids=[" ".join(a)[:40] for a, _ in ALLOWED])
def test_other_processes_show_only_their_program_flags_and_paths(argv: list[str], shown: list[str]) -> None:
    assert mask_argv(argv) == shown
    assert mask_argv(shown) == shown  # a recording holds this form: replaying it changes nothing
    assert redact_cmdline_file("".join(a + "\0" for a in argv)) == "".join(a + "\0" for a in shown)


def test_hostile_shapes_are_bounded_and_never_half_masked() -> None:
    # Any local user picks its argv; these once took minutes (quadratic patterns) or raised RecursionError.
    long_url = "http://admin:" + "p" * ARG_MAX + "@host/"
    assert redact_argv(["x", long_url]) == ["x", f"***({len(long_url)} chars)"]
    assert redact_argv(["x", "a" * 128 * 1024]) == ["x", "***(131072 chars)"]
    assert redact_argv(["x", "a=" * 2000]) == ["x", "a=" * 2000]
    many = redact_argv(["-p"] * 100_000)
    assert len(many) == ARGS_MAX and many[-1] == f"***(+{100_000 - ARGS_MAX + 1} args)"
    words = redact_argv(["a" * 4000] * 20)
    assert words[TOTAL_MAX // 4000 - 1] == "a" * 4000 and words[TOTAL_MAX // 4000] == "***(4000 chars)"
    scripts = redact_argv(["sh", "-c", *["echo a b"] * (SCRIPTS_MAX // 8), "kafka.Kafka", "echo c d"])
    assert scripts[-2:] == ["kafka.Kafka", "***(8 chars)"]
    nested = "sh -c " + "\"sh -c '" * 400 + "--password hunter2"
    assert "hunter2" not in " ".join(redact_argv(["sh", "-c", nested]))
