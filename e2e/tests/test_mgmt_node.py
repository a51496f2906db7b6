"""capfleet as users install and upgrade it: `clusterctl init` of a release built in this run, the fleet
as pods, a hybrid cluster provisioned by them through an upgrade and a downgrade of one operator.

The release comes from `make release` in the same run (the `capfleet_release` fixture); the management
cluster (capfleet_e2e.mgmtcluster) has a node that loads the release's image archives into containerd and
never pulls. `clusterctl init --infrastructure capfleet --ipam capfleet` installs the two providers from
the release directory, and every Deployment (the five operators' and the console's) must become
Available: the pods start as their non-root user on a read-only root file system from the digest-pinned
images, pass their probes, reach the API server with their own ServiceAccount tokens through the
`kubernetes` Service, and elect a leader per operator through its Lease.

Then a hybrid cluster (capfleet_e2e.podfleet: the pods reach the hypervisor, NetBox and the BMC through
the node's gateway, the lab's servers reach the `boot` Service) is provisioned while ipam-address alone
moves to a second release with `clusterctl upgrade apply --ipam` and back with its kustomize overlay
(`kustomize edit set image`, `kubectl apply -k`): each rollout completes, the Lease passes to a pod of
the new version, no other pod restarts, no claim gets two addresses, and the cluster finishes
provisioning and is deleted with nothing left.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from baremetal_provision.markers import BOOT_REQUESTER  # type: ignore[import-untyped]
from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.capibin import CAPI_VERSION
from capfleet_e2e.clusterctl_components import INFRASTRUCTURE, IPAM
from capfleet_e2e.images import IMAGES, OPERATORS, OciArchive
from capfleet_e2e.kubebin import Kubectl
from capfleet_e2e.kustomize import copy_deploy_tree, set_image
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.mgmtcluster import ManagementCluster
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.podfleet import PodFleet
from capfleet_e2e.release import Release
from capfleet_e2e.release import build as build_release
from capfleet_e2e.serviceaccounts import service_account_user
from capfleet_e2e.site import HybridSite, domains_of, open_site
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


def image_of(pod: dict[str, Any]) -> str:
    """Which of capfleet's images a pod of capfleet-system runs, by its name."""
    return next(i for i in IMAGES if pod["metadata"]["name"].startswith(f"capfleet-{i}-"))


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
        image: f"docker.io/capfleet/{image}:{tag}@{OciArchive(capfleet_release.archive(image)).digest}"
        for image in IMAGES
    }
    installed = deployments(kubectl)
    assert set(installed) == {f"capfleet-{image}-manager" for image in IMAGES}, "five operators, the console"
    assert all(available(d) for d in installed.values()), "clusterctl's --wait-providers waited for them"
    for name, deployment in installed.items():
        provider = IPAM if name == "capfleet-ipam-address-manager" else INFRASTRUCTURE
        assert deployment["metadata"]["labels"]["cluster.x-k8s.io/provider"] == provider.name
        assert deployment["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"] == ""

    pods = get(kubectl, "pods", "-n", NAMESPACE)["items"]
    assert len(pods) == 2 * len(OPERATORS) + 1, "two replicas of each operator, one console"
    for pod in pods:
        assert pod["spec"]["nodeName"] == mgmt.node.name
        assert {c["image"] for c in pod["spec"]["containers"]} == {pinned[image_of(pod)]}
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

    # Each leader's kopf really runs: it watches its kinds with its own ServiceAccount (in-cluster, the
    # API server is the `kubernetes` Service's address; this node, like a cluster whose DNS is down, has no
    # cluster DNS for kubernetes.default.svc).
    async def every_operator_watches() -> bool:
        events, _ = mgmt.cp.audit_events()
        watching = {
            e["user"]["username"]
            for e in events
            if e.get("verb") == "watch" and e.get("responseStatus", {}).get("code", 200) < 400
        }
        return all(service_account_user(op) in watching for op in OPERATORS)

    await eventually("every operator watching its kinds", every_operator_watches, 60.0, 1.0)

    # Each operator says which release it runs (the image's CAPFLEET_VERSION) in its first log line.
    for pod in pods:
        operator = image_of(pod)
        if operator not in OPERATORS:
            continue
        log = mgmt.node.container_log(pod, "manager")
        assert f"{operator} {capfleet_release.version} starting" in log, log[:2000]

    # Each pod's resident memory once the fleet is idle (every Deployment Available, leaders elected).
    rss = {p["metadata"]["name"]: mgmt.node.pod_rss(p["metadata"]["uid"]) / 2**20 for p in pods}
    print("idle pod memory (MiB): " + ", ".join(f"{name} {mib:.0f}" for name, mib in sorted(rss.items())))
    assert all(0 < mib < IDLE_POD_MIB for mib in rss.values()), rss


