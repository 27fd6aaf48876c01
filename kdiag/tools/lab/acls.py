"""The lab's authorizer in the SASL modes: kdiag's principal gets exactly the ACLs docs/ACLS.md lists, the SCRAM user
`intruder` (security.INTRUDER) none, so a test can show that a principal without them is refused on kdiag's topics and groups."""

from __future__ import annotations

from pathlib import Path

from kdiag.tools.lab import security as lab_security
from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.jars import LabError

# The controller listener is mutual TLS: the brokers' certificate names them to the controllers.
CONTROLLER_PRINCIPAL = "User:CN=localhost"
# (resource type, name, pattern type, operations) for User:kdiag, as docs/ACLS.md lists them. The lab also lets kdiag
# own every topic and group whose name starts with `kdiag-` (`kdiag bench` topics), not only the probe's, and
# `kdiag bench consume`'s groups.
KDIAG_ACLS: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("BROKER", "kafka-cluster", "LITERAL", ("DESCRIBE", "DESCRIBE_CONFIGS")),
    ("TOPIC", "*", "LITERAL", ("DESCRIBE", "DESCRIBE_CONFIGS", "READ")),
    ("GROUP", "*", "LITERAL", ("DESCRIBE",)),
    ("TOPIC", "__kdiag_coordination", "PREFIXED", ("CREATE", "DESCRIBE", "READ", "WRITE")),
    ("GROUP", "kdiag-coordination", "PREFIXED", ("READ", "DESCRIBE")),
    ("TOPIC", "kdiag-", "PREFIXED", ("CREATE", "DESCRIBE", "READ", "WRITE", "ALTER", "DELETE")),
    ("GROUP", "kdiag-", "PREFIXED", ("READ", "DESCRIBE", "DELETE")),
    ("GROUP", "perf-consumer-", "PREFIXED", ("READ", "DESCRIBE")),  # `kdiag bench consume`'s default group
]


def authorizer_lines(zookeeper: bool) -> list[str]:
    """server.properties lines turning the authorizer on: only the brokers themselves are super users."""
    name = "kafka.security.authorizer.AclAuthorizer" if zookeeper else \
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    return [f"authorizer.class.name={name}", "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{lab_security.BROKER_USER};{CONTROLLER_PRINCIPAL}"]


def grant(d: Path, info: LabInfo) -> None:
    """Create KDIAG_ACLS for User:kdiag, as the brokers' own super user (idempotent: an ACL that exists stays one)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)

    mode = lab_security.security_of(info)
    conf = {**lab_security.client_conf(d, mode), "sasl.username": lab_security.BROKER_USER,
            "sasl.password": (lab_security.secrets_dir(d) / "broker.password").read_text().strip()}
    admin = AdminClient({"bootstrap.servers": info["bootstrap"], "log_level": 0, **conf})
    bindings = [AclBinding(ResourceType[kind], name, ResourcePatternType[pattern], f"User:{lab_security.USER}", "*",
                           AclOperation[op], AclPermissionType.ALLOW)
                for kind, name, pattern, ops in KDIAG_ACLS for op in ops]
    for binding, future in admin.create_acls(bindings, request_timeout=30).items():
        try:
            future.result(timeout=40)
        except Exception as e:
            raise LabError(f"creating the lab's ACL {binding} failed: {lab_security.redact(d, str(e))}") from None
