"""What capfleet needs in a NetBox besides the data itself: three custom fields and a tag.

The operators check these at start-up and report `CustomFieldMissing` or `CustomFieldMisconfigured`
naming `capfleet netbox-setup`, which creates or repairs them (netboxsetup.py). Both read this module, so
what is checked and what is made cannot drift apart. Everything here is pure: records in, findings out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SETUP_COMMAND = "capfleet netbox-setup --url <NetBox URL> (token in NETBOX_TOKEN)"
# MAC addresses became objects of their own in NetBox 4.2; capfleet writes them only that way.
OLDEST_SUPPORTED = (4, 2)
DEVICE = "dcim.device"
VIRTUAL_MACHINE = "virtualization.virtualmachine"
IP_ADDRESS = "ipam.ipaddress"


@dataclass(frozen=True)
class CustomField:
    name: str
    object_types: tuple[str, ...]
    filter_logic: str  # "exact": capfleet looks objects up by it; partial matches would be wrong owners
    label: str
    description: str

    def body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "type": "text",
            "object_types": list(self.object_types),
            "filter_logic": self.filter_logic,
            "description": self.description,
        }


OWNER = CustomField(
    "capfleet_owner",
    (DEVICE, VIRTUAL_MACHINE, IP_ADDRESS),
    "exact",
    "capfleet owner",
    "The capfleet claim holding this object (<instance>/<namespace>/<name>). Set and cleared by capfleet.",
)
PREVIOUS = CustomField(
    "capfleet_previous",
    (DEVICE,),
    "loose",
    "capfleet previous state",
    "What capfleet changed on this device when it claimed it, restored on release. Set by capfleet.",
)
BMC_ADDRESS = CustomField(
    "bmc_address",
    (DEVICE,),
    "loose",
    "BMC address",
    "How capfleet reaches the server's BMC: redfish+https://host/redfish/v1/Systems/<id> or ipmi://host:port.",
)
FIELDS = (OWNER, PREVIOUS, BMC_ADDRESS)
TAG = {"name": "capfleet", "slug": "capfleet", "description": "Objects created by capfleet"}


def release(status: Mapping[str, Any]) -> tuple[int, int]:
    """(major, minor) of the NetBox whose /api/status/ answer this is; (0, 0) when it does not say."""
    text = str(status.get("netbox-version") or "0.0").split("-")[0]
    try:
        major, minor = (int(part) for part in text.split(".")[:2])
    except ValueError:
        return (0, 0)
    return (major, minor)


def release_problem(status: Mapping[str, Any]) -> str | None:
    """Why capfleet cannot work with this NetBox release, or None."""
    found = release(status)
    if found < OLDEST_SUPPORTED:
        oldest = ".".join(map(str, OLDEST_SUPPORTED))
        version = status.get("netbox-version")
        return f"NetBox {version} is older than {oldest}, the oldest release capfleet supports"
    return None


def value(raw: Any) -> Any:
    """NetBox renders choices as {"value": …, "label": …}; the value either way."""
    return raw.get("value") if isinstance(raw, Mapping) else raw


def object_types(record: Mapping[str, Any]) -> list[str]:
    return list(record.get("object_types") or record.get("content_types") or [])


def field_problem(found: Sequence[Mapping[str, Any]], wanted: CustomField, object_type: str) -> str | None:
    """What keeps capfleet from using `wanted` on `object_type`, from its `extras/custom-fields` records."""
    fix = f"run {SETUP_COMMAND}"
    if not found:
        return f"NetBox has no custom field {wanted.name}: {fix}"
    record = found[0]
    if value(record.get("type")) != "text":
        return f"NetBox custom field {wanted.name} is of type {value(record.get('type'))}, not text: {fix}"
    if object_type not in object_types(record):
        return f"NetBox custom field {wanted.name} does not apply to {object_type}: {fix}"
    logic = value(record.get("filter_logic"))
    if wanted.filter_logic == "exact" and logic != "exact":
        return f"NetBox custom field {wanted.name} must use filter logic exact, not {logic}: {fix}"
    return None


@dataclass(frozen=True)
class Change:
    """One write `netbox-setup` makes: create (`record_id` None) or update a custom field or the tag."""

    endpoint: str
    record_id: int | None
    body: dict[str, Any]
    why: str


def plan(
    fields: Sequence[Mapping[str, Any]], tags: Sequence[Mapping[str, Any]]
) -> tuple[list[Change], list[str]]:
    """The changes that make NetBox's custom fields and tags what capfleet needs, and what cannot be fixed.

    A field of another type is not changed (it may hold data of that type): it is reported instead.
    """
    by_name = {str(record.get("name")): record for record in fields}
    changes: list[Change] = []
    unfixable: list[str] = []
    for wanted in FIELDS:
        record = by_name.get(wanted.name)
        if record is None:
            changes.append(
                Change("extras/custom-fields", None, wanted.body(), f"custom field {wanted.name} is missing")
            )
            continue
        if value(record.get("type")) != "text":
            unfixable.append(
                f"custom field {wanted.name} is of type {value(record.get('type'))}: capfleet needs text;"
                " delete or rename it, then run netbox-setup again"
            )
            continue
        update: dict[str, Any] = {}
        reasons = []
        have = object_types(record)
        missing = [t for t in wanted.object_types if t not in have]
        if missing:
            update["object_types"] = sorted({*have, *missing})
            reasons.append(f"add object types {', '.join(missing)}")
        logic = value(record.get("filter_logic"))
        if logic != wanted.filter_logic and wanted.filter_logic == "exact":
            update["filter_logic"] = wanted.filter_logic
            reasons.append(f"filter logic {logic} → {wanted.filter_logic}")
        if update:
            changes.append(
                Change(
                    "extras/custom-fields",
                    int(record["id"]),
                    update,
                    f"custom field {wanted.name}: {'; '.join(reasons)}",
                )
            )
    if not any(tag.get("slug") == TAG["slug"] for tag in tags):
        changes.append(Change("extras/tags", None, dict(TAG), f"tag {TAG['slug']} is missing"))
    return changes, unfixable
