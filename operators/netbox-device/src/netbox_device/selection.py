"""Which devices a NetboxDevice may claim, and the marks a claim leaves on a device: pure functions.

A claim is identified by its owner value `<instance>/<namespace>/<name>`, written into the device's
exact-match owner custom field; the instance names the management cluster, so two management clusters
(or two replicas) never take each other's claims for their own. What a device looked like before the
claim (status, tenant, description) is written into a second custom field in the same write, so release
can restore it even after the NetboxDevice's status or the whole management cluster is gone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import netboxschema
from capfleet.api.netbox import DeviceClaim, DeviceSelector

OWNER_FIELD = netboxschema.OWNER.name
PREVIOUS_FIELD = netboxschema.PREVIOUS.name
BMC_FIELD = "bmc_address"
DEFAULT_FREE_STATUS = "inventory"


# The instance name an object claims under is recorded on it (before the claim), so it survives restarts,
# status loss and clusterctl move to a cluster with another name. Objects that claimed before it was
# recorded used the configured name, or this one, the old default.
OWNER_INSTANCE = "netbox.capfleet.dev/owner-instance"
LEGACY_INSTANCE = "capfleet"


def owner_of(instance: str, meta: Mapping[str, Any]) -> str:
    """The owner value of an object: stable across restarts, status loss and clusterctl move."""
    return f"{instance}/{meta['namespace']}/{meta['name']}"


def recorded_instance(meta: Mapping[str, Any]) -> str | None:
    return (meta.get("annotations") or {}).get(OWNER_INSTANCE) or None


def exact_criteria(selector: DeviceSelector) -> list[tuple[str, str]]:
    """The selector's exact-match criteria that are set, in the order people read them."""
    values = {"site": selector.site, "role": selector.role, "name": selector.name, "serial": selector.serial}
    return [(key, value) for key, value in values.items() if value]


def device_filters(selector: DeviceSelector) -> dict[str, Any]:
    """NetBox query parameters for free devices matching `selector`."""
    params: dict[str, Any] = {
        "status": selector.status or DEFAULT_FREE_STATUS,
        f"cf_{OWNER_FIELD}__empty": "true",
    }
    params.update(exact_criteria(selector))
    if selector.tags:
        params["tag"] = list(selector.tags)
    for name, value in sorted(selector.custom_fields.items()):
        params[f"cf_{name}"] = value
    return params


def describe(selector: DeviceSelector) -> str:
    """The selector as a person reads it: `status=inventory, site=dc1, tags=[gpu]`."""
    parts = [f"status={selector.status or DEFAULT_FREE_STATUS}"]
    parts.extend(f"{key}={value}" for key, value in exact_criteria(selector))
    if selector.tags:
        parts.append(f"tags=[{', '.join(selector.tags)}]")
    parts.extend(f"cf_{name}={value}" for name, value in sorted(selector.custom_fields.items()))
    return ", ".join(parts)


def matches(device: Mapping[str, Any], selector: DeviceSelector) -> bool:
    """Whether a device (as NetBox renders it) is free and matches the selector: re-checked before a claim."""
    custom = device.get("custom_fields") or {}
    if custom.get(OWNER_FIELD):
        return False
    if value_of(device.get("status")) != (selector.status or DEFAULT_FREE_STATUS):
        return False
    slugs = {"site": selector.site, "role": selector.role}
    if any(wanted and slug_of(device.get(key)) != wanted for key, wanted in slugs.items()):
        return False
    if selector.name and device.get("name") != selector.name:
        return False
    if selector.serial and str(device.get("serial") or "").lower() != selector.serial.lower():
        return False
    tags = {slug_of(t) for t in device.get("tags") or []}
    if not set(selector.tags) <= tags:
        return False
    return all(str(custom.get(k)) == v for k, v in selector.custom_fields.items())


@dataclass(frozen=True)
class Previous:
    """What a device looked like before it was claimed."""

    status: str
    tenant: int | None
    description: str

    def encode(self) -> str:
        return json.dumps({"status": self.status, "tenant": self.tenant, "description": self.description})

    @staticmethod
    def decode(text: str | None) -> Previous | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return Previous(str(data["status"]), data.get("tenant"), str(data.get("description") or ""))
        except (ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def of(device: Mapping[str, Any]) -> Previous:
        tenant = device.get("tenant")
        return Previous(
            status=str(value_of(device.get("status"))),
            tenant=int(tenant["id"]) if isinstance(tenant, Mapping) else None,
            description=str(device.get("description") or ""),
        )


def value_of(field: Any) -> Any:
    """NetBox renders choices as `{"value", "label"}`; plain values pass through."""
    return field.get("value") if isinstance(field, Mapping) else field


def slug_of(field: Any) -> Any:
    return field.get("slug") if isinstance(field, Mapping) else field


def claim_fields(
    device: Mapping[str, Any], owner: str, claim: DeviceClaim, tenant_id: int | None
) -> dict[str, Any]:
    """The one write that claims a device: owner, what it was before, and the claim's status and tenant.

    Every field a claim touches is written, so when two racing writes land on one device the later one
    replaces the earlier one completely and no mix of two claims is left behind.
    """
    previous = Previous.of(device)
    return {
        "status": claim.status or "active",
        "tenant": tenant_id if tenant_id is not None else previous.tenant,
        "description": claim.description or previous.description,
        "custom_fields": {OWNER_FIELD: owner, PREVIOUS_FIELD: previous.encode()},
    }


def release_fields(device: Mapping[str, Any]) -> dict[str, Any]:
    """The write that gives a device back as it was; without a remembered state, only the marks go."""
    previous = Previous.decode((device.get("custom_fields") or {}).get(PREVIOUS_FIELD))
    fields: dict[str, Any] = {"custom_fields": {OWNER_FIELD: None, PREVIOUS_FIELD: None}}
    if previous is not None:
        fields.update(status=previous.status, tenant=previous.tenant, description=previous.description)
    return fields
