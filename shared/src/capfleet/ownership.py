"""Owner references and cluster-name labels: how children are tied to their parents.

The fleet relies on Kubernetes garbage collection instead of bookkeeping, so every child carries an
ownerReference to its parent, and every object that belongs to a workload cluster carries CAPI's
`cluster.x-k8s.io/cluster-name` label (clusterctl move and pause lookups depend on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
# Cluster API's shard label (its managers' --watch-filter): children carry their owner's, so a shard
# serves a machine's intermediate objects too.
WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"


def owner_reference(
    owner: Mapping[str, Any], *, controller: bool = True, block_owner_deletion: bool = True
) -> dict[str, Any]:
    """A reference to `owner` (a full object with apiVersion, kind and metadata)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": block_owner_deletion,
    }


def is_owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    uid = owner["metadata"]["uid"]
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked as controller, if any."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def cluster_name(meta: Mapping[str, Any]) -> str | None:
    return (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)


def child_metadata(
    name: str, owner: Mapping[str, Any], *, labels: Mapping[str, str] | None = None, controller: bool = True
) -> dict[str, Any]:
    """Metadata for a child of `owner`: same namespace, owner reference, and the owner's cluster and
    watch-filter labels."""
    owner_meta = owner["metadata"]
    child_labels = dict(labels or {})
    parent_cluster = cluster_name(owner_meta)
    if parent_cluster:
        child_labels[CLUSTER_NAME_LABEL] = parent_cluster
    shard = (owner_meta.get("labels") or {}).get(WATCH_FILTER_LABEL)
    if shard:
        child_labels[WATCH_FILTER_LABEL] = shard
    meta: dict[str, Any] = {
        "name": name,
        "ownerReferences": [owner_reference(owner, controller=controller)],
    }
    if owner_meta.get("namespace"):
        meta["namespace"] = owner_meta["namespace"]
    if child_labels:
        meta["labels"] = child_labels
    return meta
