"""Unit tests of the claim protocols against an in-memory NetBox: racing claimants never share a device."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
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
        self.listings = 0
        self.reads = 0

    async def check(self) -> None:
        return None

    async def owned(self, owners: Sequence[str]) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(r) for r in self.records.values() if r["custom_fields"].get(OWNER_FIELD) in owners
        ]

    async def candidates(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One page (NetBox's size here: 25) of free devices, lowest id first, less those `id__n` names."""
        await asyncio.sleep(0)
        self.listings += 1
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
        self.reads += 1
        record = self.records.get(device_id)
        return (copy.deepcopy(record), str(record["version"])) if record else (None, None)

    async def write(
        self, device_id: int, fields: Mapping[str, Any], etag: str | None = None
    ) -> dict[str, Any] | None:
        await asyncio.sleep(0)
        record = self.records[device_id]
        if self.etags and etag is not None and etag != str(record["version"]):
            return None
        for key, value in fields.items():
            if key == "custom_fields":
                record["custom_fields"].update(value)
            elif key == "status":
                record["status"] = {"value": value}
            else:
                record[key] = value
        record["version"] += 1
        return copy.deepcopy(record)

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
        won = (await claiming.take(devices, claimant, claiming.FreeDevices())).device
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


async def test_without_if_match_a_claimant_slower_than_the_settle_delay_writes_nothing() -> None:
    devices = FakeDevices(1, etags=False)
    slow = claiming.Claimant("m0/ns/c0", NetboxDeviceSelector(), DeviceClaim(), settle_seconds=0.0)
    assert await claiming.attempt(devices, 1, slow, None) is None
    assert devices.records[1]["version"] == 0, "a claim read free too long ago is not written"
    prompt = claiming.Claimant("m0/ns/c0", NetboxDeviceSelector(), DeviceClaim(), settle_seconds=5.0)
    assert await claiming.attempt(devices, 1, prompt, None) is not None


async def test_claims_of_one_process_share_listings_and_never_try_one_device_twice() -> None:
    """Sixty claims at once in one process and a page of 25: each claim takes the next device a listing
    showed and only a claim that finds none left lists again, so every one is claimed in one go, on three
    listings (each claim listing its own page made 60 at least, and the later ones saw only devices in
    flight and found "no free device" with 40 free)."""
    devices = FakeDevices(80, etags=False)
    free = claiming.FreeDevices()

    async def one(i: int) -> claiming.Taken:
        claimant = claiming.Claimant(f"m/ns/c{i}", NetboxDeviceSelector(), DeviceClaim(), settle_seconds=0.01)
        return await claiming.take(devices, claimant, free)

    results = await asyncio.gather(*(one(i) for i in range(60)))
    won = [int(r.device["id"]) for r in results if r.device is not None]
    assert len(won) == 60, [r for r in results if r.device is None]
    assert len(set(won)) == 60
    assert [r.tried for r in results] == [1] * 60
    assert devices.listings == 3
    assert free.trying == set()


async def test_a_listed_device_another_process_took_costs_a_read_and_the_claim_goes_on() -> None:
    devices = FakeDevices(3, etags=True)
    free = claiming.FreeDevices()
    first = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim())
    assert (await claiming.take(devices, first, free)).device is not None
    listed = {d for d, r in devices.records.items() if not r["custom_fields"].get(OWNER_FIELD)}
    elsewhere = claiming.Claimant("other/ns/x", NetboxDeviceSelector(), DeviceClaim())
    stolen = await claiming.take(devices, elsewhere, claiming.FreeDevices())  # another process
    assert stolen.device is not None
    assert int(stolen.device["id"]) in listed
    second = claiming.Claimant("m/ns/b", NetboxDeviceSelector(), DeviceClaim())
    taken = await claiming.take(devices, second, free)
    assert taken.device is not None
    assert int(taken.device["id"]) == (listed - {int(stolen.device["id"])}).pop()
    assert devices.listings == 2  # this process listed once, the other once
    assert taken.tried in {1, 2}  # the stolen device, if it came first, cost one try


async def test_a_listing_past_its_freshness_is_not_handed_out() -> None:
    devices = FakeDevices(4, etags=True)
    now = [0.0]
    free = claiming.FreeDevices(fresh_seconds=30, clock=lambda: now[0])
    claimant = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim())
    await claiming.take(devices, claimant, free)
    await claiming.take(devices, claiming.Claimant("m/ns/b", NetboxDeviceSelector(), DeviceClaim()), free)
    assert devices.listings == 1
    now[0] = 31.0
    await claiming.take(devices, claiming.Claimant("m/ns/c", NetboxDeviceSelector(), DeviceClaim()), free)
    assert devices.listings == 2


async def test_a_failed_listing_fails_every_claim_waiting_for_it_and_the_next_lists_again() -> None:
    devices = FakeDevices(4, etags=True)
    free = claiming.FreeDevices()
    gate = asyncio.Event()
    original = devices.candidates

    async def failing(params: Mapping[str, Any]) -> list[dict[str, Any]]:
        await gate.wait()
        raise RuntimeError("NetBox answered 502")

    devices.candidates = failing  # type: ignore[method-assign]
    claims = [
        asyncio.ensure_future(
            claiming.take(
                devices, claiming.Claimant(f"m/ns/c{i}", NetboxDeviceSelector(), DeviceClaim()), free
            )
        )
        for i in range(3)
    ]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(*claims, return_exceptions=True)
    assert [str(o) for o in outcomes] == ["NetBox answered 502"] * 3
    devices.candidates = original  # type: ignore[method-assign]
    claimant = claiming.Claimant("m/ns/d", NetboxDeviceSelector(), DeviceClaim())
    assert (await claiming.take(devices, claimant, free)).device is not None


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
    lost = await claiming.take(devices, first, claiming.FreeDevices())
    assert (lost.device, lost.tried) == (None, claiming.ATTEMPTS)
    devices.read = original_read  # type: ignore[method-assign]
    assert (await claiming.take(devices, first, claiming.FreeDevices())).device is not None
    none_free = await claiming.take(devices, second, claiming.FreeDevices())
    assert (none_free.device, none_free.tried) == (None, 0)


async def test_release_restores_and_held_finds_the_claim_again() -> None:
    devices = FakeDevices(2, etags=True)
    claimant = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim(status="active"))
    won = (await claiming.take(devices, claimant, claiming.FreeDevices())).device
    assert won is not None
    held = await claiming.held(devices, "m/ns/a")
    assert held is not None
    assert held["id"] == won["id"]
    assert await claiming.release(devices, "m/ns/a") == 1
    record = devices.records[int(won["id"])]
    assert record["status"] == {"value": "inventory"}
    assert not record["custom_fields"][OWNER_FIELD]
    assert await claiming.held(devices, "m/ns/a") is None


async def test_claims_on_two_netboxes_with_one_selector_share_no_listing() -> None:
    """One process, two connection Secrets: a claim on a NetBox with nothing free is not handed device ids
    another NetBox listed (it would try them there, and say others were quicker instead of none free)."""
    stocked, empty = FakeDevices(3, etags=True), FakeDevices(0, etags=True)
    free = claiming.FreeDevices()
    first = claiming.Claimant("m/ns/a", NetboxDeviceSelector(), DeviceClaim())
    assert (await claiming.take(stocked, first, free)).device is not None
    second = claiming.Claimant("m/ns/b", NetboxDeviceSelector(), DeviceClaim())
    none_free = await claiming.take(empty, second, free)
    assert (none_free.device, none_free.tried) == (None, 0)
    assert (empty.listings, empty.reads) == (1, 0)
