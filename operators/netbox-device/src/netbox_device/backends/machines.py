"""NetBox objects a NetboxVirtualMachine writes: VMs, their interfaces, MAC objects and IP addresses.

A thin typed CRUD layer over pynetbox endpoints named "app/endpoint" (e.g. "virtualization/interfaces"),
so the registration logic reads as NetBox's REST API and a fake can stand in for it in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from capfleet import errors, netbox
from capfleet.netboxschema import IP_ADDRESS, OWNER, VIRTUAL_MACHINE, field_problem
from netbox_device.backends import rest
from netbox_device.backends.devices import check_release

Record = dict[str, Any]


class Machines(Protocol):
    """Every method raises `CapfleetError`s (see capfleet.netbox)."""

    async def check(self) -> None:
        """Raise unless the token works and the owner custom field applies to VMs."""

    async def list(self, endpoint: str, **params: Any) -> list[Record]: ...

    async def create(self, endpoint: str, fields: Mapping[str, Any]) -> Record: ...

    async def update(self, endpoint: str, pk: int, fields: Mapping[str, Any]) -> None: ...

    async def delete(self, endpoint: str, pk: int) -> None:
        """Delete; an object that is already gone is fine."""

    async def lookup(self, endpoint: str, **query: Any) -> int:
        """The id of the one object matching `query`; raises BackendRejected when there is none."""


class PynetboxMachines:
    """`Machines` over pynetbox."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self._ids: dict[tuple[str, str], int] = {}

    def _endpoint(self, endpoint: str) -> Any:
        app, name = endpoint.split("/")
        return getattr(getattr(self._api, app), name.replace("-", "_"))

    async def check(self) -> None:
        await check_release(self._api)
        found = await netbox.call(
            "check-custom-field",
            lambda: [dict(f) for f in self._api.extras.custom_fields.filter(name=OWNER.name)],
        )
        # The owner field marks the VM and the IPs created for it.
        problem = field_problem(found, OWNER, VIRTUAL_MACHINE) or field_problem(found, OWNER, IP_ADDRESS)
        if problem:
            raise errors.BackendRejected(problem, reason="CustomFieldMissing")

    async def list(self, endpoint: str, **params: Any) -> list[Record]:
        return await netbox.call(
            f"list-{endpoint}", lambda: [dict(r) for r in self._endpoint(endpoint).filter(**params)]
        )

    async def create(self, endpoint: str, fields: Mapping[str, Any]) -> Record:
        created = await netbox.call(f"create-{endpoint}", self._endpoint(endpoint).create, dict(fields))
        return dict(created)

    async def update(self, endpoint: str, pk: int, fields: Mapping[str, Any]) -> None:
        await netbox.call(f"update-{endpoint}", self._endpoint(endpoint).update, [{"id": pk, **fields}])

    async def delete(self, endpoint: str, pk: int) -> None:
        await netbox.call(f"delete-{endpoint}", rest.delete, self._api, f"{endpoint}/{pk}")

    async def lookup(self, endpoint: str, **query: Any) -> int:
        key = (endpoint, repr(sorted(query.items())))
        if key not in self._ids:
            found = await self.list(endpoint, **query)
            if len(found) != 1:
                what = ", ".join(f"{k}={v}" for k, v in query.items())
                raise errors.BackendRejected(
                    f"NetBox has {len(found) or 'no'} {endpoint} matching {what}", reason="NotFoundInNetBox"
                )
            self._ids[key] = int(found[0]["id"])
        return self._ids[key]
