"""ipam-address does its job with exactly the RBAC of its kustomize base, as its own ServiceAccount.

The operator runs with a TokenRequest token of capfleet-ipam-address-manager, bound only to the
ClusterRole that deploy/overlays/ipam-address renders: if the base lacks a permission the claim is never
bound (or the apiserver's audit log shows a 403), and the test fails.
"""

from __future__ import annotations

import ipaddress

import pytest
from ipam_helpers import ADDRESSES, CLAIMS, bound_address, create_claim, create_pool, gone, pool_ref, ready
from netbox_setup import (
    create_connection_secret,
    create_netbox_pool,
    create_prefixes,
    ensure_owner_field_and_tag,
    owned_ips,
)

from capfleet import instances, ownership, resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e import serviceaccounts
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.namespaces import delete_namespace_while_down
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests

pytestmark = pytest.mark.integration


async def test_claim_is_bound_with_only_the_base_rbac(
    kube: Kube, namespace: str, control_plane: Cluster, run_operator_as: RunOperatorAs
) -> None:
    await create_pool(kube, namespace, "p", addresses=["10.7.0.0/29"], prefix=24, gateway="10.7.0.1")
    run_operator_as("ipam_address", "ipam-address", namespaces=[namespace])
    await create_claim(kube, namespace, "c1", pool_ref("p"))

    address = await bound_address(kube, namespace, "c1")
    assert address in {"10.7.0.2", "10.7.0.3", "10.7.0.4", "10.7.0.5", "10.7.0.6"}
    stored = await kube.get(ADDRESSES, "c1", namespace)
    assert stored is not None
    assert stored["metadata"]["finalizers"] == ["ipam.cluster.x-k8s.io/ProtectAddress"]
    assert (ready(await kube.get(CLAIMS, "c1", namespace)) or {}).get("reason") == "Allocated"

    await kube.delete(CLAIMS, "c1", namespace)  # release: the address and both finalizers go
    await gone(kube, CLAIMS, "c1", namespace)
    await gone(kube, ADDRESSES, "c1", namespace)
    assert forbidden_requests(control_plane, "ipam-address") == []


async def test_deleting_the_namespace_releases_netbox_ips_before_the_pool_and_its_secret_go(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    netbox: NetboxInstance,
) -> None:
    """The NetboxIPPool holds its connection Secret (a finalizer of its own) and is deleted only once no
    address of it is left, so `kubectl delete namespace`, even while the operator is down, releases every
    NetBox IP and completes."""
    ensure_owner_field_and_tag(netbox)
    prefixes = create_prefixes(netbox, 65)
    await create_connection_secret(kube, namespace, netbox)
    await create_netbox_pool(kube, namespace, "nb", [prefixes.small])
    operator = run_operator_as("ipam_address", "ipam-address", namespaces=[namespace])
    for name in ("c1", "c2"):
        await create_claim(kube, namespace, name, pool_ref("nb", "NetboxIPPool"))
        await bound_address(kube, namespace, name)
    # No instance name configured: IPs are owned under the one derived from kube-system's UID.
    cluster = await kube.get(resources.NAMESPACES, "kube-system")
    assert cluster is not None
    instance = instances.derived(cluster["metadata"]["uid"])
    assert set(owned_ips(netbox, prefixes.vrf_id)) == {f"{instance}/{namespace}/{c}@nb" for c in ("c1", "c2")}
    secret = await kube.get(resources.SECRETS, "netbox", namespace)
    assert secret is not None
    assert secret["metadata"]["finalizers"] == [f"{namespace}.netboxippool.holds.capfleet.dev/nb"]

    # Deleted while the operator is down, the Secret stays (Terminating) until the pool lets it go.
    [kept] = await delete_namespace_while_down(kube, namespace, operator, ["netbox"], within=120)
    assert kept["metadata"]["finalizers"] == [f"{namespace}.netboxippool.holds.capfleet.dev/nb"]
    assert owned_ips(netbox, prefixes.vrf_id) == {}
    # Events cannot be created in a terminating namespace: those refusals are the only ones allowed.
    assert [r for r in forbidden_requests(control_plane, "ipam-address") if "/events" not in r] == []


async def test_two_shards_hold_their_leases_and_split_the_claims_with_the_shipped_rbac(
    kube: Kube, namespace: str, control_plane: Cluster, run_operator_as: RunOperatorAs
) -> None:
    """Sharding as users run it: two replicas with `--watch-filter` and `--leader-elect`, each as the
    operator's own ServiceAccount, elect their leaders through Leases of their own in capfleet-system
    (capfleet-ipam-address-<filter>, allowed by the shipped Role and deploy/base's capfleet-own-leases),
    and each serves only what carries its label: a claim of shard a's pool is bound from that pool, which
    shard b never sees."""
    ranges = {"a": "10.9.1.0/29", "b": "10.9.2.0/29"}
    labels = {shard: {"metadata": {"labels": {ownership.WATCH_FILTER_LABEL: shard}}} for shard in ranges}
    for shard, addresses in ranges.items():
        gateway = addresses.replace(".0/29", ".1")
        await create_pool(kube, namespace, f"p-{shard}", addresses=[addresses], prefix=24, gateway=gateway)
        await kube.patch(kinds.HYBRID_IPPOOL.resource, f"p-{shard}", labels[shard], namespace)
    elect = ["--leader-elect", "--leader-election-namespace", serviceaccounts.NAMESPACE]
    for shard in ranges:
        run_operator_as(
            "ipam_address",
            "ipam-address",
            namespaces=[namespace],
            extra_args=["--watch-filter", shard, *elect],
        )
    for shard in ranges:
        await create_claim(kube, namespace, f"c-{shard}", pool_ref(f"p-{shard}"))
        await kube.patch(CLAIMS, f"c-{shard}", labels[shard], namespace)
    for shard, addresses in ranges.items():
        address = await bound_address(kube, namespace, f"c-{shard}")
        assert ipaddress.ip_address(address) in ipaddress.ip_network(addresses), shard
        lease = await kube.get(resources.LEASES, f"capfleet-ipam-address-{shard}", serviceaccounts.NAMESPACE)
        assert ((lease or {}).get("spec") or {}).get("holderIdentity"), f"shard {shard} leads by its Lease"
    # A claim with no shard's label is no shard's: made before one of shard a's, it is still unserved
    # once that one is bound.
    await create_claim(kube, namespace, "c-none", pool_ref("p-a"))
    await create_claim(kube, namespace, "c-a2", pool_ref("p-a"))
    await kube.patch(CLAIMS, "c-a2", labels["a"], namespace)
    await bound_address(kube, namespace, "c-a2")
    assert not ((await kube.get(CLAIMS, "c-none", namespace)) or {}).get("status"), "served by no shard"
    assert forbidden_requests(control_plane, "ipam-address") == []
