"""NetBox's devices as netbox-device needs them: find, read with ETag, write (conditionally), journal.

Devices are handled as NetBox renders them (plain dicts), so the selection and status logic above this
layer are pure functions over NetBox's own JSON and are tested without a NetBox. The claims of one process
share NetBox's requests (`capfleet.batching`): the look-ups of what owners hold, the reads of devices
(before NetBox 4.6, whose If-Match needs each device's own ETag), their interfaces and the journal
entries asked while one such request is in flight go together in the next. Writes stay one per device:
each is a claim of its own, won or lost alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlencode

from capfleet import errors, netbox, netboxschema
from capfleet.batching import Batch
from netbox_device.backends import rest
from netbox_device.selection import OWNER_FIELD

Record = dict[str, Any]
# Free devices one listing shows: the claims of a process take them in turn (`claiming.FreeDevices`).
CANDIDATES = 100
# What one batched request may carry: its query string well inside the request-line limits of NetBox's
# usual front ends (4 KiB in gunicorn, 8 KiB in nginx), its answer within one page.
QUERY_BYTES = 3072
DEVICES_PER_REQUEST = 100
PAGE = 1000


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
        self._owned = Batch(self._owned_by_each, QUERY_BYTES, query_bytes)
        self._reads = Batch(self._read_each, DEVICES_PER_REQUEST)
        self._interfaces = Batch(self._interfaces_of_each, DEVICES_PER_REQUEST)
        self._journal = Batch(self._journal_each, DEVICES_PER_REQUEST)

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
        return await self._owned.get(tuple(owners))

    async def _owned_by_each(self, asked: list[tuple[str, ...]]) -> list[list[Record]]:
        # NetBox ORs the repeated values of a text custom field's filter.
        owners = list(dict.fromkeys(owner for each in asked for owner in each))
        params = {f"cf_{OWNER_FIELD}": owners, "limit": PAGE}
        found = await netbox.call(
            "find-devices", lambda: [dict(d) for d in self._api.dcim.devices.filter(**params)]
        )
        found.sort(key=lambda d: int(d["id"]))
        owner_of = {int(d["id"]): (d.get("custom_fields") or {}).get(OWNER_FIELD) for d in found}
        return [[d for d in found if owner_of[int(d["id"])] in each] for each in asked]

    async def candidates(self, params: Mapping[str, Any]) -> list[Record]:
        # One page, brief: listing every free device in full for every claim made each claim O(N) in
        # NetBox's rendering.
        return await netbox.call("find-devices", rest.get_page, self._api, "dcim/devices", params, CANDIDATES)

    async def read(self, device_id: int) -> tuple[Record | None, str | None]:
        if self.etags:
            return await netbox.call("get-device", rest.get_with_etag, self._api, f"dcim/devices/{device_id}")
        return await self._reads.get(device_id), None

    async def _read_each(self, ids: list[int]) -> list[Record | None]:
        params = {"id": sorted(set(ids))}
        found = await netbox.call(
            "get-devices", rest.get_page, self._api, "dcim/devices", params, PAGE, brief=False
        )
        by_id = {int(device["id"]): device for device in found}
        return [by_id.get(device_id) for device_id in ids]

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
        return await self._interfaces.get(device_id)

    async def _interfaces_of_each(self, ids: list[int]) -> list[list[Record]]:
        params = {"device_id": sorted(set(ids)), "limit": PAGE}
        found = await netbox.call(
            "get-interfaces", lambda: [dict(i) for i in self._api.dcim.interfaces.filter(**params)]
        )
        of_device: dict[int, list[Record]] = {}
        for interface in found:
            of_device.setdefault(int(interface["device"]["id"]), []).append(interface)
        return [list(of_device.get(device_id, [])) for device_id in ids]

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
        await self._journal.get(entry)

    async def _journal_each(self, entries: list[dict[str, Any]]) -> list[None]:
        await netbox.call("journal", self._api.extras.journal_entries.create, entries)
        return [None for _ in entries]


def query_bytes(owners: Sequence[str]) -> int:
    """What `owners` add to a query string."""
    return len(urlencode({f"cf_{OWNER_FIELD}": owners}, doseq=True)) + len(owners)
