"""Unit tests of claim serving: the IPAddress written, the claim's status and Events, pause, repair.

The API server and NetBox are small in-memory fakes (serving_fakes) and kopf's indexes are plain dicts, so
these pin the wire formats the integration suites (test_hybridippool_contract, test_netboxippool) check on
a real apiserver.
"""

from __future__ import annotations

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
from ipam_address import claims, serving
from ipam_address.backends.netbox import OWNER_FIELD
from ipam_address.pools import PoolKey


async def test_a_claim_gets_its_ip_address_and_a_status_without_an_event() -> None:
    kube = FakeKube()
    ctx = context(kube, hybridippool(addresses=["10.1.0.0/29"], prefix=24, gateway="10.1.0.1"))
    await serving.serve_claim(ctx, claim_of(claim_body()))

    address = kube.objects[("IPAddress", "c1")]
    assert address["spec"] == {
        "claimRef": {"name": "c1"},
        "poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "p"},
        "address": "10.1.0.2",
        "prefix": 24,
        "gateway": "10.1.0.1",
    }
    meta = address["metadata"]
    assert meta["finalizers"] == [claims.PROTECT_FINALIZER]
    assert meta["labels"] == {"cluster.x-k8s.io/cluster-name": "w1"}
    assert [(r["kind"], r["uid"], r["controller"]) for r in meta["ownerReferences"]] == [
        ("IPAddressClaim", "claim-uid", True),
        ("HybridIPPool", "pool-uid", False),
    ]
    [status] = kube.statuses
    assert status["addressRef"] == {"name": "c1"}
    assert conditions(status) == {
        "Paused": ("False", "NotPaused", ""),
        "Ready": ("True", "Allocated", "10.1.0.2"),
    }
    assert {c["observedGeneration"] for c in status["conditions"]} == {2}
    assert kube.events == []
    # then the finalizer, on the claim as the status write left it (the fake answers that write with 404)
    assert kube.patches == [
        ("IPAddressClaim", "c1", {"metadata": {"finalizers": [FINALIZER], "resourceVersion": "7"}})
    ]


async def test_an_exhausted_pool_is_ready_false_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    ctx = context(
        kube,
        hybridippool(addresses=["10.1.0.5"], prefix=24),
        bound={(NAMESPACE, "other"): ("10.1.0.5", False)},
    )
    with pytest.raises(errors.Waiting):
        await serving.serve_claim(ctx, claim_of(claim_body()))
    [status] = kube.statuses
    assert "addressRef" not in status
    assert conditions(status)["Ready"] == ("False", "PoolExhausted", "HybridIPPool ns/p has no free address")
    assert kube.events == [("Warning", "PoolExhausted")]


async def test_a_claim_that_waits_is_woken_once_per_wait_and_writes_only_what_changed() -> None:
    kube = FakeKube()
    ctx = context(kube)  # no pool yet: PoolNotReady, twice, then the pool appears
    key = PoolKey(NAMESPACE, "HybridIPPool", "p")
    with pytest.raises(errors.DependencyMissing):
        await serving.serve_claim(ctx, claim_of(claim_body()))
    assert ctx.allocator.wake(key) == ["c1"], "a change to the pool reconciles it"
    assert ctx.allocator.wake(key) == [], "woken once: a claim deleted meanwhile is not woken for ever"
    with pytest.raises(errors.DependencyMissing):  # still waiting: it says so again, writing nothing new
        await serving.serve_claim(ctx, claim_of({**claim_body(), "status": kube.statuses[0]}))
    assert len(kube.statuses) == 1
    ctx.lookups = context(kube, hybridippool(addresses=["10.1.0.0/29"], prefix=24)).lookups
    await serving.serve_claim(ctx, claim_of(claim_body()))
    assert ctx.allocator.wake(key) == [], "served: it waits no more (it waited again, unwoken, before)"
    failed, bound = kube.statuses
    assert conditions(failed)["Ready"] == ("False", "PoolNotReady", "HybridIPPool ns/p does not exist")
    assert bound["addressRef"] == {"name": "c1"}
    assert [c["type"] for c in bound["conditions"]] == ["Paused", "Ready"]
    assert conditions(bound)["Ready"] == ("True", "Allocated", "10.1.0.1")
    assert kube.events == [("Warning", "PoolNotReady")]


