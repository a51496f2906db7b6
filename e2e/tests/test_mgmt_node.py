"""capfleet as users install it: `clusterctl init` of a release built in this run, the fleet as pods.

The release comes from `make release` in the same run (the `capfleet_release` fixture); the management
cluster (capfleet_e2e.mgmtcluster) has a node that loads the release's image archives into containerd and
never pulls. `clusterctl init --infrastructure capfleet --ipam capfleet` installs the two providers from
the release directory, and every Deployment must become Available: the pods start as their non-root user
on a read-only root file system from the digest-pinned images, pass their probes, reach the API server
with their own ServiceAccount tokens through the `kubernetes` Service, and elect a leader per operator
through its Lease.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from capfleet_e2e.capibin import CAPI_VERSION
from capfleet_e2e.clusterctl_components import INFRASTRUCTURE, IPAM
from capfleet_e2e.images import OPERATORS, OciArchive
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.mgmtcluster import ManagementCluster
from capfleet_e2e.release import Release
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

NAMESPACE = "capfleet-system"
LEADER_LABEL = "capfleet.dev/leader"
# A pod's resident memory once idle: the fleet's target for one operator process is 100 MB, and
# baremetal-provision's pod adds its boot front's.
IDLE_POD_MIB = 150.0


@pytest.fixture(scope="module")
def mgmt(capfleet_release: Release) -> Iterator[ManagementCluster]:
    with ManagementCluster(capfleet_release) as cluster:
        yield cluster


def get(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", *args, "-o", "json")))


def deployments(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    found = get(kubectl, "deployments", "-n", NAMESPACE)["items"]
    return {d["metadata"]["name"]: d for d in found}


def available(deployment: dict[str, Any]) -> bool:
    status, wanted = deployment.get("status", {}), deployment["spec"]["replicas"]
    return bool(status.get("availableReplicas") == wanted == status.get("updatedReplicas"))


async def test_clusterctl_init_installs_the_release_and_the_fleet_runs_as_pods(
    mgmt: ManagementCluster, capfleet_release: Release
) -> None:
    assert mgmt.node is not None
    kubectl = mgmt.kubectl
    try:
        seconds = mgmt.init()
    except BaseException:
        print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
        raise
    print(f"clusterctl init to every Deployment Available: {seconds:.1f} s")
    assert mgmt.providers() == {
        "cluster-api": CAPI_VERSION,
        "bootstrap-kubeadm": CAPI_VERSION,
        "control-plane-kubeadm": CAPI_VERSION,
        INFRASTRUCTURE.name: capfleet_release.tag,
        IPAM.name: capfleet_release.tag,
    }
    tag = capfleet_release.tag
    pinned = {
        op: f"docker.io/capfleet/{op}:{tag}@{OciArchive(capfleet_release.archive(op)).digest}"
        for op in OPERATORS
    }
    installed = deployments(kubectl)
    assert set(installed) == {f"capfleet-{op}-manager" for op in OPERATORS}
    assert all(available(d) for d in installed.values()), "clusterctl's --wait-providers waited for them"
    for name, deployment in installed.items():
        provider = IPAM if name == "capfleet-ipam-address-manager" else INFRASTRUCTURE
        assert deployment["metadata"]["labels"]["cluster.x-k8s.io/provider"] == provider.name
        assert deployment["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"] == ""

    pods = get(kubectl, "pods", "-n", NAMESPACE)["items"]
    assert len(pods) == 2 * len(OPERATORS), "two replicas each"
    for pod in pods:
        assert pod["spec"]["nodeName"] == mgmt.node.name
        operator = next(op for op in OPERATORS if pod["metadata"]["name"].startswith(f"capfleet-{op}-"))
        assert {c["image"] for c in pod["spec"]["containers"]} == {pinned[operator]}
        for container in pod["status"]["containerStatuses"]:
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

    # Each operator says which release it runs (the image's CAPFLEET_VERSION) in its first log line.
    for pod in pods:
        operator = next(op for op in OPERATORS if pod["metadata"]["name"].startswith(f"capfleet-{op}-"))
        log = mgmt.node.container_log(pod, "manager")
        assert f"{operator} {capfleet_release.version} starting" in log, log[:2000]

    # Each pod's resident memory once the fleet is idle (every Deployment Available, leaders elected).
    rss = {p["metadata"]["name"]: mgmt.node.pod_rss(p["metadata"]["uid"]) / 2**20 for p in pods}
    print("idle pod memory (MiB): " + ", ".join(f"{name} {mib:.0f}" for name, mib in sorted(rss.items())))
    assert all(0 < mib < IDLE_POD_MIB for mib in rss.values()), rss
