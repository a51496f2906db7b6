"""`capfleet describe` and `capfleet get` against a real API server, and `kubectl capfleet` as a plugin.

No operator runs: the objects are written as the operators would leave them, so what is checked is what
the CLI reads and how it shows it.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capfleet import cli
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.standins import paused_cluster

pytestmark = pytest.mark.integration


async def run(kubeconfig: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    args = cli.parser().parse_args([*argv, "--kubeconfig", str(kubeconfig), "--color", "never"])
    return await cli.show(args, out), out.getvalue()


async def make_cluster(kube: Kube, namespace: str) -> None:
    owner = await paused_cluster(kube, namespace, "c1")
    vm = {
        "apiVersion": kinds.LIBVIRT_VM.resource.api_version,
        "kind": "LibvirtVM",
        "metadata": {"name": "c1-cp-0", "ownerReferences": [owner]},
        "spec": {
            "vcpus": 2,
            "memoryMiB": 1024,
            "disks": [{"name": "root", "sizeGiB": 10}],
            "cloudInit": {"userDataSecretRef": {"name": "c1-cp-0"}},
        },
    }
    await kube.create(kinds.LIBVIRT_VM.resource, vm, namespace)
    status: dict[str, Any] = {
        "state": "running",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "QuotaExceeded",
                "message": "Scheduled: VMQuota team: vCPUs 4 used + 2 asked > 4 allowed",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    await kube.patch_status(kinds.LIBVIRT_VM.resource, "c1-cp-0", status, namespace)
    quota = {
        "apiVersion": kinds.VM_QUOTA.resource.api_version,
        "kind": "VMQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"vcpus": 4}},
    }
    await kube.create(kinds.VM_QUOTA.resource, quota, namespace)


async def test_describe_and_get_show_the_objects_and_why_they_wait(
    kube: Kube, namespace: str, kubeconfig: Path
) -> None:
    await make_cluster(kube, namespace)
    code, text = await run(kubeconfig, "describe", "cluster", "c1", "-n", namespace)
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "Cluster c1"
    assert any(
        line.endswith("LibvirtVM c1-cp-0  hypervisor=None  domain=None  state=running") for line in lines
    )
    assert any(
        "✗ Ready: QuotaExceeded: Scheduled: VMQuota team: vCPUs 4 used + 2 asked > 4 allowed" in line
        for line in lines
    )

    code, text = await run(kubeconfig, "get", "vms", "-n", namespace)
    assert code == 0
    header, row = text.splitlines()
    assert header.split()[:3] == ["NAMESPACE", "NAME", "VCPUS"]
    assert row.split()[:2] == [namespace, "c1-cp-0"]
    assert "QuotaExceeded" in row
    assert "Cluster/c1" in row

    code, text = await run(kubeconfig, "get", "quotas", "-n", namespace)
    assert text.splitlines()[1].split() == [namespace, "team", "0", "/", "4", "-", "-", "-"]

    code, _ = await run(kubeconfig, "describe", "cluster", "nope", "-n", namespace)
    assert code == 1


async def test_kubectl_runs_it_as_a_plugin(
    kube: Kube, namespace: str, kubeconfig: Path, control_plane: Cluster
) -> None:
    await make_cluster(kube, namespace)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "kubectl-capfleet").exists()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}
    kubectl = control_plane.kubectl.binary
    done = await asyncio.to_thread(
        subprocess.run,
        [str(kubectl), "capfleet", "get", "vms", "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "c1-cp-0" in done.stdout
    assert "\033[" not in done.stdout  # not a terminal: no colour
