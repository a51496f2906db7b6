"""Deleting a test's namespace as `kubectl delete namespace` does, and waiting for it to be gone.

The namespace controller deletes every object in the namespace at once. Whether a Secret or its users go
first is a race an operator usually wins when it is up and its backend is fast, so the deterministic
test of "a deleted Secret outlives its users" (`delete_namespace_while_down`) deletes the namespace while
the operator is stopped, waits until the namespace controller has deleted the Secrets, and only then
starts the operator again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.waiting import eventually


async def delete_namespace(kube: Kube, namespace: str, within: float) -> None:
    """Delete the namespace and wait until it is gone; on time-out, name what still holds it."""
    await kube.delete(resources.NAMESPACES, namespace)
    await wait_gone(kube, namespace, within)


async def delete_namespace_while_down(
    kube: Kube, namespace: str, operator: OperatorProcess, secret_names: Sequence[str], within: float
) -> list[dict[str, Any]]:
    """Stop `operator`, delete the namespace, wait until its Secrets `secret_names` are deleted (gone, or
    kept by finalizers), start the operator again and wait for the namespace to go. Returns the Secrets as
    seen once deleted."""
    operator.stop()
    await kube.delete(resources.NAMESPACES, namespace)

    async def deleted() -> list[dict[str, Any]] | None:
        found = [await kube.get(resources.SECRETS, name, namespace) for name in secret_names]
        if any(s is not None and not s["metadata"].get("deletionTimestamp") for s in found):
            return None
        return [s for s in found if s is not None] or [{}]

    try:
        seen = await eventually("the namespace's Secrets to be deleted", deleted, 60)
    except AssertionError as exc:
        left = await kube.get(resources.NAMESPACES, namespace)
        blockers = [condition_text(c) for c in ((left or {}).get("status") or {}).get("conditions") or []]
        raise AssertionError(f"{exc}; namespace: {blockers}") from exc
    # Restarted cluster-wide, as the Deployments run: kopf started with `--namespace` never serves a
    # namespace that is already being deleted (it waits for the namespace's deletion to finish).
    operator.namespaces = []
    operator.start()
    await wait_gone(kube, namespace, within)
    return [s for s in seen if s]


async def wait_gone(kube: Kube, namespace: str, within: float) -> None:
    async def gone() -> bool:
        return await kube.get(resources.NAMESPACES, namespace) is None

    try:
        await eventually(f"namespace {namespace} to be deleted", gone, within, interval=1)
    except AssertionError as exc:
        held = []
        for resource in (resources.SECRETS, *(k.resource for k in kinds.ALL if k.resource.namespaced)):
            held += [holding(resource.kind, obj) for obj in await kube.list(resource, namespace)]
        left = await kube.get(resources.NAMESPACES, namespace)
        blockers = [condition_text(c) for c in ((left or {}).get("status") or {}).get("conditions") or []]
        raise AssertionError(f"{exc}; still there: {[h for h in held if h]}; namespace: {blockers}") from exc


def holding(kind: str, obj: dict[str, Any]) -> str:
    """`Kind name: [finalizers] (Ready=status reason: message)` for an object that holds its namespace, or
    an empty string for one without finalizers: what a stuck deletion is waiting for, and why."""
    finalizers = obj["metadata"].get("finalizers")
    if not finalizers:
        return ""
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = [condition_text(c) for c in conditions if c.get("type") == "Ready"]
    return f"{kind} {obj['metadata']['name']}: {finalizers}{f' ({ready[0]})' if ready else ''}"


def condition_text(condition: dict[str, Any]) -> str:
    status = f"{condition.get('type')}={condition.get('status')}"
    return f"{status} {condition.get('reason')}: {condition.get('message')}"
