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
        await asyncio.sleep(0)
        return [
            copy.deepcopy(r)
            for r in self.records.values()
            if value_of(r["status"]) == params["status"] and not r["custom_fields"].get(OWNER_FIELD)
        ]

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
        won = await claiming.take(devices, claimant, set())
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


async def test_release_restores_and_held_finds_the_claim_again() -> None:
    devices = FakeDevices(2, etags=True)
    claimant = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim(status="active"))
    won = await claiming.take(devices, claimant, set())
    assert won is not None
    held = await claiming.held(devices, "m/ns/a")
    assert held is not None
    assert held["id"] == won["id"]
    assert await claiming.release(devices, "m/ns/a") == 1
    record = devices.records[int(won["id"])]
    assert record["status"] == {"value": "inventory"}
    assert not record["custom_fields"][OWNER_FIELD]
    assert await claiming.held(devices, "m/ns/a") is None
