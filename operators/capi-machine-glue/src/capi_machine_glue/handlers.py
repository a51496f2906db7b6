"""capi-machine-glue's controllers: what it reconciles, what wakes each object, on the fleet's engine.

A HybridMachine is reconciled when it changes, when one of its children changes (by ownerReference), when
its CAPI Machine changes, and when its Cluster or HybridCluster changes (every machine of that cluster);
a HybridCluster when it, its VIP claim or its Cluster changes. IPAddresses are only watched into the
cache, where the reconciles read them: the claim's own change (its addressRef) is what wakes a machine.
Deletion is the controllers' `finalize`, woken the same way, so it ends when the last child's deletion is
seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kopf

from capfleet import ownership, reconciling, runtime
from capfleet.api import capi
from capfleet.controller import watching
from capfleet.controller.caches import Reads
from capfleet.controller.engine import Controller, Key, Watch, done_after, owners
from capi_machine_glue import clusters, deletions, gates, machines
from capi_machine_glue.contexts import (
    ADDRESSES,
    CHILDREN,
    CLAIMS,
    CLUSTERS,
    HYBRID_CLUSTERS,
    HYBRID_MACHINES,
    MACHINES,
    Context,
)
from capi_machine_glue.settings import GlueSettings

IDENTITY = runtime.Identity("capi-machine-glue", on_engine=True)
runtime.count_phases(HYBRID_MACHINES)
HYBRID_MACHINE, HYBRID_CLUSTER = HYBRID_MACHINES.kind, HYBRID_CLUSTERS.kind

Obj = Mapping[str, Any]


def machine_of(body: Obj) -> list[Key]:
    """A CAPI Machine's HybridMachine (its infrastructureRef)."""
    ref = capi.Machine.parse(body).spec.infrastructure_ref
    if ref is None or ref.kind != HYBRID_MACHINE or not ref.name:
        return []
    return [Key(body["metadata"].get("namespace"), ref.name)]


def hybrid_clusters_cluster(body: Obj) -> list[str]:
    found = ownership.cluster_name(body["metadata"])
    return [found] if found else []


def named(body: Obj) -> list[str]:
    return [body["metadata"]["name"]]


def cluster_of_hybrid_cluster(body: Obj) -> str | None:
    meta = body["metadata"]
    return gates.capi_owner(meta, CLUSTERS) or ownership.cluster_name(meta)


def ours(body: Obj) -> bool:
    """HybridClusters marked `cluster.x-k8s.io/managed-by` belong to someone else: no reconcile, no
    finalizer."""
    return not clusters.externally_managed(body["metadata"])


MACHINE_CONTROLLER: Controller[Context] = Controller(
    HYBRID_MACHINES,
    IDENTITY.finalizer,
    done_after(machines.reconcile),
    done_after(deletions.delete),
    watches=[
        *(Watch(child, keys=owners(HYBRID_MACHINE)) for child in CHILDREN),
        Watch(MACHINES, keys=machine_of),
        Watch(HYBRID_CLUSTERS, groups=hybrid_clusters_cluster),
        Watch(CLUSTERS, groups=named),
        Watch(ADDRESSES),
    ],
    group=lambda body: ownership.cluster_name(body["metadata"]),
)
CLUSTER_CONTROLLER: Controller[Context] = Controller(
    HYBRID_CLUSTERS,
    IDENTITY.finalizer,
    done_after(clusters.reconcile),
    done_after(clusters.delete),
    watches=[Watch(CLAIMS, keys=owners(HYBRID_CLUSTER)), Watch(CLUSTERS, groups=named)],
    serves=ours,
    group=cluster_of_hybrid_cluster,
)
CONTROLLERS = [MACHINE_CONTROLLER, CLUSTER_CONTROLLER]


def tuned(memo: kopf.Memo, controller: Controller[Context]) -> Controller[Context]:
    """The intervals of the glue's settings."""
    settings = reconciling.from_memo(memo, reconciling.SETTINGS_KEY, GlueSettings)
    return dataclasses.replace(
        controller, resync_seconds=settings.resync_seconds, settle_seconds=settings.settle_seconds
    )


def context(memo: kopf.Memo, reads: Reads) -> Context:
    return Context.from_memo(memo, reads=reads)


start_engines = watching.register(CONTROLLERS, context, remember_absence=CHILDREN, tune=tuned)
