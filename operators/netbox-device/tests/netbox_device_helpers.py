"""Shared steps of the netbox-device integration tests: NetBox inventory, the objects, and waiting.

Everything in NetBox is created through its REST API, as a user's tooling would.
"""

from __future__ import annotations

import base64
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.waiting import eventually

DEVICES = kinds.NETBOX_DEVICE.resource
MACHINES = kinds.NETBOX_VIRTUAL_MACHINE.resource
OWNER_FIELD = "capfleet_owner"
PREVIOUS_FIELD = "capfleet_previous"
INSTANCE = "mgmt-a"
OPERATOR_ENV = {
    "CAPFLEET_INSTANCE_NAME": INSTANCE,
    "CAPFLEET_NETBOX_POLL_SECONDS": "1",
    "CAPFLEET_NETBOX_SETTLE_SECONDS": "0.2",
}


def ensure_custom_fields(netbox: NetboxInstance) -> None:
    """The owner field (exact, on devices and VMs) and the previous-state field (on devices)."""
    client = netbox.client
    wanted = {
        OWNER_FIELD: (["dcim.device", "virtualization.virtualmachine", "ipam.ipaddress"], "exact"),
        PREVIOUS_FIELD: (["dcim.device"], "loose"),
    }
    for name, (types, logic) in wanted.items():
        found = client.list_all("extras/custom-fields/", name=name)
        if not found:
            body = {"name": name, "type": "text", "object_types": types, "filter_logic": logic}
            client.create("extras/custom-fields/", body)
        elif not set(types) <= set(found[0]["object_types"]):
            merged = sorted({*found[0]["object_types"], *types})
            client.update("extras/custom-fields/", found[0]["id"], {"object_types": merged})


def seed_inventory(netbox: NetboxInstance, free: int, *, extra: list[dict[str, Any]] | None = None) -> Any:
    """A site dc1 with `free` inventory devices n00.. (tenant "previous", a bmc interface and eno1)."""
    ensure_custom_fields(netbox)
    devices = [
        {
            "name": f"n{i:02d}",
            "serial": f"SN{i:02d}",
            "site": "dc1",
            "role": "server",
            "device_type": "m1",
            "rack": "r1",
            "tenant": "previous",
            "status": "inventory",
            "interfaces": [
                {"name": "bmc", "mgmt_only": True, "ip_addresses": [f"10.9.0.{i + 10}/24"]},
                {"name": "eno1", "mac_address": f"52:54:00:00:00:{i:02x}"},
            ],
            "oob_ip": f"10.9.0.{i + 10}/24",
        }
        for i in range(free)
    ]
    return netbox.seed(
        {
            "tenants": [{"name": "previous", "slug": "previous"}, {"name": "acme", "slug": "acme"}],
            "sites": [{"name": "dc1", "slug": "dc1"}],
            "manufacturers": [{"name": "acme", "slug": "acme"}],
            "device_roles": [{"name": "server", "slug": "server"}],
            "device_types": [{"manufacturer": "acme", "model": "M1", "slug": "m1"}],
            "racks": [{"name": "r1", "site": "dc1"}],
            "devices": devices + (extra or []),
        }
    )


async def create_connection_secret(kube: Kube, namespace: str, netbox: NetboxInstance) -> None:
    data = {"url": netbox.url, "token": netbox.token}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "netbox"},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
    await kube.create(resources.SECRETS, secret, namespace)


async def create_device_claim(
    kube: Kube, netbox: NetboxInstance, namespace: str, name: str, **spec: Any
) -> dict[str, Any]:
    body = {
        "apiVersion": DEVICES.api_version,
        "kind": "NetboxDevice",
        "metadata": {"name": name},
        "spec": {
            "connectionSecretRef": {"name": "netbox"},
            "selector": {"site": "dc1", "role": "server"},
            "claim": {"tenant": "acme", "status": "active"},
            **spec,
        },
    }
    return await kube.create(DEVICES, body, namespace)


def ready(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), None)


async def reasons(kube: Kube, resource: resources.Resource, namespace: str) -> dict[str, str | None]:
    return {
        o["metadata"]["name"]: (ready(o) or {}).get("reason") for o in await kube.list(resource, namespace)
    }


async def wait_reason(
    kube: Kube, resource: resources.Resource, namespace: str, name: str, reason: str, within: float = 60
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await kube.get(resource, name, namespace)
        return obj if (ready(obj) or {}).get("reason") == reason else None

    return await eventually(f"{name} to report {reason}", probe, within=within)


def owned_devices(netbox: NetboxInstance) -> dict[str, dict[str, Any]]:
    """NetBox devices that carry an owner, by owner value (a device is listed once, by definition)."""
    found = netbox.client.list_all("dcim/devices/")
    return {
        d["custom_fields"][OWNER_FIELD]: d for d in found if (d.get("custom_fields") or {}).get(OWNER_FIELD)
    }


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    conds = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
    ]
    return {**status, "conditions": conds}


def vm_body(netbox: NetboxInstance, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": MACHINES.api_version,
        "kind": "NetboxVirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "connectionSecretRef": {"name": "netbox"},
            "name": name,
            "cluster": "kvm1",
            "tenant": "acme",
            "vcpus": 2,
            "memoryMiB": 4096,
            "diskGiB": 20,
            "interfaces": [
                {
                    "name": "eth0",
                    "macAddress": "52:54:00:aa:00:01",
                    "addresses": ["10.77.0.5/24", "2001:db8::5/64"],
                },
                {"name": "eth1", "macAddress": "52:54:00:aa:00:02", "addresses": ["10.78.0.9/24"]},
            ],
            **spec,
        },
    }
