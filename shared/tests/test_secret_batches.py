"""Finalizer changes of many holders to one Secret go as one patch per batch: with a gated stand-in for
the API client (unit), and on a real API server with sixty holders at once (integration)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from capfleet import errors, resources, secretholds
from capfleet.api import kinds
from capfleet.kube import Kube


class GatedKube:
    """Records each Secret patch; each waits for the gate, so changes asked meanwhile queue up."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.gate = asyncio.Event()
        self.fail_next: Exception | None = None

    async def patch(self, resource: Any, name: str, patch: dict[str, Any], namespace: str, **_: Any) -> None:
        self.patches.append(patch["metadata"])
        await self.gate.wait()
        failure, self.fail_next = self.fail_next, None
        if failure is not None:
            raise failure


async def test_changes_asked_while_a_patch_is_in_flight_go_together_in_the_next() -> None:
    kube = GatedKube()
    batches = secretholds.Batches(kube)  # type: ignore[arg-type]
    changes = [asyncio.create_task(batches.change("ns/s", secretholds.ADD, "h/0"))]
    await asyncio.sleep(0.01)
    changes += [asyncio.create_task(batches.change("ns/s", secretholds.ADD, f"h/{i}")) for i in range(1, 10)]
    await asyncio.sleep(0.01)
    assert kube.patches == [{"finalizers": ["h/0"]}], "the first goes at once; the others wait for it"
    kube.gate.set()
    await asyncio.wait_for(asyncio.gather(*changes), 5.0)
    assert kube.patches == [{"finalizers": ["h/0"]}, {"finalizers": [f"h/{i}" for i in range(1, 10)]}]


async def test_a_failed_patch_fails_every_change_it_carried_and_no_other() -> None:
    kube = GatedKube()
    batches = secretholds.Batches(kube)  # type: ignore[arg-type]
    first = asyncio.create_task(batches.change("ns/s", secretholds.REMOVE, "h/0"))
    await asyncio.sleep(0.01)
    carried = [asyncio.create_task(batches.change("ns/s", secretholds.REMOVE, f"h/{i}")) for i in (1, 2)]
    await asyncio.sleep(0.01)
    kube.fail_next = errors.BackendUnavailable("busy")
    kube.gate.set()
    with pytest.raises(errors.BackendUnavailable):
        await asyncio.wait_for(first, 5.0)
    await asyncio.wait_for(asyncio.gather(*carried), 5.0)
    assert kube.patches[1] == {"$deleteFromPrimitiveList/finalizers": ["h/1", "h/2"]}


async def test_a_cancelled_writer_leaves_no_change_it_carried_waiting() -> None:
    kube = GatedKube()
    batches = secretholds.Batches(kube)  # type: ignore[arg-type]
    writer = asyncio.create_task(batches.change("ns/s", secretholds.ADD, "h/0"))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(batches.change("ns/s", secretholds.ADD, "h/1"))
    await asyncio.sleep(0.01)
    writer.cancel()
    kube.gate.set()
    await asyncio.wait_for(waiting, 5.0)  # carried by the next patch, whoever writes it
    assert kube.patches[-1] == {"finalizers": ["h/1"]}
    with pytest.raises(asyncio.CancelledError):
        await writer


@pytest.mark.integration
async def test_sixty_holders_at_once_hold_and_let_go_of_one_secret(kube: Kube, namespace: str) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared"}, "stringData": {"a": "b"}}
    await kube.create(resources.SECRETS, secret, namespace)
    resource = kinds.NETBOX_DEVICE.resource
    holders = []
    for i in range(60):
        device = {
            "apiVersion": resource.api_version,
            "kind": "NetboxDevice",
            "metadata": {"name": f"d{i}"},
            "spec": {"connectionSecretRef": {"name": "shared"}},
        }
        created = await kube.create(resource, device, namespace)
        holders.append(secretholds.Holder(resource, created["metadata"]))
    read = await kube.get(resources.SECRETS, "shared", namespace)
    assert read is not None
    await asyncio.gather(*(secretholds.hold(kube, holder, [read]) for holder in holders))
    held = await kube.get(resources.SECRETS, "shared", namespace)
    assert held is not None
    assert sorted(held["metadata"]["finalizers"]) == sorted(holder.finalizer for holder in holders)
    await asyncio.gather(*(secretholds.let_go(kube, holder) for holder in holders[:30]))
    left = await kube.get(resources.SECRETS, "shared", namespace)
    assert left is not None
    assert sorted(left["metadata"]["finalizers"]) == sorted(holder.finalizer for holder in holders[30:])
    await asyncio.gather(*(secretholds.let_go(kube, holder) for holder in holders[30:]))
    gone = await kube.get(resources.SECRETS, "shared", namespace)
    assert gone is not None
    assert not gone["metadata"].get("finalizers")


class SlowReads:
    """Counts Secret reads; each waits for the gate."""

    def __init__(self) -> None:
        self.reads = 0
        self.gate = asyncio.Event()

    async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        self.reads += 1
        await self.gate.wait()
        return {"metadata": {"name": name, "namespace": namespace}}


async def test_reads_asked_while_one_is_in_flight_share_it_and_a_cancelled_reader_leaves_it_alone() -> None:
    kube = SlowReads()
    batches = secretholds.Batches(kube)  # type: ignore[arg-type]
    readers = [asyncio.create_task(batches.read("ns", "s")) for _ in range(20)]
    await asyncio.sleep(0.01)
    readers[0].cancel()
    kube.gate.set()
    read = await asyncio.wait_for(asyncio.gather(*readers[1:]), 5.0)
    assert kube.reads == 1
    assert all(secret is not None and secret["metadata"]["name"] == "s" for secret in read)
    assert await batches.read("ns", "s") is not read[0], "a read after the last landed is a new GET"
    assert kube.reads == 2
