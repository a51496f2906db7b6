"""Unit tests of the reconciles' status and Events: a claim, a wait, a pause, a rebuilt status, a move.

NetBox and the API server are small in-memory fakes; the status written is what the reconcile kit's
recorder writes from what NetBox holds.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from capfleet import errors, events, pausing, secretholds
from capfleet.api.base import ConnectionSecretReference
from capfleet.controller.caches import WatchCache
from capfleet.controller.engine import DONE, Result
from capfleet.kube import Kube
from capfleet.resources import Resource
from capfleet.secretholds import Holder
from netbox_device import claiming, device_claims, vm_serving
from netbox_device.backends.devices import Devices
from netbox_device.backends.machines import Machines
from netbox_device.clients import Clients
from netbox_device.contexts import Context, Shared
from netbox_device.selection import OWNER_FIELD, OWNER_INSTANCE
from netbox_device.settings import NetboxSettings


class OneDevice:
    """A NetBox with one free device (or none), enough for `claiming` and the status it feeds."""

    etags = True

    def __init__(self, *, free: bool = True) -> None:
        self.device: dict[str, Any] = {
            "id": 7,
            "name": "n07",
            "status": {"value": "inventory" if free else "active"},
            "custom_fields": {},
            "oob_ip": {"address": "10.9.0.17/24"},
        }
        self.owner_lookups = 0

    async def check(self) -> None:
        return None

    async def owned(self, owners: Sequence[str]) -> list[dict[str, Any]]:
        self.owner_lookups += 1
        held = self.device["custom_fields"].get(OWNER_FIELD) in owners
        return [copy.deepcopy(self.device)] if held else []

    async def candidates(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        free = self.device["status"]["value"] == params["status"]
        return [copy.deepcopy(self.device)] if free and not self.device["custom_fields"] else []

    async def read(self, device_id: int) -> tuple[dict[str, Any] | None, str | None]:
        return copy.deepcopy(self.device), "1"

    async def write(
        self, device_id: int, fields: Mapping[str, Any], etag: str | None = None
    ) -> dict[str, Any] | None:
        self.device["custom_fields"].update(fields["custom_fields"])
        self.device["status"] = {"value": fields.get("status", self.device["status"]["value"])}
        return copy.deepcopy(self.device)

    async def interfaces(self, device_id: int) -> list[dict[str, Any]]:
        return [{"name": "eno1", "mac_address": "52:54:00:00:00:07"}]

    async def tenant_id(self, slug: str) -> int:
        return 1

    async def journal(self, device_id: int, kind: str, comments: str) -> None:
        return None


class FakeMachines:
    """NetBox's VM endpoints in memory: records by endpoint, filtered by exact field values."""

    def __init__(self) -> None:
        self.records: dict[str, dict[int, dict[str, Any]]] = {}

    @staticmethod
    def _field(record: Mapping[str, Any], key: str) -> Any:
        if key.startswith("cf_"):
            return (record.get("custom_fields") or {}).get(key[3:])
        return record.get("virtual_machine" if key == "virtual_machine_id" else key)

    async def check(self) -> None:
        return None

    async def list(self, endpoint: str, **params: Any) -> list[dict[str, Any]]:
        found = self.records.get(endpoint, {}).values()
        return [copy.deepcopy(r) for r in found if all(self._field(r, k) == v for k, v in params.items())]

    async def create(self, endpoint: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        table = self.records.setdefault(endpoint, {})
        record = {**fields, "id": len(table) + 1}
        table[record["id"]] = record
        return copy.deepcopy(record)

    async def update(self, endpoint: str, pk: int, fields: Mapping[str, Any]) -> None:
        self.records[endpoint][pk].update(fields)

    async def delete(self, endpoint: str, pk: int) -> None:
        self.records.get(endpoint, {}).pop(pk, None)

    async def lookup(self, endpoint: str, **query: Any) -> int:
        return 4


class FakeClients(Clients):
    def __init__(self, netbox: OneDevice, machines: FakeMachines | None = None) -> None:
        super().__init__()
        self.netbox, self.vms = netbox, machines or FakeMachines()

    async def devices(self, kube: Kube, holder: Holder, ref: ConnectionSecretReference) -> Devices:
        return self.netbox

    async def machines(self, kube: Kube, holder: Holder, ref: ConnectionSecretReference) -> Machines:
        return self.vms


class FakeKube:
    """The API server as far as status writes and Events go."""

    field_manager = "capfleet-netbox-device"

    CLUSTER_UID = "0c4b2f6e-93a1-4d55-8a7e-5f2b0d1c9e33"

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.annotations: list[dict[str, str]] = []

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if resource.plural != "namespaces":
            return None  # a deleted object, read again as its deletion lets go of its Secret
        assert name == "kube-system"
        return {"metadata": {"name": name, "uid": self.CLUSTER_UID}}

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        strategic: bool = False,
    ) -> None:
        if resource.plural == "secrets":
            return  # letting go of a held Secret: its finalizer
        self.annotations.append(patch["metadata"]["annotations"])

    async def patch_status(
        self, resource: Resource, name: str, status: dict[str, Any], namespace: str | None = None
    ) -> None:
        self.statuses.append(status)

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> None:
        self.events.append((body["type"], body["reason"]))


