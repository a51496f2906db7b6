"""kopf handlers of the capi-machine-glue operator: decorators and typed arguments only, logic lives
elsewhere.

Each HybridMachine and HybridCluster gets a reconcile loop (a kopf daemon, `loops`), woken by watch
handlers whenever something it depends on changes: the object, its children (by ownerReference), its CAPI
Machine, its Cluster or HybridCluster. The same handlers keep the watch cache the loops read from, and
one more keeps the IPAddresses there. Deletion handlers remove children and wait for their operators'
finalizers. The wake-up registry and the cache are created at startup in the operator-wide memo.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from capfleet import ownership, reconciling, runtime
from capfleet.api import capi
from capfleet.controller.caches import Reads, WatchCache
from capi_machine_glue import clusters, deletions, loops, machines
from capi_machine_glue.contexts import (
    ADDRESSES,
    CACHE_KEY,
    CHILDREN,
    CLAIMS,
    CLUSTERS,
    HYBRID_CLUSTERS,
    HYBRID_MACHINES,
    INSTANCES,
    LIBVIRT_VMS,
    MACHINES,
    NETBOX_DEVICES,
    NETBOX_VMS,
    WAKEUPS_KEY,
    Context,
)
from capi_machine_glue.wakeups import HYBRID_CLUSTER, HYBRID_MACHINE, Key, Wakeups

IDENTITY = runtime.Identity("capi-machine-glue")
runtime.count_phases(HYBRID_MACHINES)
CANCELLATION_TIMEOUT = 10.0
# How long a deletion handler waits for children before handing the wait to kopf's retry (two patches of
# kopf's progress on the object). A server's cleaning takes minutes; at N = 100 in `make bench-fleet` a
# minute's patience still cost 5.7 HybridMachine patches per machine. The status says what it waits for.
DELETION_PATIENCE_SECONDS = 600.0


@kopf.on.startup()
def create_wakeups(memo: kopf.Memo, **_: Any) -> None:
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo[WAKEUPS_KEY] = Wakeups()
    memo[CACHE_KEY] = WatchCache(frozenset((r.group, r.plural) for r in CHILDREN))


def wakeups(memo: kopf.Memo) -> Wakeups:
    """The wake-up registry: all the watch handlers need, so they do not build a whole Context."""
    return reconciling.from_memo(memo, WAKEUPS_KEY, Wakeups)


WatchHandler = Callable[..., Awaitable[None]]


def remembering(handler: WatchHandler) -> WatchHandler:
    """`handler`, after keeping what its event shows in the watch cache (the raw object: kopf's views
    wrap it)."""

    @functools.wraps(handler)
    async def remember_then_handle(
        *, resource: kopf.Resource, event: kopf.RawEvent, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        cache = reconciling.from_memo(memo, CACHE_KEY, WatchCache)
        cache.seen(resource, event["object"], deleted=event["type"] == "DELETED")
        await handler(memo=memo, **kwargs)

    return remember_then_handle


def _namespaced(namespace: str | None) -> str:
    if namespace is None:  # every watched kind here is namespaced
        raise RuntimeError("a namespaced object came without a namespace")
    return namespace


def deletion(
    ctx: Context, key: Key, delete: Callable[[Context, Reads, Mapping[str, Any]], Awaitable[None]]
) -> Callable[[bool], Awaitable[None]]:
    """One attempt of a deletion, on the object as it now is (its status and pause may have changed
    while the deletion waited): read from the watch cache when a change woke it, else from the API
    server, the net for what a watch can miss (at N = 100 in `make bench-fleet`, reading everything from
    the API server at every look cost the glue 40 GETs per machine deleted)."""
    resource = HYBRID_MACHINES if key.kind == HYBRID_MACHINE else HYBRID_CLUSTERS

    async def attempt(by_wakeup: bool) -> None:
        reads = ctx.cache.reader(ctx.kube) if by_wakeup else ctx.kube
        body = await reads.get(resource, key.name, key.namespace)
        if body is not None:
            await delete(ctx, reads, body)

    return attempt


@kopf.daemon(*HYBRID_MACHINES.watch, cancellation_timeout=CANCELLATION_TIMEOUT)
async def machine_loop(
    name: str, namespace: str | None, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    ctx = Context.from_memo(memo)
    reconcile = functools.partial(machines.reconcile, ctx, _namespaced(namespace), name)
    await loops.run(ctx, Key(HYBRID_MACHINE, _namespaced(namespace), name), reconcile, stopped)


@kopf.on.delete(*HYBRID_MACHINES.watch)
@runtime.reconciler("HybridMachine")
@runtime.releases_at_once(IDENTITY)
async def delete_machine(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    ctx = Context.from_memo(memo)
    key = Key(HYBRID_MACHINE, _namespaced(namespace), name)
    await loops.waiting_out(ctx, key, deletion(ctx, key, deletions.delete), DELETION_PATIENCE_SECONDS)


def nothing_to_record(body: Mapping[str, Any]) -> bool:
    """Every object counts as handled for kopf, which then keeps no record of what it handled (a patch for
    each change of a HybridMachine: its provider ID, Cluster API's labels and annotations): the glue's only
    change handlers are for deletion, which kopf tells by the deletion timestamp, and its reconcile loops
    are woken by the watch events whatever kopf records."""
    return True


def ours(annotations: kopf.Annotations, **_: Any) -> bool:
    """HybridClusters marked `cluster.x-k8s.io/managed-by` belong to someone else: no loop, no finalizer."""
    return not clusters.externally_managed({"annotations": annotations})


@kopf.daemon(*HYBRID_CLUSTERS.watch, cancellation_timeout=CANCELLATION_TIMEOUT, when=ours)
async def cluster_loop(
    name: str, namespace: str | None, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    ctx = Context.from_memo(memo)
    reconcile = functools.partial(clusters.reconcile, ctx, _namespaced(namespace), name)
    await loops.run(ctx, Key(HYBRID_CLUSTER, _namespaced(namespace), name), reconcile, stopped)


@kopf.on.delete(*HYBRID_CLUSTERS.watch, when=ours)
@runtime.reconciler("HybridCluster")
@runtime.releases_at_once(IDENTITY)
async def delete_cluster(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    ctx = Context.from_memo(memo)
    key = Key(HYBRID_CLUSTER, _namespaced(namespace), name)
    await loops.waiting_out(ctx, key, deletion(ctx, key, clusters.delete), DELETION_PATIENCE_SECONDS)


@kopf.on.event(*HYBRID_MACHINES.watch)
@remembering
async def machine_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    wakeups(memo).poke(Key(HYBRID_MACHINE, _namespaced(namespace), name))


@kopf.on.event(*HYBRID_CLUSTERS.watch)
@remembering
async def hybrid_cluster_changed(
    name: str, namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    registry = wakeups(memo)
    registry.poke(Key(HYBRID_CLUSTER, _namespaced(namespace), name))
    cluster = labels.get(ownership.CLUSTER_NAME_LABEL)
    if cluster:
        registry.poke_cluster(_namespaced(namespace), cluster)


@kopf.on.event(*CLUSTERS.watch)
@remembering
async def cluster_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    wakeups(memo).poke_cluster(_namespaced(namespace), name)


@kopf.on.event(*MACHINES.watch)
@remembering
async def capi_machine_changed(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    ref = capi.Machine.parse(body).spec.infrastructure_ref
    if ref is not None and ref.kind == HYBRID_MACHINE and ref.name:
        wakeups(memo).poke(Key(HYBRID_MACHINE, _namespaced(namespace), ref.name))


@kopf.on.event(*CLAIMS.watch)
@kopf.on.event(*LIBVIRT_VMS.watch)
@kopf.on.event(*NETBOX_VMS.watch)
@kopf.on.event(*NETBOX_DEVICES.watch)
@kopf.on.event(*INSTANCES.watch)
@remembering
async def child_changed(meta: kopf.Meta, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    registry = wakeups(memo)
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") in (HYBRID_MACHINE, HYBRID_CLUSTER):
            registry.poke(Key(ref["kind"], _namespaced(namespace), ref["name"]))


@kopf.on.event(*ADDRESSES.watch)
@remembering
async def address_changed(**_: Any) -> None:
    """Only kept: the claim's own change (its addressRef) is what wakes the machine."""
