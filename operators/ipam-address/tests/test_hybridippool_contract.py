"""ipam-address serves CAPI's IPAM contract for in-cluster HybridIPPools, on the real control plane.

Each test runs the operator as users run it (`python -m ipam_address`) against the session's apiserver.
"""

from __future__ import annotations

from typing import Any

import pytest
from ipam_helpers import (
    ADDRESSES,
    CLAIMS,
    addresses_in,
    bound_address,
    claim_condition,
    create_claim,
    create_pool,
    gone,
    pool_ref,
    ready,
)

from capfleet import pausing, resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration


async def test_claims_are_bound_with_contract_owner_refs_and_finalizers(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    pool = await create_pool(kube, namespace, "p", addresses=["10.1.0.0/29"], prefix=24, gateway="10.1.0.1")
    foreign = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}
    await create_claim(kube, namespace, "foreign", foreign)
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "c1", pool_ref("p"))
    await create_claim(kube, namespace, "c2", pool_ref("p"))

    first, second = await bound_address(kube, namespace, "c1"), await bound_address(kube, namespace, "c2")
    assert {first, second} <= {"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"}
    assert first != second

    claim = await kube.get(CLAIMS, "c1", namespace)
    address = await kube.get(ADDRESSES, "c1", namespace)
    assert claim is not None
    assert address is not None
    assert "ipam-address.capfleet.dev/finalizer" in claim["metadata"]["finalizers"]
    assert address["metadata"]["finalizers"] == ["ipam.cluster.x-k8s.io/ProtectAddress"]
    assert address["spec"] == {
        "claimRef": {"name": "c1"},
        "poolRef": pool_ref("p"),
        "address": first,
        "prefix": 24,
        "gateway": "10.1.0.1",
    }
    owners = {(ref["kind"], ref["uid"]): ref for ref in address["metadata"]["ownerReferences"]}
    claim_owner = owners[("IPAddressClaim", claim["metadata"]["uid"])]
    pool_owner = owners[("HybridIPPool", pool["metadata"]["uid"])]
    assert (claim_owner["controller"], claim_owner["blockOwnerDeletion"]) == (True, True)
    assert (pool_owner["controller"], pool_owner["blockOwnerDeletion"]) == (False, True)
    condition = ready(claim)
    assert condition is not None
    assert condition["reason"] == "Allocated"
    assert condition["observedGeneration"] == claim["metadata"]["generation"]

    async def counted() -> dict[str, int] | None:
        found = await kube.get(kinds.HYBRID_IPPOOL.resource, "p", namespace)
        counts = ((found or {}).get("status") or {}).get("ipAddresses")
        return counts if counts and counts["used"] == 2 else None

    assert await eventually("pool counts", counted) == {"total": 5, "used": 2, "free": 3, "outOfRange": 0}

    foreign_claim = await kube.get(CLAIMS, "foreign", namespace)
    assert foreign_claim is not None
    assert not foreign_claim["metadata"].get("finalizers"), "claims for other pool kinds are not ours"
    assert not foreign_claim.get("status"), "claims for other pool kinds are not ours"


async def test_release_and_exhaustion_recovery(kube: Kube, namespace: str, run_operator: RunOperator) -> None:
    await create_pool(kube, namespace, "small", addresses=["fd00:10::1-fd00:10::2"], prefix=64)
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "a", pool_ref("small"))
    await create_claim(kube, namespace, "b", pool_ref("small"))
    taken = {await bound_address(kube, namespace, "a"), await bound_address(kube, namespace, "b")}
    assert taken == {"fd00:10::1", "fd00:10::2"}

    await create_claim(kube, namespace, "c", pool_ref("small"))
    exhausted = await claim_condition(kube, namespace, "c", "PoolExhausted")
    assert exhausted["status"] == "False"
    assert "no free address" in exhausted["message"]

    freed = (await addresses_in(kube, namespace))["a"]
    await kube.delete(CLAIMS, "a", namespace)
    await gone(kube, ADDRESSES, "a", namespace)
    assert await bound_address(kube, namespace, "c", within=15) == freed, (
        "the waiting claim takes the freed address"
    )
    warnings = [e for e in await kube.list(resources.EVENTS, namespace) if e.get("reason") == "PoolExhausted"]
    assert len(warnings) == 1, "one Warning Event for the transition, not one per retry"