async def test_a_missing_pool_is_pool_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    with pytest.raises(errors.DependencyMissing):
        await serving.serve_claim(context(kube), claim_of(claim_body("nope")))
    assert conditions(kube.statuses[0])["Ready"] == (
        "False",
        "PoolNotReady",
        "HybridIPPool ns/nope does not exist",
    )


async def test_other_failures_are_allocation_failed_with_the_errors_reason_in_the_event() -> None:
    kube = FakeKube()  # no connection Secret
    ctx = context(kube, netbox_pool())
    with pytest.raises(errors.DependencyMissing):
        await serving.serve_claim(ctx, claim_of(claim_body("nb", "NetboxIPPool")))
    ready = conditions(kube.statuses[0])["Ready"]
    assert ready == ("False", "AllocationFailed", "Secret ns/netbox does not exist")
    assert kube.events == [("Warning", "SecretMissing")]


async def test_a_netbox_claim_gets_netbox_s_address_and_prefix() -> None:
    body = claim_body("nb", "NetboxIPPool")
    kube = FakeKube(netbox_secret(), body)
    netbox = FakeNetbox(free=["10.61.1.9/28"])
    ctx = context(
        kube, netbox_pool(tenant="t1", tags=["lab"], dnsNameTemplate="{name}.{cluster}"), netbox=netbox
    )
    await serving.serve_claim(ctx, claim_of(body))
    # Marked before NetBox was written to, so a deletion knows NetBox may hold an address for it.
    assert kube.patches[0] == (
        "IPAddressClaim",
        "c1",
        {"metadata": {"annotations": {claims.NETBOX_MARK: "mgmt-a"}}},
    )
    spec = kube.objects[("IPAddress", "c1")]["spec"]
    assert (spec["address"], spec["prefix"], spec["poolRef"]["kind"]) == ("10.61.1.9", 28, "NetboxIPPool")
    [fields] = netbox.fields
    assert fields == {
        "status": "active",
        "description": "capfleet: IPAddressClaim ns/c1",
        "tags": [{"slug": "capfleet"}, {"slug": "lab"}],
        "custom_fields": {OWNER_FIELD: "mgmt-a/ns/c1@nb"},
        "tenant": {"slug": "t1"},
        "dns_name": "c1.w1",
    }


@pytest.mark.parametrize("by_cluster", [False, True])
async def test_a_paused_claim_only_says_so(by_cluster: bool) -> None:
    cluster = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "w1"}}
    cluster["spec"] = {"paused": by_cluster}
    kube = FakeKube(cluster)
    annotations = {} if by_cluster else {pausing.PAUSED_ANNOTATION: ""}
    ctx = context(kube, hybridippool(addresses=["10.1.0.0/29"], prefix=24))
    await serving.serve_claim(ctx, claim_of(claim_body(annotations=annotations)))
    assert [conditions(s) for s in kube.statuses] == [
        {"Paused": ("True", "Paused", "reconciliation is paused")}
    ]
    assert ("IPAddress", "c1") not in kube.objects


async def test_a_lost_status_is_rebuilt_from_the_ip_address_that_still_exists() -> None:
    kube = FakeKube()
    ctx = context(
        kube,
        hybridippool(addresses=["10.1.0.0/29"], prefix=24),
        bound={(NAMESPACE, "c1"): ("10.1.0.3", False)},
    )
    held = claim_body()
    held["metadata"]["finalizers"] = [FINALIZER]
    await serving.serve_claim(ctx, claim_of(held))
    [status] = kube.statuses
    assert status["addressRef"] == {"name": "c1"}
    assert conditions(status)["Ready"] == ("True", "Allocated", "10.1.0.3")
    assert ("IPAddress", "c1") not in kube.objects  # nothing allocated
    assert kube.patches == []  # the finalizer was there
