"""`kdiag lab up --security`: the certificates, SCRAM users, JMX credentials and listeners of a secured lab.

Modes: none (PLAINTEXT, JMX open), ssl (TLS), sasl_plaintext (SCRAM-SHA-512) and sasl_ssl (SCRAM-SHA-512
over TLS). In every secured mode the client listener (named after its protocol, e.g. SASL_SSL) also carries
the inter-broker traffic (SCRAM user "broker" in the SASL modes), the controller listener is mutual TLS, and
JMX asks for a password (user "kdiag", read-only), over TLS in ssl and sasl_ssl.

DIR/secrets (0700, every file 0600) holds: kdiag.password (SASL), broker.password, ca.crt/ca.key and the
broker certificate (broker.pem: key + chain, Kafka's PEM keystore; broker.p12 for JMX's TLS), the JMX files
(jmx.password for the client, jmxremote.password/.access and management.properties for the JVM) and
truststore.p12 (the CA, for JMX clients), and format-N.args (the StorageTool's java argfile with the SCRAM
users). Passwords reach Java through files, never argv; only node-N/server.properties (0600) repeats one,
the broker's own SCRAM password in its JAAS line.
"""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from pathlib import Path

import yaml

from kdiag.core.redact import mask_values
from kdiag.tools.lab.info import LabInfo
from kdiag.tools.lab.jars import LabError, need