# --- a hybrid cluster with the fleet as pods, through an upgrade and a downgrade --------------------------

UPGRADE_VERSION = "0.1.1-test"
UPGRADED = "ipam-address"
SERVER_BOOT_SECONDS = 300.0
ROLLOUT_SECONDS = 180.0


@pytest.fixture
async def pod_site(
    mgmt: ManagementCluster,
    capfleet_release: Release,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    netbox: NetboxInstance,
    tmp_path: Path,
) -> AsyncIterator[tuple[HybridSite, PodFleet]]:
    if not mgmt.initialized:
        mgmt.init()
    mgmt.start_capi()
    fleet = PodFleet(mgmt)
    tenant_rbac = capfleet_release.tenant_rbac
    namespace = f"pods-{secrets.token_hex(3)}"
    async with Kube.connect("capfleet-tests", str(mgmt.cp.kubeconfig)) as kube:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        await kube.create(resources.NAMESPACES, body)
        try:
            async with open_site(
                kube=kube,
                namespace=namespace,
                control_plane=mgmt.cp,
                hypervisor=hypervisors[0],
                vm_image=test_image,
                pxe_lab=pxe_lab,
                servers=baremetal_servers(1),
                netboot=netboot_image,
                netbox=netbox,
                start_operator=fleet.start_operator,
                workdir=tmp_path,
                reach=fleet.reach,
                boot=fleet.boot,
                # As a clusterctl user opts a namespace in: the release's copy of deploy/tenant.
                onboard=lambda kubectl, ns: kubectl("apply", "-n", ns, "-f", str(tenant_rbac)),
            ) as site:
                fleet.settle()
                yield site, fleet
                await site.delete_namespace()
        finally:
            fleet.stop()


def pod_states(kubectl: Kubectl) -> dict[str, tuple[str, int]]:
    """Every capfleet pod's name → (UID, total restarts)."""
    return {
        pod["metadata"]["name"]: (
            pod["metadata"]["uid"],
            sum(c["restartCount"] for c in pod["status"].get("containerStatuses") or []),
        )
        for pod in get(kubectl, "pods", "-n", NAMESPACE)["items"]
    }


