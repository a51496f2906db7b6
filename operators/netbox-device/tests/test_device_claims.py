"""NetboxDevice on the real control plane: racing claims, release, lost status, NetBox outages.

Runs against real NetBox 4.4.10 and 4.6.8, for both claim protocols: write, then read back, before 4.6;
a conditional write (If-Match with the device's ETag) from 4.6.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from netbox_device_helpers import (
    DEVICES,
    INSTANCE,
    OPERATOR_ENV,
    PREVIOUS_FIELD,
    create_connection_secret,
    create_device_claim,
    owned_devices,
    ready,
    reasons,
    seed_inventory,
    wait_reason,
    without_times,
)

from capfleet import netbox as netbox_api
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.waiting import eventually
from netbox_device import claiming, contexts
from netbox_device.backends.devices import PynetboxDevices

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)
async def test_one_lookup_finds_what_each_of_several_owners_holds(netbox: NetboxInstance) -> None:
    seed_inventory(netbox, 4)
    devices = {d["name"]: d["id"] for d in netbox.client.list_all("dcim/devices/")}
    for name, owner in (("n00", "mgmt-a/ns/m0"), ("n01", "capfleet/ns/m0"), ("n02", "mgmt-a/ns/m1")):
        netbox.client.update("dcim/devices/", devices[name], {"custom_fields": {"capfleet_owner": owner}})
    api = netbox_api.open_api(netbox_api.Connection(url=netbox.url, token=netbox.token, ca_bundle=None))
    netbox.faults.reset_log()
    found = await claiming.held_by(PynetboxDevices(api), ["capfleet/ns/m0", "mgmt-a/ns/m0", "mgmt-b/ns/m0"])
    names = {owner: device["name"] if device else None for owner, device in found.items()}
    assert names == {"capfleet/ns/m0": "n01", "mgmt-a/ns/m0": "n00", "mgmt-b/ns/m0": None}
    assert netbox.faults.count("GET", "/api/dcim/devices/") == 1


@pytest.mark.parametrize("netbox", ["4.4.10"], indirect=True)
async def test_claims_at_once_share_netbox_requests_and_each_gets_what_it_would_alone(
    netbox: NetboxInstance,
) -> None:
    seed_inventory(netbox, 6)
    ids = sorted(d["id"] for d in netbox.client.list_all("dcim/devices/"))
    owners = {device_id: f"mgmt-a/ns/m{device_id}" for device_id in ids}
    for device_id, owner in owners.items():
        netbox.client.update("dcim/devices/", device_id, {"custom_fields": {"capfleet_owner": owner}})
    api = netbox_api.open_api(netbox_api.Connection(url=netbox.url, token=netbox.token, ca_bundle=None))
    devices = PynetboxDevices(api)
    await devices.check()
    assert not devices.etags, "4.4 has no If-Match: a claim reads devices without their ETags"

    async def claim_like(device_id: int) -> tuple[Any, ...]:
        (held,) = await devices.owned([owners[device_id]])
        device, _ = await devices.read(device_id)
        assert device is not None
        interfaces = await devices.interfaces(device_id)
        await devices.journal(device_id, "info", f"test entry for {device_id}")
        return held["id"], device["name"], sorted((i["name"], i["device"]["id"]) for i in interfaces)

    netbox.faults.reset_log()
    alone = [await claim_like(device_id) for device_id in ids]
    assert netbox.faults.count() == 4 * len(ids), "each alone makes its own four requests"
    netbox.faults.reset_log()
    together = await asyncio.gather(*(claim_like(device_id) for device_id in ids))
    assert together == alone
    assert alone[0] == (ids[0], "n00", [("bmc", ids[0]), ("eno1", ids[0])])
    assert netbox.faults.by_endpoint() == {
        "GET /api/dcim/devices/": 2,
        "GET /api/dcim/interfaces/": 1,
        "POST /api/extras/journal-entries/": 1,
    }, "claims at once ask NetBox once for what each asks"
    journal = netbox.client.list_all("extras/journal-entries/")
    written = sorted(e["assigned_object_id"] for e in journal if e["comments"].startswith("test entry"))
    assert written == sorted(ids + ids), "every claim's entry is written, alone and together"


@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)
async def test_twenty_claims_race_for_ten_devices(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    rival = {
        "name": "rival", "site": "dc1", "role": "server", "device_type": "m1", "status": "inventory",
        "custom_fields": {"capfleet_owner": "mgmt-b/default/other"},
    }  # fmt: skip
    busy = {"name": "busy", "site": "dc1", "role": "server", "device_type": "m1", "status": "active"}
    seed_inventory(netbox, 10, extra=[rival, busy])
    netbox.faults.reset_log()  # from here on, only the operator's requests
    await create_connection_secret(kube, namespace, netbox)
    run_operator("netbox_device", namespaces=[namespace], env=OPERATOR_ENV)
    names = [f"m{i:02d}" for i in range(20)]
    await asyncio.gather(*(create_device_claim(kube, netbox, namespace, name) for name in names))

    async def settled() -> dict[str, str | None] | None:
        found = await reasons(kube, DEVICES, namespace)
        counts = [list(found.values()).count(r) for r in ("Claimed", "NoFreeDevice")]
        return found if counts == [10, 10] else None

    found = await eventually("10 claimed and 10 waiting", settled, within=90)
    objects = {o["metadata"]["name"]: o for o in await kube.list(DEVICES, namespace)}
    claimed = {n: objects[n]["status"] for n, r in found.items() if r == "Claimed"}
    assert len({s["deviceID"] for s in claimed.values()}) == 10, "no device is claimed twice"
    waiting = ready(objects[next(n for n, r in found.items() if r == "NoFreeDevice")])
    assert waiting is not None
    assert waiting["status"] == "False"
    assert "site=dc1" in waiting["message"]
    assert "no free device matches" in waiting["message"]

    owned = owned_devices(netbox)
    assert owned["mgmt-b/default/other"]["name"] == "rival", "a rival's claim stays"
    ours = {o: d for o, d in owned.items() if o.startswith(f"{INSTANCE}/")}
    assert set(ours) == {f"{INSTANCE}/{namespace}/{n}" for n in claimed}
    for owner, device in ours.items():
        status = claimed[owner.rsplit("/", 1)[1]]
        assert status["deviceID"] == device["id"]
        assert device["status"]["value"] == "active"
        assert device["tenant"]["slug"] == "acme"
        assert status["bmcAddress"] == device["oob_ip"]["address"].split("/")[0]
        eno1 = next(i for i in status["interfaces"] if i["name"] == "eno1")
        assert eno1["macAddress"].startswith("52:54:00:00:00:"), "MACs of both NetBox MAC models are read"
        assert next(i for i in status["interfaces"] if i["name"] == "bmc")["mgmtOnly"] is True
    journal = netbox.client.list_all("extras/journal-entries/", assigned_object_type="dcim.device")
    assert len(journal) == 10
    claims = [r for r in netbox.faults.requests("PATCH", "/api/dcim/devices/") if r.status == 200]
    assert len(claims) >= 10
    assert {r.conditional for r in claims} == {netbox.at_least("4.6")}, "If-Match exactly from NetBox 4.6"

    # A wiped status comes back identical, from the owner field in NetBox.
    name, before = next(iter(claimed.items()))
    await kube.patch_status(DEVICES, name, dict.fromkeys((*before, "conditions")), namespace)
    restored = await wait_reason(kube, DEVICES, namespace, name, "Claimed")
    assert without_times(restored["status"]) == without_times(before)

    # Releasing one restores its status and tenant, and a waiting claim takes it.
    device_id = before["deviceID"]
    await kube.delete(DEVICES, name, namespace)

    async def taken_again() -> dict[str, Any] | None:
        device = netbox.client.get(f"dcim/devices/{device_id}")
        owner = device["custom_fields"].get("capfleet_owner")
        return device if owner and owner != f"{INSTANCE}/{namespace}/{name}" else None

    retaken = await eventually("a waiting claim to take the released device", taken_again, within=60)
    assert retaken["status"]["value"] == "active"
    released = [
        e["comments"] for e in netbox.client.list_all("extras/journal-entries/", assigned_object_id=device_id)
    ]
    assert any(c.startswith("Released by capfleet") for c in released)

    async def ten_claimed() -> bool:
        return list((await reasons(kube, DEVICES, namespace)).values()).count("Claimed") == 10

    await eventually("ten claims again, the released device's taker among them", ten_claimed)


async def test_release_restores_and_outage_converges(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    seed_inventory(netbox, 4)
    await create_connection_secret(kube, namespace, netbox)
    run_operator("netbox_device", namespaces=[namespace], env=OPERATOR_ENV)
    await create_device_claim(kube, netbox, namespace, "first")
    first = await wait_reason(kube, DEVICES, namespace, "first", "Claimed")
    device_id = first["status"]["deviceID"]
    assert netbox.client.get(f"dcim/devices/{device_id}")["custom_fields"][PREVIOUS_FIELD]

    await kube.delete(DEVICES, "first", namespace)

    async def restored() -> dict[str, Any] | None:
        device = netbox.client.get(f"dcim/devices/{device_id}")
        return device if not device["custom_fields"].get("capfleet_owner") else None

    device = await eventually("the device to be released", restored)
    assert device["status"]["value"] == "inventory"
    assert device["tenant"]["slug"] == "previous"
    assert not device["custom_fields"].get(PREVIOUS_FIELD)

    netbox.faults.fail(503, count=None)
    await asyncio.gather(*(create_device_claim(kube, netbox, namespace, f"o{i}") for i in range(3)))
    failing = await wait_reason(kube, DEVICES, namespace, "o0", "NetBoxUnavailable")
    assert "503" in (ready(failing) or {}).get("message", "")
    netbox.faults.clear()
    for name in ("o0", "o1", "o2"):
        await wait_reason(kube, DEVICES, namespace, name, "Claimed", within=90)
    owned = owned_devices(netbox)
    assert sorted(owned) == sorted(f"{INSTANCE}/{namespace}/o{i}" for i in range(3))
    ids = [(await kube.get(DEVICES, f"o{i}", namespace) or {})["status"]["deviceID"] for i in range(3)]
    assert len(set(ids)) == 3

    # Deleting for clusterctl move leaves the claim in NetBox.
    move = {"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}}
    await kube.patch(DEVICES, "o0", move, namespace)
    await kube.delete(DEVICES, "o0", namespace)

    async def gone() -> bool:
        return await kube.get(DEVICES, "o0", namespace) is None

    await eventually("o0 to be gone", gone)
    assert f"{INSTANCE}/{namespace}/o0" in owned_devices(netbox)


async def test_a_deletion_that_needs_no_netbox_completes_without_it(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    """No deletion hangs on a NetBox it does not need: a claim whose Secret never existed never reached
    NetBox and is deleted at once; a claim that holds a device while NetBox is down waits for it, until a
    person marks it detached (NetBox gone for good), and then the device is left as NetBox has it."""
    seed_inventory(netbox, 2)
    await create_connection_secret(kube, namespace, netbox)
    run_operator("netbox_device", namespaces=[namespace], env=OPERATOR_ENV)
    await create_device_claim(kube, netbox, namespace, "lonely", connectionSecretRef={"name": "never"})
    await wait_reason(kube, DEVICES, namespace, "lonely", "SecretMissing")
    await create_device_claim(kube, netbox, namespace, "held")
    await wait_reason(kube, DEVICES, namespace, "held", "Claimed")

    async def gone(name: str) -> bool:
        return await kube.get(DEVICES, name, namespace) is None

    await kube.delete(DEVICES, "lonely", namespace)
    await eventually("the claim that never reached NetBox to be deleted", lambda: gone("lonely"), 30)

    netbox.faults.fail(503, count=None)
    try:
        await kube.delete(DEVICES, "held", namespace)
        await wait_reason(kube, DEVICES, namespace, "held", "NetBoxUnavailable")
        assert not await gone("held"), "a device is held: its deletion waits for NetBox"
        detach = {"metadata": {"annotations": {contexts.DETACHED: "true"}}}
        await kube.patch(DEVICES, "held", detach, namespace)
        await eventually("the detached claim to be deleted", lambda: gone("held"), 60)
    finally:
        netbox.faults.clear()
    assert f"{INSTANCE}/{namespace}/held" in owned_devices(netbox), "detached: NetBox is left as it is"
