"""Unit tests of the claim protocols against an in-memory NetBox: racing claimants never share a device."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from capfleet.api.netbox import DeviceClaim, NetboxDeviceSelector
from netbox_device import claiming
from netbox_device.selection import OWNER_FIELD, value_of


class FakeDevices:
    """Devices in memory; writes are last-writer-wins, If-Match honoured when `etags`."""

    def __init__(self, count: int, *, etags: bool) -> None:
        self.etags = etags
        self.records: dict[int, dict[str, Any]] = {
            i: {"id": i, "status": {"value": "inventory"}, "tenant": None, "custom_fields": {}, "version": 0}
            for i in range(1, count + 1)
        }
        self.journal_entries: list[tuple[int, str]] = []

    async def check(self) -> None:
        return None

    async def owned(self, owner: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(r) for r in self.records.values() if r["custom_fields"].get(OWNER_FIELD) == owner
        ]

    async def candidates(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One page (NetBox's size here: 25) of free devices, lowest id first, less those `id__n` names."""
        await asyncio.sleep(0)
        excluded = set(params.get("id__n", ()))
        return [
            copy.deepcopy(r)
            for r in self.records.values()
            if value_of(r["status"]) == params["status"]
            and not r["custom_fields"].get(OWNER_FIELD)
            and r["id"] not in excluded
        ][:25]

    async def read(self, device_id: int) -> tuple[dict[str, Any] | None, str | None]:
        await asyncio.sleep(0)
        record = self.records.get(device_id)
        return (copy.deepcopy(record), str(record["version"])) if record else (None, None)

    async def write(self, device_id: int, fields: Mapping[str, Any], etag: str | None = None) -> bool:
        await asyncio.sleep(0)
        record = self.records[device_id]
        if self.etags and etag is not None and etag != str(record["version"]):
            return False
        for key, value in fields.items():
            if key == "custom_fields":
                record["custom_fields"].update(value)
            elif key == "status":
                record["status"] = {"value": value}
            else:
                record[key] = value
        record["version"] += 1
        return True

    async def interfaces(self, device_id: int) -> list[dict[str, Any]]:
        return []

    async def tenant_id(self, slug: str) -> int:
        return 42

    async def journal(self, device_id: int, kind: str, comments: str) -> None:
        self.journal_entries.append((device_id, comments))


async def race(devices: FakeDevices, claimants: int) -> dict[str, int | None]:
    """Every claimant in its own process (own `reserved`), all at once."""

    async def one(i: int) -> tuple[str, int | None]:
        claimant = claiming.Claimant(
            f"m{i % 2}/ns/c{i}", NetboxDeviceSelector(), DeviceClaim(tenant="acme"), settle_seconds=0.01
        )
        won = (await claiming.take(devices, claimant, set())).device
        return claimant.owner, int(won["id"]) if won else None

    return dict(await asyncio.gather(*(one(i) for i in range(claimants))))


async def test_compare_and_set_gives_each_device_to_one_claimant() -> None:
    devices = FakeDevices(10, etags=True)
    results = await race(devices, 20)
    won = [d for d in results.values() if d is not None]
    assert sorted(won) == list(range(1, 11))
    for owner, device_id in results.items():
        if device_id is not None:
            assert devices.records[device_id]["custom_fields"][OWNER_FIELD] == owner
            assert devices.records[device_id]["tenant"] == 42


async def test_read_back_resolves_races_to_the_last_writer() -> None:
    devices = FakeDevices(5, etags=False)
    results = await race(devices, 12)
    won = [d for d in results.values() if d is not None]
    assert len(won) == len(set(won)), "no device is held by two claimants"
    for owner, device_id in results.items():
        if device_id is not None:
            assert devices.records[device_id]["custom_fields"][OWNER_FIELD] == owner


async def test_claims_of_one_process_are_shown_free_devices_none_of_them_is_trying() -> None:
    """Sixty claims at once in one process and a page of 25: each is listed devices the others here are
    not trying, so every one is claimed in one go (listed without that, the later ones saw only devices in
    flight and found "no free device" with 40 free)."""
    devices = FakeDevices(80, etags=False)
    reserved: set[int] = set()

    async def one(i: int) -> claiming.Taken:
        claimant = claiming.Claimant(f"m/ns/c{i}", NetboxDeviceSelector(), DeviceClaim(), settle_seconds=0.01)
        return await claiming.take(devices, claimant, reserved)

    results = await asyncio.gather(*(one(i) for i in range(60)))
    won = [int(r.device["id"]) for r in results if r.device is not None]
    assert len(won) == 60, [r for r in results if r.device is None]
    assert len(set(won)) == 60
    assert reserved == set()


async def test_a_claim_that_lost_every_device_it_tried_says_so_and_one_with_none_free_tried_none() -> None:
    devices = FakeDevices(1, etags=True)
    first = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim())
    second = claiming.Claimant("m/ns/b", NetboxDeviceSelector(), DeviceClaim())
    original_read = devices.read

    async def read_then_lose(device_id: int) -> tuple[dict[str, Any] | None, str | None]:
        found = await original_read(device_id)
        devices.records[device_id]["version"] += 1  # another claimant wrote in between
        return found

    devices.read = read_then_lose  # type: ignore[method-assign]
    lost = await claiming.take(devices, first, set())
    assert (lost.device, lost.tried, lost.listed) == (None, 1, True)
    devices.read = original_read  # type: ignore[method-assign]
    assert (await claiming.take(devices, first, set())).device is not None
    none_free = await claiming.take(devices, second, set())
    assert (none_free.device, none_free.tried, none_free.listed) == (None, 0, False)


async def test_release_restores_and_held_finds_the_claim_again() -> None:
    devices = FakeDevices(2, etags=True)
    claimant = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim(status="active"))
    won = (await claiming.take(devices, claimant, set())).device
    assert won is not None
    held = await claiming.held(devices, "m/ns/a")
    assert held is not None
    assert held["id"] == won["id"]
    assert await claiming.release(devices, "m/ns/a") == 1
    record = devices.records[int(won["id"])]
    assert record["status"] == {"value": "inventory"}
    assert not record["custom_fields"][OWNER_FIELD]
    assert await claiming.held(devices, "m/ns/a") is None