def context(
    netbox: OneDevice, machines: FakeMachines | None = None, instance: str = "mgmt-a"
) -> tuple[Context, FakeKube]:
    fake = FakeKube()
    kube = cast(Kube, fake)
    shared = Shared(clients=FakeClients(netbox, machines))
    settings = NetboxSettings(instance=instance)
    return Context(kube, events.Recorder(kube), WatchCache(), settings, shared, reads=kube), fake


def claim(annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "netbox.capfleet.dev/v1alpha1",
        "kind": "NetboxDevice",
        "metadata": {
            "name": "m0",
            "namespace": "ns",
            "uid": "u1",
            "generation": 1,
            "annotations": annotations or {},
        },
        "spec": {"connectionSecretRef": {"name": "netbox"}},
        "status": status or None,
    }


def conditions(status: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


async def test_a_claim_writes_the_device_and_a_ready_naming_it() -> None:
    netbox = OneDevice()
    ctx, kube = context(netbox)
    await device_claims.serve(ctx, claim())
    [status] = kube.statuses
    assert netbox.device["custom_fields"][OWNER_FIELD] == "mgmt-a/ns/m0"
    assert (status["deviceID"], status["bmcAddress"]) == (7, "10.9.0.17")
    assert conditions(status) == {
        "Paused": ("False", "NotPaused", ""),
        "Ready": ("True", "Claimed", "device n07 (NetBox id 7)"),
    }
    assert kube.events == [("Normal", "Claimed")]
    assert kube.annotations == [{OWNER_INSTANCE: "mgmt-a"}]
    assert netbox.owner_lookups == 1  # which device the owner holds is asked once, before the claim


async def test_without_a_configured_name_claims_are_under_one_derived_from_the_cluster() -> None:
    netbox = OneDevice()
    ctx, kube = context(netbox, instance="auto")
    await device_claims.serve(ctx, claim())
    assert kube.annotations == [{OWNER_INSTANCE: "capfleet-0c4b2f6e93a1"}]
    assert netbox.device["custom_fields"][OWNER_FIELD] == "capfleet-0c4b2f6e93a1/ns/m0"
    # The old default's owner and the derived one, asked at once (each a listing NetBox filters in full).
    assert netbox.owner_lookups == 1
    # Recorded on the object: a restart (or a move to a cluster with another name) finds the device again.
    recorded = claim({OWNER_INSTANCE: "capfleet-0c4b2f6e93a1"})
    other_ctx, other_kube = context(netbox, instance="mgmt-b")
    await device_claims.serve(other_ctx, recorded)
    assert (other_kube.annotations, other_kube.statuses[0]["deviceID"]) == ([], 7)


async def test_a_device_claimed_before_names_were_recorded_stays_held_under_the_old_default() -> None:
    netbox = OneDevice()
    netbox.device["custom_fields"][OWNER_FIELD] = "capfleet/ns/m0"
    netbox.device["status"] = {"value": "active"}
    ctx, kube = context(netbox, instance="")
    await device_claims.serve(ctx, claim())
    assert kube.annotations == [{OWNER_INSTANCE: "capfleet"}]
    assert kube.statuses[0]["deviceID"] == 7
    assert netbox.owner_lookups == 1


async def test_a_claim_made_without_if_match_is_checked_again_once_a_late_write_could_have_landed() -> None:
    netbox = OneDevice()
    netbox.etags = False
    ctx, kube = context(netbox)
    first = await device_claims.serve(ctx, claim({OWNER_INSTANCE: "mgmt-a"}))
    assert first == Result(ctx.settings.settle_seconds + claiming.RECHECK_SECONDS)
    # The check finds it still held: nothing more to look for until something changes.
    assert await device_claims.serve(ctx, claim({OWNER_INSTANCE: "mgmt-a"})) == DONE
    # Taken over by another management cluster's late write: the next check claims again.
    netbox.device["custom_fields"][OWNER_FIELD] = "mgmt-b/ns/m9"
    with pytest.raises(device_claims.NoFreeDevice):
        await device_claims.serve(ctx, claim({OWNER_INSTANCE: "mgmt-a"}))
    assert conditions(kube.statuses[-1])["Ready"][:2] == ("False", "NoFreeDevice")
    netbox.etags = True
    netbox.device.update(custom_fields={}, status={"value": "inventory"})
    assert await device_claims.serve(ctx, claim({OWNER_INSTANCE: "mgmt-a"})) == DONE, "If-Match is final"


async def test_no_free_device_is_ready_false_and_retried_at_the_poll_interval() -> None:
    ctx, kube = context(OneDevice(free=False))
    with pytest.raises(device_claims.NoFreeDevice) as raised:
        await device_claims.serve(ctx, claim())
    assert raised.value.delay(0) == 60.0
    [status] = kube.statuses
    assert "deviceID" not in status
    paused, ready = conditions(status)["Paused"], conditions(status)["Ready"]
    assert paused == ("False", "NotPaused", "")
    assert ready[:2] == ("False", "NoFreeDevice")
    assert "no free device matches the selector (status=inventory)" in ready[2]
    assert kube.events == [("Warning", "NoFreeDevice")]


async def test_a_paused_claim_only_says_so() -> None:
    netbox = OneDevice()
    ctx, kube = context(netbox)
    await device_claims.serve(ctx, claim({pausing.PAUSED_ANNOTATION: ""}))
    assert [conditions(s) for s in kube.statuses] == [
        {"Paused": ("True", "Paused", "reconciliation is paused")}
    ]
    assert not netbox.device["custom_fields"]


async def test_a_wiped_status_is_rebuilt_from_the_device_already_held_and_claims_no_other() -> None:
    netbox = OneDevice()
    ctx, kube = context(netbox)
    await device_claims.serve(ctx, claim())
    await device_claims.serve(ctx, claim())  # the object as a wiped status leaves it: no status at all
    claimed, rebuilt = kube.statuses
    assert rebuilt["deviceID"] == claimed["deviceID"] == 7
    assert conditions(rebuilt) == conditions(claimed)
    assert kube.events == [("Normal", "Claimed")], "one Event per transition"


async def test_delete_for_move_keeps_the_claim_and_a_paused_delete_waits() -> None:
    netbox = OneDevice()
    ctx, _ = context(netbox)
    await device_claims.serve(ctx, claim())
    await device_claims.release(ctx, claim({pausing.DELETE_FOR_MOVE_ANNOTATION: ""}))
    assert netbox.device["custom_fields"][OWNER_FIELD] == "mgmt-a/ns/m0"
    # A claim that reached NetBox held its connection Secret first (the fake clients skip that step).
    held = {secretholds.HELD_ANNOTATION: "ns/netbox"}
    with pytest.raises(errors.Waiting):
        await device_claims.release(ctx, claim({pausing.PAUSED_ANNOTATION: "", **held}))
    await device_claims.release(ctx, claim(held))
    assert netbox.device["custom_fields"][OWNER_FIELD] is None


def vm(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "netbox.capfleet.dev/v1alpha1",
        "kind": "NetboxVirtualMachine",
        "metadata": {
            "name": "w0",
            "namespace": "ns",
            "uid": "u2",
            "generation": 1,
            "annotations": annotations or {},
        },
        "spec": {
            "connectionSecretRef": {"name": "netbox"},
            "name": "w0",
            "cluster": "c1",
            "vcpus": 2,
            "interfaces": [{"name": "eth0", "macAddress": "52:54:00:00:01:00", "addresses": ["10.0.0.5/24"]}],
        },
    }


async def test_a_vm_is_registered_its_status_rebuilt_and_it_is_deregistered() -> None:
    machines = FakeMachines()
    ctx, kube = context(OneDevice(), machines)
    await vm_serving.serve(ctx, vm())
    [status] = kube.statuses
    assert status["virtualMachineID"] == 1
    assert conditions(status)["Ready"] == ("True", "Registered", "virtual machine #1 in NetBox")
    [record] = machines.records["virtualization/virtual-machines"].values()
    assert (record["name"], record["cluster"], record["vcpus"], record["primary_ip4"]) == ("w0", 4, 2, 1)
    assert record["custom_fields"] == {OWNER_FIELD: "mgmt-a/ns/w0"}

    await vm_serving.serve(ctx, vm())  # a wiped status: rebuilt from the record already made
    assert kube.statuses[-1]["virtualMachineID"] == 1
    assert kube.events == [("Normal", "Registered")]

    await vm_serving.release(ctx, vm({pausing.DELETE_FOR_MOVE_ANNOTATION: ""}))
    assert machines.records["virtualization/virtual-machines"]
    await vm_serving.release(ctx, vm({secretholds.HELD_ANNOTATION: "ns/netbox"}))
    assert not machines.records["virtualization/virtual-machines"]
