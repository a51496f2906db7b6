"""Cluster API pause: one definition of "paused" for every operator.

CAPI pauses a cluster with `Cluster.spec.paused` or the `cluster.x-k8s.io/paused` annotation (used by
`clusterctl move`). The glue mirrors a Cluster's pause onto every child as the annotation; intermediate
operators look only at their own object's annotation, ipam-address also at the Cluster, as the IPAM
contract requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet.api import capi
from capfleet.conditions import PAUSED, Update

PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
DELETE_FOR_MOVE_ANNOTATION = "clusterctl.cluster.x-k8s.io/delete-for-move"


def annotated(meta: Mapping[str, Any]) -> bool:
    """Whether the object itself carries the paused annotation (any value, as CAPI reads it)."""
    return PAUSED_ANNOTATION in (meta.get("annotations") or {})


def moving(meta: Mapping[str, Any]) -> bool:
    """Whether clusterctl move is deleting this object from the source cluster (its copy lives on)."""
    return DELETE_FOR_MOVE_ANNOTATION in (meta.get("annotations") or {})


def hands_off(meta: Mapping[str, Any]) -> bool:
    """Whether a reconcile must leave the object (and what it stands for) untouched: paused, or moving.

    clusterctl marks each source object by replacing *all* its annotations with delete-for-move, which
    drops the paused annotation (and kopf's own records) just before the delete: without this check an
    operator sees a "new" unpaused object and acts on hardware whose object now lives on the target.
    """
    return annotated(meta) or moving(meta)


def cluster_paused(cluster: capi.Cluster | None) -> bool:
    """Whether a CAPI Cluster is paused by spec or annotation; a missing Cluster is not paused."""
    return cluster is not None and (cluster.spec.paused or PAUSED_ANNOTATION in cluster.metadata.annotations)


def condition(paused: bool) -> Update:
    """The `Paused` condition CAPI's contract asks for (reasons `Paused` / `NotPaused`)."""
    if paused:
        return Update.true(PAUSED, "Paused", "reconciliation is paused")
    return Update.false(PAUSED, "NotPaused")
