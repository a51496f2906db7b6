"""The in-memory API server and NetBox that the claim-serving unit tests (test_serving, test_releasing)
drive, and builders of their pools, claims and context."""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any, cast

from capfleet import events, versions
from capfleet.controller.caches import WatchCache
from capfleet.kube import Kube
from capfleet.resources import Resource
from ipam_address import netbox_pools, pools
from ipam_address.allocator import Allocator
from ipam_address.backends.netbox import NetboxAddress, Target
from ipam_address.claims import Claim
from ipam_address.contexts import Context, Identity, Lookups, Notices
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
        addresses=lambda key: [address for (pool, address) in held if pool == key],
    )
    clients = netbox_pools.Clients(lambda _: cast(Any, netbox or FakeNetbox()))
    fake = cast(Kube, kube)
    settings = IpamSettings(instance="mgmt-a")
    return Context(
        fake,
        events.Recorder(fake),
        WatchCache(),
        lookups,
        Allocator(),
        clients,
        settings,
        Identity(),
        Notices(),
        reads=fake,
        finalizer=FINALIZER,
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
