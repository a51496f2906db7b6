"""The fleet as users run it: pods from the images built here, on a node of the management cluster.

The images come from `make images` in the same run (capfleet_e2e.images); the node (capfleet_e2e.mgmtnode)
loads their archives into containerd and never pulls. The all-in-one overlay is applied as it ships, with
only its image tags set, and every Deployment must become Available: the pods start as their non-root
user on a read-only root file system, pass their probes, reach the API server with their own
ServiceAccount tokens through the `kubernetes` Service, and elect a leader per operator through its Lease.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.images import OPERATORS, ensure_images
from capfleet_e2e.kubebin import Kubectl, repo_root
from capfleet_e2e.mgmtnode import ManagementNode
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

NAMESPACE = "capfleet-system"
TAG = "v0.0.0-test"
AVAILABLE_SECONDS = 300.0
LEADER_LABEL = "capfleet.dev/leader"


@pytest.fixture(scope="module")
def node(control_plane: Cluster) -> Iterator[ManagementNode]:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("the management node joins only the local control plane")
    archives = ensure_images(TAG)
    with ManagementNode(control_plane, archives.values()) as started:
        try:
            yield started
        finally:
            # The fleet's workloads go while the node still runs, so its containers really stop; the CRDs
            # and RBAC the overlay applied stay, as the other suites install the same.
            control_plane.kubectl(
                "delete",
                "deployments,services,leases",
                "--all",
                "-n",
                NAMESPACE,
                "--wait=true",
                "--timeout=120s",
            )
            control_plane.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def tagged(manifests: str, tag: str) -> str:
    """The overlay's manifests with every capfleet image at `tag`, as `kustomize edit set image` would."""
    return re.sub(r"image: capfleet/([a-z-]+):\S+", rf"image: capfleet/\1:{tag}", manifests)


def get(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", *args, "-o", "json")))


def deployments(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    found = get(kubectl, "deployments", "-n", NAMESPACE)["items"]
    return {d["metadata"]["name"]: d for d in found}


def available(deployment: dict[str, Any]) -> bool:
    status, wanted = deployment.get("status", {}), deployment["spec"]["replicas"]
    return bool(status.get("availableReplicas") == wanted == status.get("updatedReplicas"))


async def test_the_fleet_runs_as_pods_from_the_images_built_here(node: ManagementNode) -> None:
    kubectl = node.cp.kubectl
    # --force-conflicts: the RBAC tests of the same session apply deploy/base under their own field manager.
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(repo_root() / "deploy" / "base"))
    manifests = kubectl("kustomize", str(repo_root() / "deploy" / "overlays" / "all-in-one"))
    kubectl("apply", "--server-side", "-f", "-", stdin=tagged(manifests, TAG))
    names = {f"capfleet-{op}-manager" for op in OPERATORS}
    began = time.monotonic()

    async def all_available() -> dict[str, dict[str, Any]] | None:
        found = deployments(kubectl)
        return found if names <= set(found) and all(available(found[n]) for n in names) else None

    try:
        await eventually("the five Deployments Available", all_available, AVAILABLE_SECONDS, 2.0)
    except BaseException:
        print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
        raise
    print(f"all five Deployments Available {time.monotonic() - began:.1f} s after apply")

    pods = get(kubectl, "pods", "-n", NAMESPACE)["items"]
    assert len(pods) == 2 * len(OPERATORS), "two replicas each"
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.name
        for container in pod["status"]["containerStatuses"]:
            assert container["image"].endswith(f":{TAG}"), container["image"]
            assert container["ready"], (pod["metadata"]["name"], container["name"])
            assert container["restartCount"] == 0, (pod["metadata"]["name"], container["name"])

    # One leader per operator, holding its Lease under the name of one of its pods (a standby is Available
    # before any replica leads: liveness is served while it waits).
    own = {
        op: [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(f"capfleet-{op}-")]
        for op in OPERATORS
    }

    async def one_leader_each() -> dict[str, str] | None:
        leases = get(kubectl, "leases", "-n", NAMESPACE)["items"]
        holders = {lease["metadata"]["name"]: lease["spec"].get("holderIdentity") or "" for lease in leases}
        found = {op: holders.get(f"capfleet-{op}", "") for op in OPERATORS}
        led = all(any(found[op].startswith(f"{pod}_") for pod in own[op]) for op in OPERATORS)
        return found if led else None

    await eventually("a leader for each operator", one_leader_each, 60.0, 1.0)
    pods = get(kubectl, "pods", "-n", NAMESPACE)["items"]

    # baremetal-provision's boot Service selects the leader alone.
    leaders = [p for p in pods if p["metadata"].get("labels", {}).get(LEADER_LABEL) == "true"]
    assert [p["metadata"]["name"] for p in leaders if "baremetal-provision" in p["metadata"]["name"]], leaders
    boot = get(
        kubectl,
        "endpointslices",
        "-n",
        NAMESPACE,
        "-l",
        "kubernetes.io/service-name=capfleet-baremetal-provision-boot",
    )
    addresses = [a for s in boot["items"] for e in s.get("endpoints") or [] for a in e["addresses"]]
    assert len(addresses) == 1