MODES = ("none", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISM = "SCRAM-SHA-512"
USER = "kdiag"
BROKER_USER = "broker"
INTRUDER = "intruder"  # a SCRAM user without any ACL (kdiag/tools/lab/acls.py)
CERT_DAYS = 825


def security_of(info: LabInfo) -> str:
    """The security mode of a lab.json ("none" for labs started before --security existed)."""
    return info.get("security", "none")


def tls(mode: str) -> bool:
    """Whether clients reach the brokers (and JMX) over TLS in this mode."""
    return mode in ("ssl", "sasl_ssl")


def sasl(mode: str) -> bool:
    """Whether clients authenticate with SCRAM in this mode."""
    return mode.startswith("sasl_")


def secrets_dir(d: Path) -> Path:
    """Return DIR/secrets."""
    return d / "secrets"


def write_private(path: Path, text: str) -> None:
    """Write text to path, readable by its owner only (also when path already exists)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _password(path: Path) -> str:
    """Return the password stored in path, making a random one first if there is none."""
    if not path.exists():
        write_private(path, secrets.token_hex(24) + "\n")  # hex: safe inside SCRAM and JAAS syntax
    return path.read_text().strip()


def _tool(*cmd: str | Path, cwd: Path) -> None:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"{cmd[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")


def _certificates(s: Path) -> None:
    """Make an EC CA and a broker certificate for 127.0.0.1/localhost (server and client use), PEM and PKCS12."""
    if (s / "truststore.p12").exists():
        return
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _tool("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", str(CERT_DAYS),
          "-subj", "/CN=kdiag lab CA", cwd=s)
    _tool("openssl", "req", "-new", *ec, "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost",
          cwd=s)
    (s / "broker.ext").write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                  "extendedKeyUsage=serverAuth,clientAuth\n"
                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _tool("openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
          "-days", str(CERT_DAYS), "-extfile", "broker.ext", "-out", "broker.crt", cwd=s)
    write_private(s / "broker.pem", "".join((s / f).read_text() for f in ("broker.key", "broker.crt", "ca.crt")))
    _password(s / "broker.p12.password")
    _tool("openssl", "pkcs12", "-export", "-in", "broker.crt", "-inkey", "broker.key", "-certfile", "ca.crt",
          "-name", "broker", "-out", "broker.p12", "-passout", "file:broker.p12.password", cwd=s)
    _password(s / "truststore.password")
    _tool("keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.crt", "-keystore", "truststore.p12",
          "-storetype", "PKCS12", "-storepass:file", "truststore.password", cwd=s)
    for f in ("broker.csr", "broker.ext", "ca.srl"):
        (s / f).unlink()
    for path in s.iterdir():
        path.chmod(0o600)


def _jmx_files(s: Path, mode: str) -> None:
    """The JVM's JMX password, access and management files, and the client's password file."""
    password = _password(s / "jmx.password")
    write_private(s / "jmxremote.password", f"{USER} {password}\n")
    write_private(s / "jmxremote.access", f"{USER} readonly\n")
    lines = [
        "com.sun.management.jmxremote.authenticate=true",
        f"com.sun.management.jmxremote.password.file={s / 'jmxremote.password'}",
        f"com.sun.management.jmxremote.access.file={s / 'jmxremote.access'}",
        # Every node reads the same file: the JVM must not rewrite it with hashes.
        "com.sun.management.jmxremote.password.toHashes=false",
        f"com.sun.management.jmxremote.ssl={'true' if tls(mode) else 'false'}",
    ]
    if tls(mode):
        write_private(s / "jmx-ssl.properties",
                      f"javax.net.ssl.keyStore={s / 'broker.p12'}\n"
                      f"javax.net.ssl.keyStorePassword={_password(s / 'broker.p12.password')}\n")
        lines += ["com.sun.management.jmxremote.registry.ssl=true",
                  f"com.sun.management.jmxremote.ssl.config.file={s / 'jmx-ssl.properties'}"]
    write_private(s / "management.properties", "\n".join(lines) + "\n")


def prepare(d: Path, mode: str) -> None:
    """Make DIR/secrets for mode (kept across restarts: the brokers' SCRAM users are formatted in)."""
    if mode == "none":
        return
    need("openssl")
    need("keytool")
    s = secrets_dir(d)
    s.mkdir(mode=0o700, parents=True, exist_ok=True)
    s.chmod(0o700)
    _certificates(s)
    _jmx_files(s, mode)
    if sasl(mode):
        _scram_users(s)


def _scram_users(s: Path) -> list[tuple[str, str]]:
    """(name, password) of the lab's SCRAM users: kdiag, the brokers, and an intruder without ACLs."""
    return [(name, _password(s / f"{name}.password")) for name in (USER, BROKER_USER, INTRUDER)]


def listener_lines(d: Path, mode: str, client_port: int, controller_port: int | None) -> list[str]:
    """server.properties lines for the listeners, TLS and SASL of a node (no controller listener in ZooKeeper mode)."""
    name = "PLAINTEXT" if mode == "none" else mode.upper()
    controller = f",CONTROLLER://127.0.0.1:{controller_port}" if controller_port else ""
    lines = [
        f"listeners={name}://127.0.0.1:{client_port}{controller}",
        f"advertised.listeners={name}://127.0.0.1:{client_port}",
        f"inter.broker.listener.name={name}",
    ]
    if controller_port:
        lines.append("controller.listener.names=CONTROLLER")
    if mode == "none":
        return [*lines, f"listener.security.protocol.map={'CONTROLLER:PLAINTEXT,' if controller else ''}PLAINTEXT:PLAINTEXT"]
    s = secrets_dir(d)
    lines += [
        f"listener.security.protocol.map={'CONTROLLER:SSL,' if controller else ''}{name}:{name}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={s / 'broker.pem'}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={s / 'ca.crt'}",
        "listener.name.controller.ssl.client.auth=required",
    ]
    if sasl(mode):
        password = _password(s / "broker.password")
        lines += [
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
            f"listener.name.{name.lower()}.{MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{password}";',
        ]
    return lines


def redact(d: Path, text: str) -> str:
    """text with every password of the lab's secrets replaced by ***."""
    return mask_values(text, (f.read_text().strip() for f in secrets_dir(d).glob("*password")))


def format_command(d: Path, mode: str, node: int, java_args: list[str]) -> list[str]:
    """Node's StorageTool command: in the SASL modes, moved into a 0600 java @argfile that adds the SCRAM users."""
    if not sasl(mode):
        return java_args
    s = secrets_dir(d)
    users = _scram_users(s)
    args = java_args[1:] + [a for name, pw in users for a in ("--add-scram", f"{MECHANISM}=[name={name},password={pw}]")]
    argfile = s / f"format-{node}.args"
    write_private(argfile, "".join(f'"{a}"\n' for a in args))
    return [java_args[0], f"@{argfile}"]


def add_zookeeper_users(d: Path, mode: str, zk_port: int) -> None:
    """In a SASL mode of a ZooKeeper lab, store the SCRAM users in ZooKeeper (ConfigCommand, from a 0600 @argfile)."""
    if not sasl(mode):
        return
    s = secrets_dir(d)
    for name, pw in _scram_users(s):
        args = ["-cp", str(d / "libs" / "*"), "kafka.admin.ConfigCommand", "--zookeeper", f"127.0.0.1:{zk_port}",
                "--alter", "--add-config", f"{MECHANISM}=[password={pw}]", "--entity-type", "users", "--entity-name", name]
        argfile = s / f"scram-{name}.args"
        write_private(argfile, "".join(f'"{a}"\n' for a in args))
        proc = subprocess.run(["java", "-Xmx128m", f"@{argfile}"], check=False, capture_output=True, text=True)
        argfile.unlink()
        if proc.returncode != 0:
            raise LabError(f"adding SCRAM user {name} to ZooKeeper failed:\n{redact(d, proc.stdout + proc.stderr)[-2000:]}")


def jmx_flags(d: Path, mode: str) -> list[str]:
    """The JVM flags securing a node's JMX port (the port flags themselves are the caller's)."""
    if mode == "none":
        return ["-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false"]
    return [f"-Dcom.sun.management.config.file={secrets_dir(d) / 'management.properties'}"]


def _client(d: Path, mode: str) -> dict[str, str]:
    """kafka.client of kdiag.yaml: librdkafka properties, the SASL password as a file."""
    if mode == "none":
        return {}
    s = secrets_dir(d)
    client = {"security.protocol": mode.upper()}
    if sasl(mode):
        client.update({"sasl.mechanism": MECHANISM, "sasl.username": USER,
                       "sasl.password_file": str(s / "kdiag.password")})
    if tls(mode):
        client["ssl.ca.location"] = str(s / "ca.crt")
    return client


def client_conf(d: Path, mode: str) -> dict[str, str]:
    """librdkafka properties for the lab's own clients, the SASL password read in."""
    conf = _client(d, mode)
    if "sasl.password_file" in conf:
        conf["sasl.password"] = Path(conf.pop("sasl.password_file")).read_text().strip()
    return conf


def kdiag_config(d: Path, info: LabInfo) -> dict[str, dict[str, object]]:
    """A complete kdiag config for the lab: bootstrap, JMX (with credentials) and client security."""
    mode = security_of(info)
    kafka: dict[str, object] = {
        "bootstrap_servers": info["bootstrap"],
        "jmx": [info["jmx"][n] for n in sorted(info["jmx"], key=int)],
        "jmx_classpath": str(d / "libs" / "*"),
    }
    if "containers" not in info:  # a container's broker is trusted as root's runtime started it, whatever its uid
        kafka["broker_user"] = pwd.getpwuid(os.geteuid()).pw_name  # the lab's brokers run as whoever started them
    if mode != "none":
        s = secrets_dir(d)
        kafka.update({"client": _client(d, mode), "jmx_username": USER, "jmx_password_file": str(s / "jmx.password")})
        if tls(mode):
            kafka.update({"jmx_ssl": True, "jmx_truststore": str(s / "truststore.p12"),
                          "jmx_truststore_password_file": str(s / "truststore.password")})
    return {"kafka": kafka}


def write_kdiag_yaml(d: Path, info: LabInfo) -> None:
    """Write DIR/kdiag.yaml (secrets stay in DIR/secrets; the file only names them)."""
    header = (f"# Written by `kdiag lab up` (security: {security_of(info)}); "
              f"kdiag run --config {d / 'kdiag.yaml'}\n")
    (d / "kdiag.yaml").write_text(header + yaml.safe_dump(kdiag_config(d, info), sort_keys=False))