async def test_pause_by_annotation_and_by_cluster(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace, "p", addresses=["10.2.0.10-10.2.0.20"], prefix=24)
    cluster = {
        "apiVersion": resources.CAPI_CLUSTERS.api_version,
        "kind": "Cluster",
        "metadata": {"name": "w1"},
        "spec": {"paused": True},
    }
    await kube.create(resources.CAPI_CLUSTERS, cluster, namespace)
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "paused-by-cluster", pool_ref("p"), cluster="w1")

    await eventually("the Paused condition", lambda: has_paused(kube, namespace, "paused-by-cluster"))
    assert await addresses_in(kube, namespace) == {}, "nothing is allocated while the Cluster is paused"

    await kube.patch(resources.CAPI_CLUSTERS, "w1", {"spec": {"paused": False}}, namespace)
    await kube.patch(CLAIMS, "paused-by-cluster", {"metadata": {"labels": {"touch": "1"}}}, namespace)
    await bound_address(kube, namespace, "paused-by-cluster")

    await create_claim(
        kube, namespace, "annotated", pool_ref("p"), annotations={pausing.PAUSED_ANNOTATION: ""}
    )
    await eventually("the annotated claim to report Paused", lambda: has_paused(kube, namespace, "annotated"))
    assert "annotated" not in await addresses_in(kube, namespace)
    await kube.patch(
        CLAIMS, "annotated", {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: None}}}, namespace
    )
    await bound_address(kube, namespace, "annotated")


async def has_paused(kube: Kube, namespace: str, claim: str) -> bool:
    found = await kube.get(CLAIMS, claim, namespace)
    conds = ((found or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Paused" and c["status"] == "True" for c in conds)


async def test_claim_deleted_after_its_cluster_is_gone(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(
        kube, namespace, "p", addresses=["10.3.0.0/30"], prefix=30, allocateReservedIPAddresses=True
    )
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "orphan", pool_ref("p"), cluster="never-existed")
    assert await bound_address(kube, namespace, "orphan") == "10.3.0.0"
    await kube.delete(CLAIMS, "orphan", namespace)
    await gone(kube, CLAIMS, "orphan", namespace, within=30)
    await gone(kube, ADDRESSES, "orphan", namespace, within=30)


async def test_same_address_after_status_wiped_and_address_deleted_by_hand(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace, "p", addresses=["10.4.0.0/24"], prefix=24)
    run_operator("ipam_address", namespaces=[namespace])
    for name in ("x1", "x2", "x3"):
        await create_claim(kube, namespace, name, pool_ref("p"))
    original = {name: await bound_address(kube, namespace, name) for name in ("x1", "x2", "x3")}

    await kube.patch_status(CLAIMS, "x2", {"addressRef": None, "conditions": []}, namespace)
    assert await bound_address(kube, namespace, "x2") == original["x2"]

    before = await kube.get(ADDRESSES, "x3", namespace)
    assert before is not None
    await kube.delete(ADDRESSES, "x3", namespace)

    async def recreated() -> str | None:
        address = await kube.get(ADDRESSES, "x3", namespace)
        if address is None or address["metadata"]["uid"] == before["metadata"]["uid"]:
            return None
        return str(address["spec"]["address"])

    assert await eventually("a new IPAddress for the claim", recreated) == original["x3"]
    assert await addresses_in(kube, namespace) == original

    # The pool's status is a cache too: wiped, it is written again (after the daemon's idle minute).
    await kube.patch_status(
        kinds.HYBRID_IPPOOL.resource, "p", {"conditions": None, "ipAddresses": None}, namespace
    )

    async def pool_status_back() -> dict[str, Any] | None:
        status = ((await kube.get(kinds.HYBRID_IPPOOL.resource, "p", namespace)) or {}).get("status") or {}
        return status if status.get("ipAddresses") and status.get("conditions") else None

    restored = await eventually("the wiped pool status to be written again", pool_status_back, 90, 1)
    assert restored["ipAddresses"] == {"total": 254, "used": 3, "free": 251, "outOfRange": 0}


async def test_claim_for_missing_pool_reports_pool_not_ready(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "lost", pool_ref("nope"))
    condition = await claim_condition(kube, namespace, "lost", "PoolNotReady")
    assert "HybridIPPool" in condition["message"]
    assert "nope" in condition["message"]
    await create_pool(kube, namespace, "nope", addresses=["10.5.0.1"], prefix=32)
    assert await bound_address(kube, namespace, "lost", within=90) == "10.5.0.1"


async def test_pool_deletion_waits_while_addresses_are_allocated(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace, "p", addresses=["10.6.0.1-10.6.0.3"], prefix=24)
    run_operator("ipam_address", namespaces=[namespace])
    await create_claim(kube, namespace, "held", pool_ref("p"))
    await bound_address(kube, namespace, "held")
    await kube.delete(kinds.HYBRID_IPPOOL.resource, "p", namespace)

    async def pool_deleting() -> bool:
        pool = await kube.get(kinds.HYBRID_IPPOOL.resource, "p", namespace)
        return bool(pool and pool["metadata"].get("deletionTimestamp"))

    await eventually("the pool to be marked for deletion", pool_deleting)

    async def in_use() -> dict[str, object] | None:
        condition = ready(await kube.get(kinds.HYBRID_IPPOOL.resource, "p", namespace))
        return condition if condition and condition["reason"] == "PoolInUse" else None

    assert "1 addresses are still allocated" in str((await eventually("PoolInUse", in_use))["message"])
    await kube.delete(CLAIMS, "held", namespace)
    await gone(kube, kinds.HYBRID_IPPOOL.resource, "p", namespace, within=90)
