"""kopf handlers of the capi-machine-glue operator: decorators and typed arguments only, logic lives
elsewhere.

Each HybridMachine and HybridCluster gets a reconcile loop (a kopf daemon, `loops`), woken by watch
handlers whenever something it depends on changes: the object, its children (by ownerReference), its CAPI
Machine, its Cluster or HybridCluster. Deletion handlers remove children and wait for their operators'
finalizers. The wake-up registry is created at startup in the operator-wide memo.
"""

from __future__ import annotations

import functools
from typing import Any

import kopf

from capfleet import runtime
from capfleet.api import kinds
from capi_machine_glue import clusters, loops, machines
from capi_machine_glue.contexts import (
    CLAIMS,
    CLUSTERS,
    INSTANCES,
    LIBVIRT_VMS,
    MACHINES,
    NETBOX_DEVICES,
    NETBOX_VMS,
    Context,
)
from capi_machine_glue.wakeups import HYBRID_CLUSTER, HYBRID_MACHINE, Key, Wakeups

IDENTITY = runtime.Identity("capi-machine-glue")
HYBRID_MACHINES = (kinds.INFRASTRUCTURE_GROUP, kinds.VERSION, "hybridmachines")
HYBRID_CLUSTERS = (kinds.INFRASTRUCTURE_GROUP, kinds.VERSION, "hybridclusters")
CANCELLATION_TIMEOUT = 10.0


def _watched(resource: Any) -> tuple[str, str, str]:
    return (resource.group, resource.version, resource.plural)


@kopf.on.startup()
def create_wakeups(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo["glue_wakeups"] = Wakeups()


def _namespaced(namespace: str | None) -> str:
    if namespace is None:  # every watched kind here is namespaced
        raise RuntimeError("a namespaced object came without a namespace")
    return namespace


def context(memo: kopf.Memo) -> Context:
    wakeups = memo.get("glue_wakeups")
    if not isinstance(wakeups, Wakeups):
        raise RuntimeError("capi-machine-glue did not start: no wake-up registry in memo")
    return Context(runtime.kube(memo), runtime.recorder(memo), wakeups)


@kopf.daemon(*HYBRID_MACHINES, cancellation_timeout=CANCELLATION_TIMEOUT)
async def machine_loop(
    name: str, namespace: str | None, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    ctx = context(memo)
    reconcile = functools.partial(machines.reconcile, ctx, _namespaced(namespace), name)
    await loops.run(ctx, Key(HYBRID_MACHINE, _namespaced(namespace), name), reconcile, stopped)


@kopf.on.delete(*HYBRID_MACHINES)
@runtime.reconciler("HybridMachine")
async def delete_machine(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await machines.delete(context(memo), body)


def ours(annotations: kopf.Annotations, **_: Any) -> bool:
    """HybridClusters marked `cluster.x-k8s.io/managed-by` belong to someone else: no loop, no finalizer."""
    return not clusters.externally_managed({"annotations": annotations})


@kopf.daemon(*HYBRID_CLUSTERS, cancellation_timeout=CANCELLATION_TIMEOUT, when=ours)
async def cluster_loop(
    name: str, namespace: str | None, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    ctx = context(memo)
    reconcile = functools.partial(clusters.reconcile, ctx, _namespaced(namespace), name)
    await loops.run(ctx, Key(HYBRID_CLUSTER, _namespaced(namespace), name), reconcile, stopped)


@kopf.on.delete(*HYBRID_CLUSTERS, when=ours)
@runtime.reconciler("HybridCluster")
async def delete_cluster(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await clusters.delete(context(memo), body)


@kopf.on.event(*HYBRID_MACHINES)
def machine_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    context(memo).wakeups.poke(Key(HYBRID_MACHINE, _namespaced(namespace), name))


@kopf.on.event(*HYBRID_CLUSTERS)
def hybrid_cluster_changed(
    name: str, namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    wakeups = context(memo).wakeups
    wakeups.poke(Key(HYBRID_CLUSTER, _namespaced(namespace), name))
    cluster = labels.get("cluster.x-k8s.io/cluster-name")
    if cluster:
        wakeups.poke_cluster(_namespaced(namespace), cluster)


@kopf.on.event(*_watched(CLUSTERS))
def cluster_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    context(memo).wakeups.poke_cluster(_namespaced(namespace), name)


@kopf.on.event(*_watched(MACHINES))
def capi_machine_changed(spec: kopf.Spec, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    ref = spec.get("infrastructureRef") or {}
    if ref.get("kind") == HYBRID_MACHINE and ref.get("name"):
        context(memo).wakeups.poke(Key(HYBRID_MACHINE, _namespaced(namespace), ref["name"]))


@kopf.on.event(*_watched(CLAIMS))
@kopf.on.event(*_watched(LIBVIRT_VMS))
@kopf.on.event(*_watched(NETBOX_VMS))
@kopf.on.event(*_watched(NETBOX_DEVICES))
@kopf.on.event(*_watched(INSTANCES))
def child_changed(meta: kopf.Meta, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    wakeups = context(memo).wakeups
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") in (HYBRID_MACHINE, HYBRID_CLUSTER):
            wakeups.poke(Key(ref["kind"], _namespaced(namespace), ref["name"]))