def others(states: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    return {name: state for name, state in states.items() if not name.startswith(f"capfleet-{UPGRADED}-")}


async def rolled_out(mgmt: ManagementCluster, image: str, version: str) -> list[dict[str, Any]]:
    """Wait until UPGRADED runs only pods of `image`, all Ready, one of them leading, each saying in its
    first log line that it runs `version`; return those pods."""
    assert mgmt.node is not None
    node = mgmt.node

    waiting = ["nothing seen yet"]

    def short(pod: dict[str, Any]) -> str:
        statuses = pod["status"].get("containerStatuses") or []
        ready = [c["ready"] for c in statuses]
        return f"{pod['metadata']['name']} {pod['spec']['containers'][0]['image']} ready={ready}"

    def why_not(pods: list[dict[str, Any]]) -> str | None:
        if len(pods) != 2 or any(p["metadata"].get("deletionTimestamp") for p in pods):
            return "not two pods"
        if any({c["image"] for c in p["spec"]["containers"]} != {image} for p in pods):
            return "another image"
        if not all(
            c["ready"] for p in pods for c in p["status"].get("containerStatuses") or [{"ready": False}]
        ):
            return "not ready"
        lease = get(mgmt.kubectl, "lease", f"capfleet-{UPGRADED}", "-n", NAMESPACE)
        holder = lease["spec"].get("holderIdentity") or ""
        if not any(holder.startswith(f"{p['metadata']['name']}_") for p in pods):
            return f"the Lease is held by {holder!r}"
        if not all(f"{UPGRADED} {version} starting" in node.container_log(p, "manager") for p in pods):
            return "another version in the log"
        return None

    async def done() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in get(mgmt.kubectl, "pods", "-n", NAMESPACE)["items"]
            if p["metadata"]["name"].startswith(f"capfleet-{UPGRADED}-")
        ]
        reason = why_not(pods)
        waiting[0] = f"{reason}: {[short(p) for p in pods]}"
        return pods if reason is None else None

    try:
        return await eventually(f"{UPGRADED} {version} rolled out and leading", done, ROLLOUT_SECONDS, 2.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {waiting[0]}") from exc


async def one_address_per_claim(site: HybridSite) -> bool:
    claims = await site.kube.list(resources.IP_ADDRESS_CLAIMS, site.namespace)
    addresses = await site.kube.list(resources.IP_ADDRESSES, site.namespace)
    claimed = [a["spec"]["claimRef"]["name"] for a in addresses]
    assert len(claimed) == len(set(claimed)), f"a claim with two addresses: {claimed}"
    assert len({a["spec"]["address"] for a in addresses}) == len(addresses), "an address given twice"
    return bool(claims) and sorted(claimed) == sorted(c["metadata"]["name"] for c in claims)


async def test_a_hybrid_cluster_provisions_with_the_fleet_as_pods_through_one_operators_upgrade_and_downgrade(
    pod_site: tuple[HybridSite, PodFleet],
    mgmt: ManagementCluster,
    capfleet_release: Release,
    pxe_lab: PxeLab,
    tmp_path: Path,
) -> None:
    site, _ = pod_site
    kubectl = mgmt.kubectl
    upgrade = build_release(UPGRADE_VERSION, tmp_path / "dist-upgrade", providers=(IPAM,))
    mgmt.add_release(upgrade)
    before = pod_states(kubectl)

    site.apply(site.manifest())
    # Provisioning is under way once the control-plane machine's VM and address claim exist.
    await eventually(
        "the control-plane VM and its address claim",
        lambda: vm_and_claim(site),
        120,
    )

    # Upgrade: ipam-address alone, the provider as a whole, with clusterctl.
    began = time.monotonic()
    mgmt.clusterctl("upgrade", "apply", "--ipam", f"{NAMESPACE}/capfleet:{upgrade.tag}", "--wait-providers")
    new_image = f"docker.io/capfleet/{UPGRADED}:{upgrade.tag}@{OciArchive(upgrade.archive(UPGRADED)).digest}"
    upgraded = await rolled_out(mgmt, new_image, UPGRADE_VERSION)
    print(f"clusterctl upgrade apply to the new leader: {time.monotonic() - began:.1f} s")
    assert mgmt.providers()[IPAM.name] == upgrade.tag
    assert mgmt.providers()[INFRASTRUCTURE.name] == capfleet_release.tag
    assert others(pod_states(kubectl)) == others(before), "no other operator's pod restarted"
    assert not {p["metadata"]["uid"] for p in upgraded} & {uid for uid, _ in before.values()}

    await site.bring_up(server_seconds=SERVER_BOOT_SECONDS)
    assert await one_address_per_claim(site)
    # Through the boot Service (LoadBalancer, externalTrafficPolicy Local) each server's attempt was bound
    # to the server's own address: kube-proxy did not rewrite the sources to the node's.
    assert await boot_requesters(site) == {s.mac.lower(): pxe_lab.address_of(s) for s in site.servers}

    # Downgrade: the operator's own overlay, back at the first release's tag, applied with kubectl.
    began = time.monotonic()
    tree = copy_deploy_tree(tmp_path / "deploy-tree")
    overlay = tree / "deploy" / "overlays" / UPGRADED
    old_image = f"docker.io/capfleet/{UPGRADED}:{capfleet_release.tag}"
    set_image(overlay, f"capfleet/{UPGRADED}={old_image}")
    # --force-conflicts: clusterctl manages the same fields under its own name.
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    await rolled_out(mgmt, old_image, capfleet_release.version)
    print(f"kubectl apply -k of the downgrade to the new leader: {time.monotonic() - began:.1f} s")
    assert others(pod_states(kubectl)) == others(before), "no other operator's pod restarted"
    assert await one_address_per_claim(site)

    # Deleted through the downgraded operator: nothing is left in Kubernetes, libvirt or NetBox.
    await site.delete_cluster()
    for kind in (kinds.HYBRID_MACHINE, kinds.LIBVIRT_VM, kinds.NETBOX_DEVICE, kinds.BAREMETAL_INSTANCE):
        assert await site.kube.list(kind.resource, site.namespace) == [], f"{kind.kind} left behind"
    assert await site.kube.list(resources.IP_ADDRESSES, site.namespace) == []
    assert domains_of(site.hypervisor, site.namespace) == []
    ours = {s.name for s in site.servers}
    devices = [d for d in site.netbox.client.list_all("dcim/devices/") if d["name"] in ours]
    assert [d["name"] for d in devices if (d.get("custom_fields") or {}).get("capfleet_owner")] == []
    assert others(pod_states(kubectl)) == others(before), "no other operator's pod restarted"


async def boot_requesters(site: HybridSite) -> dict[str, str | None]:
    """Boot MAC → the address its BaremetalInstance's attempt is bound to."""
    instances = await site.kube.list(kinds.BAREMETAL_INSTANCE.resource, site.namespace)
    return {
        i["spec"]["bootMACAddress"].lower(): (i["metadata"].get("annotations") or {}).get(BOOT_REQUESTER)
        for i in instances
    }


async def vm_and_claim(site: HybridSite) -> bool:
    vms = await site.kube.list(kinds.LIBVIRT_VM.resource, site.namespace)
    claims = await site.kube.list(resources.IP_ADDRESS_CLAIMS, site.namespace)
    return bool(vms) and bool(claims)
