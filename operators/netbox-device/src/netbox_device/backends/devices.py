"""NetBox's devices as netbox-device needs them: find, read with ETag, write (conditionally), journal.

Devices are handled as NetBox renders them (plain dicts), so the selection and status logic above this
layer are pure functions over NetBox's own JSON and are tested without a NetBox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from capfleet import errors, netbox, netboxschema
from netbox_device.backends import rest
from netbox_device.selection import OWNER_FIELD

Record = dict[str, Any]
# Free devices one listing shows: the claims of a process take them in turn (`claiming.FreeDevices`).
CANDIDATES = 100


class Devices(Protocol):
    """Every method raises `CapfleetError`s (see capfleet.netbox)."""

    etags: bool
    """Whether NetBox honours If-Match (≥ 4.6); known after `check`."""

    async def check(self) -> None:
        """Raise unless the token works and the owner and previous-state custom fields apply to devices."""

    async def owned(self, owners: Sequence[str]) -> list[Record]:
        """Devices whose owner field is exactly one of `owners` (one request however many), lowest id
        first."""

    async def candidates(self, params: Mapping[str, Any]) -> list[Record]:
        """Up to CANDIDATES of the devices matching NetBox filter `params`, lowest id first, at least their
        `id` (a claim reads each device it tries in full)."""

    async def read(self, device_id: int) -> tuple[Record | None, str | None]:
        """A device and its ETag (None before NetBox 4.6); (None, None) when it is gone."""

    async def write(
        self, device_id: int, fields: Mapping[str, Any], etag: str | None = None
    ) -> Record | None:
        """PATCH the device (with If-Match when `etag`): the device as written, or None when the ETag was
        stale (412)."""

    async def interfaces(self, device_id: int) -> list[Record]: ...

    async def tenant_id(self, slug: str) -> int: ...

    async def journal(self, device_id: int, kind: str, comments: str) -> None: ...


async def check_release(api: Any) -> tuple[int, int]:
    """NetBox's (major, minor); `BackendRejected` when capfleet does not support that release."""
    status = await netbox.call("status", api.status)
    problem = netboxschema.release_problem(status)
    if problem:
        raise errors.BackendRejected(problem, reason="NetBoxVersionUnsupported")
    return netboxschema.release(status)


class PynetboxDevices:
    """`Devices` over pynetbox, with ETags and If-Match through `rest`."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self.etags = False
        self._tenants: dict[str, int] = {}

    async def check(self) -> None:
        self.etags = await check_release(self._api) >= (4, 6)
        for wanted in (netboxschema.OWNER, netboxschema.PREVIOUS):
            found = await netbox.call(
                "check-custom-field",
                lambda n=wanted.name: [dict(f) for f in self._api.extras.custom_fields.filter(name=n)],
            )
            problem = netboxschema.field_problem(found, wanted, netboxschema.DEVICE)
            if problem:
                raise errors.BackendRejected(problem, reason="CustomFieldMissing")

    async def owned(self, owners: Sequence[str]) -> list[Record]:
        # NetBox ORs the repeated values of a text custom field's filter.
        params = {f"cf_{OWNER_FIELD}": list(owners)}
        found = await netbox.call(
            "find-devices", lambda: [dict(d) for d in self._api.dcim.devices.filter(**params)]
        )
        owned = [d for d in found if (d.get("custom_fields") or {}).get(OWNER_FIELD) in owners]
        return sorted(owned, key=lambda d: int(d["id"]))

    async def candidates(self, params: Mapping[str, Any]) -> list[Record]:
        # One page, brief: listing every free device in full for every claim made claims O(N) each in
        # NetBox's rendering (a hundred claims at once, 122 KB per listing, in make bench-fleet).
        return await netbox.call("find-devices", rest.get_page, self._api, "dcim/devices", params, CANDIDATES)

    async def read(self, device_id: int) -> tuple[Record | None, str | None]:
        return await netbox.call("get-device", rest.get_with_etag, self._api, f"dcim/devices/{device_id}")

    async def write(
        self, device_id: int, fields: Mapping[str, Any], etag: str | None = None
    ) -> Record | None:
        try:
            return await netbox.call(
                "write-device",
                rest.patch_if_match,
                self._api,
                f"dcim/devices/{device_id}",
                dict(fields),
                etag,
            )
        except rest.Stale:
            return None

    async def interfaces(self, device_id: int) -> list[Record]:
        return await netbox.call(
            "get-interfaces",
            lambda: [dict(i) for i in self._api.dcim.interfaces.filter(device_id=device_id)],
        )

    async def tenant_id(self, slug: str) -> int:
        if slug not in self._tenants:
            tenant = await netbox.call("get-tenant", self._api.tenancy.tenants.get, slug=slug)
            if tenant is None:
                raise errors.BackendRejected(f"NetBox has no tenant {slug}", reason="TenantNotFound")
            self._tenants[slug] = int(tenant.id)
        return self._tenants[slug]

    async def journal(self, device_id: int, kind: str, comments: str) -> None:
        entry = {
            "assigned_object_type": "dcim.device",
            "assigned_object_id": device_id,
            "kind": kind,
            "comments": comments,
        }
        await netbox.call("journal", self._api.extras.journal_entries.create, entry)
