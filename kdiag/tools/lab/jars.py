"""`kdiag lab`'s prerequisites: a JDK 17+ and Kafka's jars (fetched from Maven Central by Maven into DIR/libs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from kdiag.core.errors import KdiagError

LABFILES = Path(__file__).parent / "labfiles"
REQUIRED_CLASSES = ("kafka/Kafka.class", "org/apache/kafka/tools/ProducerPerformance.class")
KRAFT_CLASSES = ("kafka/tools/StorageTool.class",)
ZOOKEEPER_CLASSES = ("org/apache/zookeeper/server/quorum/QuorumPeerMain.class",)
INSTALL_HINTS = {
    "java": "java not found: install a JDK 17+ (Debian: apt-get install openjdk-17-jre-headless)",
    "mvn": "mvn not found: install Apache Maven 3.6+ (Debian: apt-get install maven)",
    "openssl": "openssl not found: a secured lab makes its certificates with it (Debian: apt-get install openssl)",
    "keytool": "keytool not found: it comes with the JDK (Debian: apt-get install openjdk-17-jre-headless)",
}


class LabError(KdiagError):
    """A lab failure reported to the user with an exit code."""

    exit_code = 1


def need(tool: str) -> None:
    """LabError (exit 2) with an install hint unless tool is on PATH."""
    if not shutil.which(tool):
        raise LabError(INSTALL_HINTS[tool], 2)


def check_java() -> None:
    """LabError (exit 2) unless java is a JDK 17+."""
    need("java")
    out = subprocess.run(["java", "-version"], check=False, capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if m and major == 1 and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise LabError(f"java is version {major or '?'}: Kafka 4.x needs a JDK 17+ "
                       "(Debian: apt-get install openjdk-17-jre-headless)", 2)


def jars_ok(libs: Path, version: str) -> bool:
    marker = libs / ".kafka-version"
    return marker.is_file() and marker.read_text().strip() == version and any(libs.glob("kafka_2.1?-*.jar"))


def fetch_jars(d: Path, version: str, artifact: str = "kafka_2.13", mode: str = "kraft") -> None:
    """Fetch Kafka (core jar `artifact`), its tools and a log4j2 backend into DIR/libs with Maven, unless there."""
    libs = d / "libs"
    if jars_ok(libs, version):
        return
    need("mvn")
    shutil.rmtree(libs, ignore_errors=True)
    pom = d / "pom.xml"
    pom.write_text((LABFILES / "pom.xml.template").read_text().replace("@KAFKA_VERSION@", version)
                   .replace("@KAFKA_ARTIFACT@", artifact))
    print(f"fetching Kafka {version} jars with Maven into {libs} ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(
        ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
         # log4j 1 and its slf4j bindings: old Kafkas bring them; log4j-1.2-api and log4j2 stand in.
         "-DexcludeArtifactIds=log4j,reload4j,slf4j-log4j12,slf4j-reload4j"],
        check=False, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(libs, ignore_errors=True)
        raise LabError(f"mvn failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    missing = set(REQUIRED_CLASSES + (KRAFT_CLASSES if mode == "kraft" else ZOOKEEPER_CLASSES))
    for jar in libs.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            missing -= set(z.namelist())
    if missing:
        shutil.rmtree(libs, ignore_errors=True)
        raise LabError(f"Kafka {version} jars lack {', '.join(sorted(missing))}")
    size = sum(f.stat().st_size for f in libs.glob("*.jar"))
    print(f"fetched {size / 1e6:.0f} MB of jars in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    (libs / ".kafka-version").write_text(version + "\n")
