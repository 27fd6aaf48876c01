"""The Java client's security properties as librdkafka ones, for `kdiag bench`; Java-only ones are refused with why.

Accepted: security.protocol, sasl.mechanism, sasl.jaas.config with PlainLoginModule or ScramLoginModule,
truststores in PEM (used as they are) or PKCS12/JKS (converted with keytool), PKCS12 and PEM keystores,
ssl.key.password and ssl.endpoint.identification.algorithm.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kdiag.core.trust import UntrustedError, trusted_program

LOGIN_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)
JAVA_CLASS = "names a Java class, which librdkafka cannot load"
OPENSSL = "configures Java's TLS stack; librdkafka uses OpenSSL and has no equivalent"
REFUSED = {
    "sasl.client.callback.handler.class": JAVA_CLASS,
    "sasl.login.callback.handler.class": JAVA_CLASS,
    "sasl.login.class": JAVA_CLASS,
    "ssl.engine.factory.class": JAVA_CLASS,
    "ssl.provider": OPENSSL,
    "ssl.keymanager.algorithm": OPENSSL,
    "ssl.trustmanager.algorithm": OPENSSL,
    "ssl.secure.random.implementation": OPENSSL,
}
PASSED = ("security.protocol", "sasl.mechanism", "ssl.key.password")
# Used here to read the stores, never handed to librdkafka as they are.
CONSUMED = ("ssl.truststore.password", "ssl.truststore.type", "ssl.keystore.type", "ssl.keystore.password")
PEM_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
OPTION = re.compile(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


class JavaPropError(ValueError):
    """A Java client property librdkafka cannot honour: says which one and why."""

    def __init__(self, prop: str, why: str):
        super().__init__(f"{prop}: {why}")


def jaas_credentials(value: str) -> dict[str, str]:
    """sasl.username and sasl.password from a PlainLoginModule or ScramLoginModule JAAS line."""
    module = value.split(None, 1)[0] if value.strip() else ""
    if module not in LOGIN_MODULES:
        hint = " (Kerberos: librdkafka does GSSAPI itself, not through JAAS)" if "Krb5" in module else ""
        raise JavaPropError("sasl.jaas.config", f"login module {module or '(none)'} is not supported: only "
                            f"PlainLoginModule and ScramLoginModule map to librdkafka{hint}")
    options = {k: v[1:-1].replace('\\"', '"').replace("\\\\", "\\") if v.startswith('"') else v
               for k, v in OPTION.findall(value.split(None, 1)[1] if " " in value.strip() else "")}
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise JavaPropError("sasl.jaas.config", f"{' and '.join(missing)} missing from the login module options")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def _store_type(location: str, given: str) -> str:
    if given:
        return given.upper()
    try:
        head = Path(location).read_bytes()[:64]
    except OSError as e:
        raise JavaPropError("ssl.truststore.location", f"cannot read {location}: {e.strerror}") from None
    return "PEM" if head.lstrip().startswith(b"-----BEGIN") else "PKCS12"


def truststore_pem(location: str, password: str) -> str:
    """The certificates of a PKCS12 or JKS truststore in PEM, read with keytool (password through the environment)."""
    env = {**os.environ, "KDIAG_STOREPASS": password}
    try:
        done = subprocess.run([trusted_program("keytool"), "-list", "-rfc", "-keystore", location, "-storepass:env",
                               "KDIAG_STOREPASS"], capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired, UntrustedError) as e:
        raise JavaPropError("ssl.truststore.location", f"cannot run keytool to read it: {e}") from None
    pem = "\n".join(PEM_BLOCK.findall(done.stdout))
    if done.returncode or not pem:
        why = (done.stdout + done.stderr).strip().splitlines()
        raise JavaPropError("ssl.truststore.location", f"keytool cannot read {location}: {why[0] if why else 'no certificates'}"
                            " (check ssl.truststore.password)")
    return pem + "\n"


def _truststore(props: dict[str, str]) -> dict[str, str]:
    location = props.get("ssl.truststore.location", "")
    inline = props.get("ssl.truststore.certificates", "")
    if inline:
        return {"ssl.ca.pem": inline}
    if not location:
        return {}
    if _store_type(location, props.get("ssl.truststore.type", "")) == "PEM":
        return {"ssl.ca.location": location}
    return {"ssl.ca.pem": truststore_pem(location, props.get("ssl.truststore.password", ""))}


def _keystore(props: dict[str, str]) -> dict[str, str]:
    out = {}
    if "ssl.keystore.key" in props:
        out["ssl.key.pem"] = props["ssl.keystore.key"]
    if "ssl.keystore.certificate.chain" in props:
        out["ssl.certificate.pem"] = props["ssl.keystore.certificate.chain"]
    location = props.get("ssl.keystore.location", "")
    if location:
        kind = props.get("ssl.keystore.type", "JKS").upper()
        if kind == "PKCS12":
            out.update({"ssl.keystore.location": location, "ssl.keystore.password": props.get("ssl.keystore.password", "")})
        elif kind == "PEM":
            out.update({"ssl.certificate.location": location, "ssl.key.location": location})
        else:
            raise JavaPropError("ssl.keystore.location", f"a {kind} keystore cannot be read by librdkafka: convert it with "
                                f"`keytool -importkeystore -srckeystore {location} -destkeystore keystore.p12 "
                                "-deststoretype PKCS12` and set ssl.keystore.type=PKCS12")
    return out


def _cipher_suites(value: str) -> dict[str, str]:
    if any(name.strip().startswith("TLS_") for name in value.split(",")):
        raise JavaPropError("ssl.cipher.suites", "Java (IANA) cipher suite names are not OpenSSL's: give OpenSSL "
                            "names (e.g. ECDHE-RSA-AES128-GCM-SHA256) or leave it out")
    return {"ssl.cipher.suites": value}


SECURITY = ("sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.certificates", "ssl.keystore.location",
            "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.cipher.suites",
            "ssl.endpoint.identification.algorithm", *PASSED, *CONSUMED)


def translate(props: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(librdkafka settings for the Java security props, the props left for the generic mapping); JavaPropError if refused."""
    for prop in props:
        if prop in REFUSED:
            raise JavaPropError(prop, REFUSED[prop])
    out = {p: props[p] for p in PASSED if p in props}
    if "sasl.jaas.config" in props:
        out.update(jaas_credentials(props["sasl.jaas.config"]))
    out.update(_truststore(props))
    out.update(_keystore(props))
    if "ssl.cipher.suites" in props:
        out.update(_cipher_suites(props["ssl.cipher.suites"]))
    if "ssl.endpoint.identification.algorithm" in props:
        # Java turns host checking off with an empty value; librdkafka with "none".
        out["ssl.endpoint.identification.algorithm"] = props["ssl.endpoint.identification.algorithm"] or "none"
    rest = {k: v for k, v in props.items() if k not in SECURITY}
    return out, rest
