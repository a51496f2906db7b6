"""NetBox clients are shared per connection: keyed by the Secret's data, so the finalizer each new holder
puts on the Secret does not make a new client; and checked once, by one caller, while claims made at the
same moment wait for that check (a hundred claims at once checked NetBox's version and custom fields a
hundred times in `make bench-fleet`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from capfleet.api.base import ConnectionSecretReference
from capfleet.api.kinds import NETBOX_DEVICE
from capfleet.kube import Kube
from capfleet.secretholds import Holder
from netbox_device.backends.devices import PynetboxDevices
from netbox_device.clients import Clients, connection_key


def secret(
    resource_version: str, token: str = "dG9rZW4=", finalizers: list[str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "netbox",
            "namespace": "ns",
            "resourceVersion": resource_version,
            "finalizers": finalizers or [],
        },
        "data": {"url": "aHR0cDovL25ldGJveA==", "token": token},
    }


def test_the_key_follows_the_connection_not_the_secrets_other_changes() -> None:
    assert connection_key(secret("1")) == connection_key(secret("2", finalizers=["a/b"]))
    assert connection_key(secret("1")) != connection_key(secret("1", token="b3RoZXI="))


class SecretsKube:
    """A Secret whose resourceVersion moves on with each finalizer a holder adds, as the API server does."""

    field_manager = "capfleet-netbox-device"

    def __init__(self) -> None:
        self.version = 1
        self.finalizers: list[str] = []

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        return secret(str(self.version), finalizers=list(self.finalizers))

    async def patch(
        self, resource: Any, name: str, body: dict[str, Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        finalizers = (body.get("metadata") or {}).get("finalizers")
        if resource.plural == "secrets" and finalizers:
            self.finalizers += [f for f in finalizers if f not in self.finalizers]
            self.version += 1
        return {}


async def test_claims_made_at_once_share_one_client_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = 0

    async def check(self: PynetboxDevices) -> None:
        nonlocal checks
        checks += 1
        await asyncio.sleep(0.05)  # NetBox answering: every other claim arrives meanwhile

    monkeypatch.setattr(PynetboxDevices, "check", check)
    made: list[object] = []

    def factory(connection: object) -> object:
        made.append(connection)
        return object()

    clients = Clients(factory=factory)
    kube = cast(Kube, SecretsKube())
    holders = [
        Holder(NETBOX_DEVICE.resource, {"name": f"m{i}", "namespace": "ns", "annotations": {}})
        for i in range(10)
    ]
    ref = ConnectionSecretReference(name="netbox")
    found = await asyncio.gather(*(clients.devices(kube, holder, ref) for holder in holders))
    assert len({id(devices) for devices in found}) == 1
    assert (len(made), checks) == (1, 1)
