"""Deleting a HybridMachine: the machine (VM or server) first, the device claim and addresses only after it
is gone, so a server is never released while it still runs the old machine. The deletion looks again
whenever a child changes or goes (the engine's watches of the children) and says what it waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capfleet import errors, kube, ownership, pausing, reconciling
from capfleet.api import kinds
from capfleet.conditions import Update
from capfleet.controller.caches import Reads
from capfleet.resources import Resource
from capi_machine_glue.contexts import (
    CLAIMS,
    HYBRID_MACHINES,
    INSTANCES,
    LIBVIRT_VMS,
    NETBOX_DEVICES,
    NETBOX_VMS,
    Context,
)
from capi_machine_glue.machines import capi_cluster, claim_names, seconds_since

Obj = Mapping[str, Any]


class ChildrenRemaining(errors.Waiting):
    """Deletion waits for children that are still being removed by their operators.

    It looks again after the deletion poll setting, then backs off as every capfleet error does
    (doubling, up to `retry_cap`).
    """

    default_reason = "DeletingChildren"
    retry_cap = 10.0

    def __init__(self, message: str, *, poll_seconds: float, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.poll_seconds = poll_seconds

    def delay(self, retry: int) -> float | None:
        return float(min(self.poll_seconds * (2 ** max(retry, 0)), self.retry_cap))


DELETION_REPORT_GRACE_SECONDS = 10.0
"""How long a deletion waits for the children before the status says which it waits for. On a quiet fleet
a VM's children go within seconds and the deletion writes no status; a server's cleaning takes minutes,
and the deletion's polls write it then. (When a whole fleet is deleted at once the children take longer,
and each deletion writes its status a few times.)"""


async def _delete_owned(
    ctx: Context, reads: Reads, body: Obj, targets: Sequence[tuple[Resource, str]]
) -> list[str]:
    """Request deletion of each existing child; the ones still present (being deleted or just asked).

    Called only while the machine is not paused: a child still carrying the paused annotation the glue
    mirrored onto it (the machine was deleted right after an unpause, before a reconcile took it off)
    has it taken off, or its operator would wait for an unpause that already happened."""
    namespace = body["metadata"]["namespace"]
    remaining = []
    for resource, name in targets:
        child = await reads.get(resource, name, namespace)
        if child is None or not ownership.is_owned_by(child, body):
            continue
        if pausing.annotated(child["metadata"]):
            unpause = {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: None}}}
            await ctx.kube.patch(resource, name, unpause, namespace)
        if not child["metadata"].get("deletionTimestamp"):
            try:
                # The answer is kept in the watch cache (the engine's client): a look before the watch
                # shows the deletionTimestamp does not ask again.
                await ctx.kube.delete(resource, name, namespace)
            except kube.KubeError as exc:
                raise errors.BackendUnavailable(f"deleting {resource.kind} {name}: {exc}") from exc
        remaining.append(f"{resource.kind} {name}")
    return remaining


async def delete(ctx: Context, body: Obj) -> None:
    """Delete the children, machine first, and wait until their operators have released everything."""
    meta, reads = body["metadata"], ctx.reads
    if pausing.moving(meta):
        return
    namespace, name = meta["namespace"], meta["name"]
    spec = kinds.HYBRID_MACHINE.parse(body).spec
    poll = ctx.settings.deletion_poll_seconds
    cluster = await capi_cluster(reads, ownership.cluster_name(meta), namespace)
    if pausing.annotated(meta) or pausing.cluster_paused(cluster):
        await reconciling.Recorder(ctx, HYBRID_MACHINES, body, None).paused()
        raise ChildrenRemaining(
            "reconciliation is paused; deletion resumes when unpaused", poll_seconds=poll, reason="Paused"
        )
    # A machine's kind (VM or server) never changes (its CRD refuses that), so only the children of its
    # kind are looked for: a server's deletion would otherwise ask for the two VM children in vain at
    # each of its looks.
    machine_first: list[tuple[Resource, str]]
    if spec.vm is not None:
        machine_first, then = [(LIBVIRT_VMS, name), (NETBOX_VMS, name)], []
    else:
        machine_first, then = [(INSTANCES, name)], [(NETBOX_DEVICES, name)]
    then += [(CLAIMS, n) for n in claim_names(spec, name)]
    remaining = await _delete_owned(ctx, reads, body, machine_first)
    if not remaining:
        remaining = await _delete_owned(ctx, reads, body, then)
    if remaining:
        message = "waiting for " + ", ".join(remaining) + " to be deleted"
        if seconds_since(meta.get("deletionTimestamp")) >= DELETION_REPORT_GRACE_SECONDS:
            # Only Ready changes: the step conditions keep saying what the machine was.
            deleting = [Update.false("Ready", "Deleting", message)]
            await ctx.write_status(HYBRID_MACHINES, body, {}, deleting, None)
        raise ChildrenRemaining(message, poll_seconds=poll)
