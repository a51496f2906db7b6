"""Unit tests of releasing claims and of whose they are: the finalizer, a move, NetBox's release (and a
detached claim's without NetBox), ownership of claims and addresses, the deprecated pool kind and a
NetBox pool's readiness, against the in-memory fakes of serving_fakes.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from serving_fakes import (
    FINALIZER,
    NAMESPACE,
    FakeKube,
    FakeNetbox,
    claim_body,
    claim_of,
    conditions,
    context,
    hybridippool,
    netbox_pool,
    netbox_secret,
)

from capfleet import errors, pausing
from capfleet.kube import Kube, KubeError
from capfleet.resources import Resource
from ipam_address import claims, pools, serving
from ipam_address.backends.netbox import NetboxAddress
from ipam_address.claims import Claim
from ipam_address.pools import PoolInfo, PoolKey


def test_only_a_netbox_claim_or_one_that_holds_the_finalizer_waits_for_its_release() -> None:
    assert not claims.needs_finalizer(claim_of(claim_body()), FINALIZER)
    assert claims.needs_finalizer(claim_of(claim_body("nb", "NetboxIPPool")), FINALIZER)
    held = claim_body()
    held["metadata"]["finalizers"] = ["someone-else", FINALIZER]
    assert claims.needs_finalizer(claim_of(held), FINALIZER)


async def test_the_finalizer_is_computed_again_after_a_conflict_never_on_a_claim_going() -> None:
    class Conflicting(FakeKube):
        async def patch(
            self, resource: Resource, name: str, patch: dict[str, Any], namespace: str | None = None
        ) -> dict[str, Any] | None:
            if patch["metadata"]["resourceVersion"] == "7":
                raise KubeError(409, "Conflict", "the object has been modified")
            return await super().patch(resource, name, patch, namespace)

    fresh = claim_body()
    fresh["metadata"].update(resourceVersion="8", finalizers=["creator/protection"])
    kube = Conflicting(fresh)
    await claims.hold_for_release(cast(Kube, kube), claim_body(), FINALIZER)
    assert kube.patches == [
        (
            "IPAddressClaim",
            "c1",
            {"metadata": {"finalizers": ["creator/protection", FINALIZER], "resourceVersion": "8"}},
        )
    ]
    going = claim_body()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await claims.hold_for_release(cast(Kube, kube), going, FINALIZER)
    assert len(kube.patches) == 1


async def test_a_claim_that_moves_leaves_netbox_alone_and_lets_its_address_go() -> None:
    address = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddress",
        "metadata": {
            "name": "c1",
            "uid": "a-uid",
            "resourceVersion": "5",
            "finalizers": [claims.PROTECT_FINALIZER, "other"],
            "ownerReferences": [{"uid": "claim-uid"}],
        },
    }
    kube = FakeKube(address)
    netbox = FakeNetbox(owned=NetboxAddress(4, "10.0.0.4/24"))
    ctx = context(kube, netbox_pool(), netbox=netbox)
    moving = claim_body("nb", "NetboxIPPool", annotations={pausing.DELETE_FOR_MOVE_ANNOTATION: ""})
    await serving.release_claim(ctx, claim_of(moving))
    assert netbox.released == []
    assert kube.patches == [
        ("IPAddress", "c1", {"metadata": {"finalizers": ["other"], "resourceVersion": "5"}})
    ]
    assert kube.deleted == [("IPAddress", "c1")]


@pytest.mark.parametrize("marked", [False, True])
async def test_netbox_is_asked_to_release_only_what_a_claim_may_have_written_there(marked: bool) -> None:
    netbox = FakeNetbox(owned=NetboxAddress(4, "10.0.0.4/24"))
    ctx = context(FakeKube(netbox_secret()), netbox_pool(), netbox=netbox)
    annotations = {claims.NETBOX_MARK: "started"} if marked else {}
    await serving.release_claim(ctx, claim_of(claim_body("nb", "NetboxIPPool", annotations=annotations)))
    assert netbox.released == ([4] if marked else [])
    # A claim served before the mark existed has its address: NetBox is asked too.
    bound = context(
        FakeKube(netbox_secret()),
        netbox_pool(),
        bound={(NAMESPACE, "c1"): ("10.0.0.4", False)},
        netbox=netbox,
    )
    await serving.release_claim(bound, claim_of(claim_body("nb", "NetboxIPPool")))
    assert netbox.released[-1] == 4


async def test_a_detached_claim_is_released_without_netbox() -> None:
    """NetBox gone for good: a claim annotated detached lets its IPAddress go without asking NetBox, whose
    IP stays as it is, so the deletion cannot wait for a NetBox that never comes back."""
    netbox = FakeNetbox(owned=NetboxAddress(4, "10.0.0.4/24"))
    netbox.fail = errors.BackendUnavailable("NetBox answered 503", reason="NetBoxUnavailable")
    ctx = context(FakeKube(netbox_secret()), netbox_pool(), netbox=netbox)
    marked = {claims.NETBOX_MARK: "started"}
    with pytest.raises(errors.BackendUnavailable):
        await serving.release_claim(ctx, claim_of(claim_body("nb", "NetboxIPPool", annotations=marked)))
    detached = {**marked, claims.DETACHED: "true"}
    await serving.release_claim(ctx, claim_of(claim_body("nb", "NetboxIPPool", annotations=detached)))
    assert netbox.released == []


def test_only_claims_and_addresses_of_our_pools_are_ours() -> None:
    foreign = claim_body()
    foreign["spec"]["poolRef"] = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}
    assert Claim.of(foreign) is None
    assert claim_of(claim_body()).pool == PoolKey(NAMESPACE, "HybridIPPool", "p")
    address: dict[str, Any] = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddress",
        "metadata": {"name": "x", "namespace": NAMESPACE, "deletionTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {
            "claimRef": {"name": "c1"},
            "poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "p"},
            "address": "fd00:0::1",
            "prefix": 64,
        },
    }
    assert pools.holding_of(address) == pools.Holding(
        PoolKey(NAMESPACE, "HybridIPPool", "p"), "fd00::1", "c1", True
    )
    address["spec"]["poolRef"] = foreign["spec"]["poolRef"]
    assert pools.holding_of(address) is None


async def test_a_claim_of_the_deprecated_kind_ippool_is_served_from_the_hybridippool_with_a_warning() -> None:
    kube = FakeKube()
    ctx = context(kube, hybridippool(addresses=["10.1.0.0/29"], prefix=24))
    old = claim_body(kind="IPPool")
    claim = claim_of(old)
    assert claim.pool == PoolKey(NAMESPACE, "HybridIPPool", "p")
    assert claim.names_deprecated_kind
    assert not claim_of(claim_body()).names_deprecated_kind
    await serving.serve_claim(ctx, claim)
    await serving.serve_claim(ctx, claim_of(old))  # served again (a restart, a repair): warned once

    address = kube.objects[("IPAddress", "c1")]
    assert address["spec"]["poolRef"] == {
        "apiGroup": "ipam.capfleet.dev",
        "kind": "HybridIPPool",
        "name": "p",
    }
    assert [r["kind"] for r in address["metadata"]["ownerReferences"]] == ["IPAddressClaim", "HybridIPPool"]
    assert conditions(kube.statuses[0])["Ready"] == ("True", "Allocated", "10.1.0.1")
    assert kube.events == [("Warning", serving.DEPRECATED_POOL_KIND)]
    [message] = kube.event_messages
    assert "served from HybridIPPool ns/p" in message
    assert "recreate this claim with poolRef kind HybridIPPool" in message


def test_the_deprecated_kind_is_an_alias_only_in_capfleet_s_group() -> None:
    metal3 = claim_body(kind="IPPool")
    metal3["spec"]["poolRef"]["apiGroup"] = "ipam.metal3.io"
    assert Claim.of(metal3) is None
    address: dict[str, Any] = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddress",
        "metadata": {"name": "c1", "namespace": NAMESPACE},
        "spec": {
            "claimRef": {"name": "c1"},
            "poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": "IPPool", "name": "p"},
            "address": "10.1.0.3",
            "prefix": 24,
        },
    }
    # An IPAddress written before the rename counts in the HybridIPPool: its address is not handed out again.
    assert pools.holding_of(address) == pools.Holding(
        PoolKey(NAMESPACE, "HybridIPPool", "p"), "10.1.0.3", "c1", False
    )
    address["spec"]["poolRef"]["apiGroup"] = "ipam.metal3.io"
    assert pools.holding_of(address) is None


def test_a_netbox_pool_is_ready_only_when_checked_at_its_generation() -> None:
    checked = pools.info_of(netbox_pool())
    assert (checked.ready, checked.message) == (True, "checked")
    stale = netbox_pool()
    stale["metadata"]["generation"] = 2
    assert not pools.info_of(stale).ready
    unchecked: PoolInfo = pools.info_of({**netbox_pool(), "status": None})
    assert (unchecked.ready, unchecked.message) == (False, "not checked yet")
