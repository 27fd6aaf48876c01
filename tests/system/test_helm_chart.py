"""The Helm chart (deploy/kubernetes/chart/kdiag) renders and validates against the Kubernetes API types
(scripts/helm-check), and its DaemonSet runs kdiag as the systemd unit does: the host's PID namespace, /proc and /sys
read-only, the unit's two capabilities and no others."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("KDIAG_TOOLS", Path.home() / ".cache" / "kdiag-tools")) / "bin"


@pytest.fixture(scope="module")
def tools() -> Path:
    build = subprocess.run(["bash", str(ROOT / "scripts" / "helm-check"), "--build"], capture_output=True, text=True,
                           timeout=1200)
    if build.returncode == 3:
        pytest.skip(f"helm and kube-validate cannot be built here: {build.stderr.strip()[-300:]}")
    assert build.returncode == 0, build.stderr
    return TOOLS


@pytest.mark.integration
def test_the_chart_renders_validates_and_matches_the_plain_manifest(tools: Path) -> None:
    check = subprocess.run(["bash", str(ROOT / "scripts" / "helm-check")], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "DaemonSet/kdiag: valid apps/v1" in check.stdout and "ServiceMonitor/kdiag: valid" in check.stdout


@pytest.mark.integration
@pytest.mark.parametrize("bad", [
    ("hostPID: true", "hostPid: true"),  # a misspelt field
    ("readOnly: true", "readOnly: yes-please"),  # a wrong type
    ("kind: DaemonSet", "kind: DaemonSett"),  # an unknown kind
])
def test_the_validator_refuses_what_kubernetes_would(tools: Path, bad: tuple[str, str]) -> None:
    rendered = (ROOT / "deploy" / "kubernetes" / "kdiag.yaml").read_text()
    assert bad[0] in rendered
    run = subprocess.run([str(tools / "kube-validate")], input=rendered.replace(bad[0], bad[1], 1), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1 and "DaemonSet" in run.stdout, run.stdout


@pytest.mark.unit
def test_the_daemonset_has_the_units_capabilities_host_pid_and_read_only_proc_and_sys() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "kdiag.yaml").read_text()) if d]
    spec = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    (container,) = spec["containers"]
    unit = (ROOT / "systemd" / "kdiag.service").read_text()
    caps = re.search(r"^AmbientCapabilities=(.+)$", unit, re.M)
    assert caps
    assert set(container["securityContext"]["capabilities"]["add"]) == {c.removeprefix("CAP_") for c in caps[1].split()}
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    paths = {v["name"]: v.get("hostPath", {}).get("path") for v in spec["volumes"]}
    for name, host in (("proc", "/proc"), ("sys", "/sys")):
        assert paths[name] == host and mounts[name]["readOnly"] is True
    assert container["args"][container["args"].index("--procfs") + 1] == mounts["proc"]["mountPath"]
    assert container["args"][container["args"].index("--sysfs") + 1] == mounts["sys"]["mountPath"]
