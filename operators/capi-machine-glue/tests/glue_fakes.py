"""The glue's unit tests' in-memory API server and the objects they start from: a Cluster with its
HybridCluster, Machines owning HybridMachines, and a Context on the engine's recording client."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capfleet import events, ownership, resources
from capfleet.api import kinds
from capfleet.controller.caches import WatchCache
from capfleet.controller.writes import RecordingKube
from capfleet.resources import Resource
from capi_machine_glue import machines
from capi_machine_glue.contexts import Context
from capi_machine_glue.settings import GlueSettings

NS = "ns"
POOL = {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"}
READY = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
VM = {
    "vm": {"vcpus": 1, "memoryMiB": 512, "disks": [{"sizeGiB": 1, "image": "base"}]},
    "network": {"interfaces": [{"name": "eth0", "bridge": "br0", "ipPoolRefs": [POOL]}]},
}
METAL = {
    "baremetal": {"osProfile": {"kernelURL": "http://b/k", "initrdURL": "http://b/i"}},
    "network": {"interfaces": [{"name": "eno1", "ipPoolRefs": [POOL]}]},
}
Obj = dict[str, Any]
SHARD = ownership.WATCH_FILTER_LABEL


def _merge(target: Obj, patch: Obj) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    """The few API calls the glue makes, on a dict; deletion waits while finalizers remain."""

    field_manager = "capi-machine-glue"

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.created: list[str] = []
        self.events: list[tuple[str, str, str]] = []  # involved object's name, type, reason
        self.gets: list[str] = []
        self.deletes: list[str] = []
        self.status_patches: list[str] = []
        # How old a child is when the glue first reads it back: older than the grace for a first report,
        # unless a test says otherwise, so each step's waiting is written.
        self.children_age_seconds = 60.0

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        assert resource == resources.EVENTS, "the glue creates its children with create_or_get"
        self.events.append((body["involvedObject"]["name"], body["type"], body["reason"]))
        return body

    def put(self, resource: Resource, body: Obj) -> None:
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", NS)
        meta.setdefault("uid", f"uid-{resource.plural}-{meta['name']}")
        meta.setdefault("generation", 1)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        self.objects[(resource.plural, meta["name"])] = body

    def obj(self, resource: Resource, name: str) -> Obj:
        return self.objects[(resource.plural, name)]

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        self.gets.append(resource.kind)
        return copy.deepcopy(self.objects.get((resource.plural, name)))

    async def create_or_get(self, resource: Resource, body: Obj, namespace: str | None = None) -> Any:
        key = (resource.plural, body["metadata"]["name"])
        if key not in self.objects:
            made = copy.deepcopy(body)
            created = datetime.now(UTC) - timedelta(seconds=self.children_age_seconds)
            made["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
            self.put(resource, made)
            self.created.append(f"{resource.kind}/{key[1]}")
        return copy.deepcopy(self.objects[key]), True

    async def patch(
        self, resource: Resource, name: str, patch: Obj, namespace: str | None = None, **_: Any
    ) -> Obj:
        found = self.obj(resource, name)
        _merge(found, patch)
        if "spec" in patch:  # as the API server does for a custom resource with a status subresource
            found["metadata"]["generation"] += 1
        return copy.deepcopy(found)

    async def patch_status(
        self, resource: Resource, name: str, patch: Obj, namespace: str | None = None
    ) -> None:
        self.status_patches.append(f"{resource.kind}/{name}")
        _merge(self.obj(resource, name).setdefault("status", {}), patch)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> Obj:
        self.deletes.append(f"{resource.kind}/{name}")
        found = self.obj(resource, name)
        if "resourceVersion" in found["metadata"]:
            found["metadata"]["resourceVersion"] = str(int(found["metadata"]["resourceVersion"]) + 1)
        if found["metadata"].get("finalizers"):
            found["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        else:
            del self.objects[(resource.plural, name)]
        return copy.deepcopy(found)

    def bind_claims(self) -> None:
        for (plural, name), claim in list(self.objects.items()):
            if plural == resources.IP_ADDRESS_CLAIMS.plural and not claim.get("status"):
                claim["status"] = {"addressRef": {"name": name}, "conditions": [READY]}
                spec = {"claimRef": {"name": name}, "poolRef": POOL, "address": "10.0.0.7", "prefix": 24}
                self.put(
                    resources.IP_ADDRESSES,
                    {"metadata": {"name": name}, "spec": {**spec, "gateway": "10.0.0.1"}},
                )


@pytest.fixture
def api() -> FakeKube:
    api = FakeKube()
    infrastructure = {"apiGroup": kinds.INFRASTRUCTURE_GROUP, "kind": "HybridCluster", "name": "c1"}
    initialization = {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    api.put(
        resources.CAPI_CLUSTERS,
        {
            "metadata": {"name": "c1"},
            "spec": {"infrastructureRef": infrastructure},
            "status": {"initialization": initialization},
        },
    )
    hybrid_cluster = {
        "controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443},
        "netbox": {"connectionSecretRef": {"name": "netbox"}},
        "baremetal": {"bmcCredentialsSecretRef": {"name": "bmc"}, "bmcAddressTemplate": "ipmi://{address}"},
    }
    api.put(kinds.HYBRID_CLUSTER.resource, {"metadata": {"name": "c1"}, "spec": hybrid_cluster})
    return api


def machine(api: FakeKube, name: str, spec: Obj) -> None:
    labels = {"cluster.x-k8s.io/cluster-name": "c1"}
    machine_spec = {"clusterName": "c1", "bootstrap": {"dataSecretName": f"{name}-data"}}
    api.put(resources.CAPI_MACHINES, {"metadata": {"name": name, "labels": labels}, "spec": machine_spec})
    owner = {"apiVersion": resources.CAPI_MACHINES.api_version, "kind": "Machine", "name": name, "uid": "m"}
    meta = {"name": name, "labels": labels, "ownerReferences": [owner]}
    api.put(kinds.HYBRID_MACHINE.resource, {"metadata": meta, "spec": copy.deepcopy(spec)})


def context(api: FakeKube) -> Context:
    settings = GlueSettings(deletion_poll_seconds=0.5)
    cache = WatchCache()
    recording = RecordingKube(api, cache)  # type: ignore[arg-type]
    return Context(recording, events.Recorder(api), cache, settings, reads=api)  # type: ignore[arg-type]


async def reconcile(ctx: Context, name: str) -> None:
    """One reconcile of the machine as the API server has it (the engine reconciles no machine being
    deleted: it finalizes it)."""
    body = await ctx.kube.get(kinds.HYBRID_MACHINE.resource, name, NS)
    if body is not None and not body["metadata"].get("deletionTimestamp"):
        await machines.reconcile(ctx, body)


async def vm_made(api: FakeKube, name: str) -> tuple[Context, Obj]:
    """A VM machine reconciled until its address is bound and its LibvirtVM made (as the API holds it)."""
    machine(api, name, VM)
    ctx = context(api)
    await reconcile(ctx, name)
    api.bind_claims()
    await reconcile(ctx, name)
    return ctx, api.obj(kinds.LIBVIRT_VM.resource, name)


def conditions(api: FakeKube, name: str) -> dict[str, str]:
    found = api.obj(kinds.HYBRID_MACHINE.resource, name)["status"]["conditions"]
    return {c["type"]: c["reason"] for c in found}
