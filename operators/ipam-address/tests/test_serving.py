"""Unit tests of claim serving: the IPAddress written, the claim's status and Events, pause, repair, release.

The API server and NetBox are small in-memory fakes and kopf's indexes are plain dicts, so these pin the
wire formats the integration suites (test_hybridippool_contract, test_netboxippool) check on a real apiserver.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any, cast

import pytest

from capfleet import errors, events, pausing, versions
from capfleet.kube import Kube, KubeError
from capfleet.resources import Resource
from ipam_address import claims, netbox_pools, pools, serving
from ipam_address.allocator import Allocator
from ipam_address.backends.netbox import OWNER_FIELD, NetboxAddress, Target
from ipam_address.claims import Claim
from ipam_address.contexts import Context, Identity, Lookups, Notices
from ipam_address.pools import PoolInfo, PoolKey
from ipam_address.settings import IpamSettings

NAMESPACE = "ns"
FINALIZER = "ipam-address.capfleet.dev/finalizer"


class FakeKube:
    """The API server as far as claims, IPAddresses, Clusters, Secrets, status writes and Events go."""

    field_manager = "capfleet-ipam-address"

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in objects}
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.event_messages: list[str] = []
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.deleted: list[tuple[str, str]] = []

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get((resource.kind, name)))

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.events.append((body["type"], body["reason"]))
        self.event_messages.append(body["message"])
        return body

    async def create_or_get(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        key = (resource.kind, body["metadata"]["name"])
        created = key not in self.objects
        self.objects.setdefault(key, copy.deepcopy(body))
        return copy.deepcopy(self.objects[key]), created

    async def patch(
        self, resource: Resource, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any] | None:
        """Recorded, not applied; None (as the API server's 404) for an object the fake does not hold."""
        self.patches.append((resource.kind, name, patch))
        return copy.deepcopy(self.objects.get((resource.kind, name)))

    async def patch_status(
        self, resource: Resource, name: str, status: dict[str, Any], namespace: str | None = None
    ) -> None:
        self.statuses.append(status)

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **_: Any
    ) -> dict[str, Any] | None:
        self.deleted.append((resource.kind, name))
        return self.objects.pop((resource.kind, name), None)


class FakeNetbox:
    """NetBox's addressing for one claim: the address it owns, or the next one it hands out."""

    def __init__(self, owned: NetboxAddress | None = None, free: list[str] | None = None) -> None:
        self.owned, self.free = owned, list(free or [])
        self.fields: list[Mapping[str, Any]] = []
        self.released: list[int] = []
        self.fail: Exception | None = None

    async def find_owned(self, owner: str) -> NetboxAddress | None:
        if self.fail is not None:
            raise self.fail
        return self.owned

    async def allocate(self, target: Target, fields: Mapping[str, Any]) -> NetboxAddress | None:
        self.fields.append(fields)
        return NetboxAddress(9, self.free.pop(0)) if self.free else None

    async def release(self, address_id: int) -> None:
        self.released.append(address_id)

    async def check(self, pool_targets: list[Target]) -> None:
        return None


def hybridippool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ipam.capfleet.dev/v1alpha1",
        "kind": "HybridIPPool",
        "metadata": {"name": "p", "namespace": NAMESPACE, "uid": "pool-uid", "generation": 1},
        "spec": spec,
    }


def netbox_pool(**spec: Any) -> dict[str, Any]:
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "checked",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    return {
        "apiVersion": "ipam.capfleet.dev/v1alpha1",
        "kind": "NetboxIPPool",
        "metadata": {"name": "nb", "namespace": NAMESPACE, "uid": "nb-uid", "generation": 1},
        "spec": {"connectionSecretRef": {"name": "netbox"}, "prefixes": [{"id": 3}], **spec},
        "status": {"conditions": [ready]},
    }


def claim_body(
    pool: str = "p", kind: str = "HybridIPPool", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    versions.forget()  # every claim built here has the same uid and resourceVersion, whatever it holds
    return {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": {
            "name": "c1",
            "namespace": NAMESPACE,
            "uid": "claim-uid",
            "resourceVersion": "7",
            "generation": 2,
            "labels": {"cluster.x-k8s.io/cluster-name": "w1"},
            "annotations": annotations or {},
        },
        "spec": {"poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": kind, "name": pool}},
    }


def claim_of(body: dict[str, Any]) -> Claim:
    claim = Claim.of(body)
    assert claim is not None
    return claim


def context(
    kube: FakeKube,
    *pool_bodies: dict[str, Any],
    bound: dict[tuple[str, str], tuple[str, bool]] | None = None,
    netbox: FakeNetbox | None = None,
) -> Context:
    infos = {info.key: info for info in map(pools.info_of, pool_bodies)}
    held = {(key, address): claim for (_, claim), (address, _) in (bound or {}).items() for key in infos}
    lookups = Lookups(
        pool=infos.get,
        owner=lambda key: lambda address: held.get((key, address)),
        address_of_claim=lambda namespace, name: (bound or {}).get((namespace, name)),
    )
    clients = netbox_pools.Clients(lambda _: cast(Any, netbox or FakeNetbox()))
    fake = cast(Kube, kube)
    settings = IpamSettings(instance="mgmt-a")
    return Context(
        fake, events.Recorder(fake), lookups, FINALIZER, Allocator(), clients, settings, Identity(), Notices()
    )


def netbox_secret() -> dict[str, Any]:
    """The NetboxIPPool's connection Secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "netbox", "resourceVersion": "1"},
        "data": {
            "url": base64.b64encode(b"http://netbox").decode(),
            "token": base64.b64encode(b"t").decode(),
        },
    }


def conditions(status: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


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
    monkeypatch.setattr(serving, "WAIT_IN_HANDLER_SECONDS", 0.0)
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


async def test_a_claim_that_waits_writes_only_what_changed_since_its_last_write() -> None:
    kube = FakeKube()
    ctx = context(kube)  # no pool yet: PoolNotReady, twice, then the pool appears
    waits = iter([False, True])

    async def pool_changes(pool: PoolKey, within: float) -> bool:
        if next(waits):
            ctx.lookups = context(kube, hybridippool(addresses=["10.1.0.0/29"], prefix=24)).lookups
        return True

    ctx.allocator.wait_for_release = pool_changes  # type: ignore[method-assign]
    await serving.serve_claim(ctx, claim_of(claim_body()))
    failed, bound = kube.statuses
    assert conditions(failed)["Ready"] == ("False", "PoolNotReady", "HybridIPPool ns/p does not exist")
    assert bound["addressRef"] == {"name": "c1"}
    assert [c["type"] for c in bound["conditions"]] == ["Paused", "Ready"]
    assert conditions(bound)["Ready"] == ("True", "Allocated", "10.1.0.1")
    assert kube.events == [("Warning", "PoolNotReady")]


async def test_a_missing_pool_is_pool_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "WAIT_IN_HANDLER_SECONDS", 0.0)
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
    assert not claims.handled(held)  # so kopf serves it again
    await serving.serve_claim(ctx, claim_of(held))
    [status] = kube.statuses
    assert status["addressRef"] == {"name": "c1"}
    assert conditions(status)["Ready"] == ("True", "Allocated", "10.1.0.3")
    assert ("IPAddress", "c1") not in kube.objects  # nothing allocated
    assert kube.patches == []  # the finalizer was there
    assert claims.handled({**held, "status": status})


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
