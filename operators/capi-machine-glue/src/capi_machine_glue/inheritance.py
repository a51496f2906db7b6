"""What a child inherits from its owner after creation: CAPI's pause and its shard.

A child is made with its owner's labels (`ownership.child_metadata`), but both marks can change later:
a Cluster is paused for `clusterctl move`, and an object relabelled to another shard
(`cluster.x-k8s.io/watch-filter`, CAPI's `--watch-filter`) must take its children along, or the new
shard's operators would never see them and the old shard's would keep serving them. Each reconcile of a
HybridMachine or HybridCluster brings its children in line with one merge patch per child that differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capfleet import ownership, pausing
from capfleet.resources import Resource
from capi_machine_glue.contexts import Context


def inherited_patch(
    child: Mapping[str, Any], owner: Mapping[str, Any], *, paused: bool
) -> dict[str, Any] | None:
    """The metadata merge patch that gives `child` the paused annotation exactly while `paused` and its
    owner's watch-filter label (or none, as its owner); None when it has both already, or is going."""
    meta = child["metadata"]
    if meta.get("deletionTimestamp"):
        return None
    patch: dict[str, Any] = {}
    if pausing.annotated(meta) != paused:
        patch["annotations"] = {pausing.PAUSED_ANNOTATION: "true" if paused else None}
    shard = (owner["metadata"].get("labels") or {}).get(ownership.WATCH_FILTER_LABEL)
    if (meta.get("labels") or {}).get(ownership.WATCH_FILTER_LABEL) != shard:
        patch["labels"] = {ownership.WATCH_FILTER_LABEL: shard}
    return {"metadata": patch} if patch else None


async def mirror(
    ctx: Context,
    children: Sequence[tuple[Resource, Mapping[str, Any]]],
    owner: Mapping[str, Any],
    *,
    paused: bool,
) -> None:
    """Patch each child whose inherited marks differ from what `owner` (paused or not) gives it."""
    for resource, child in children:
        patch = inherited_patch(child, owner, paused=paused)
        if patch is not None:
            meta = child["metadata"]
            await ctx.kube.patch(resource, meta["name"], patch, meta["namespace"])
