"""Operator settings, and one NetBox client per connection Secret version, shared by every object.

A client is checked (token, NetBox version, custom fields) once when it is made; a failed check is not
cached, so fixing NetBox or the Secret is picked up at the next retry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import errors, netbox, resources
from capfleet.kube import Kube
from netbox_device.backends.devices import PynetboxDevices
from netbox_device.backends.machines import PynetboxMachines

INSTANCE_ENV = "CAPFLEET_INSTANCE_NAME"
POLL_ENV = "CAPFLEET_NETBOX_POLL_SECONDS"
SETTLE_ENV = "CAPFLEET_NETBOX_SETTLE_SECONDS"


@dataclass(frozen=True)
class Settings:
    """`instance` names this management cluster in owner values; `poll_seconds` is how often a claim
    waiting for a free device looks again; `settle_seconds` is the read-back delay of pre-4.6 claims."""

    instance: str = "capfleet"
    poll_seconds: float = 60.0
    settle_seconds: float = 1.0

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> Settings:
        defaults = Settings()
        return Settings(
            instance=environ.get(INSTANCE_ENV) or defaults.instance,
            poll_seconds=float(environ.get(POLL_ENV) or defaults.poll_seconds),
            settle_seconds=float(environ.get(SETTLE_ENV) or defaults.settle_seconds),
        )


@dataclass
class Backends:
    devices: PynetboxDevices
    machines: PynetboxMachines
    checked: set[str]


class Clients:
    def __init__(self, factory: Callable[[netbox.Connection], Any] | None = None) -> None:
        self._factory = factory or netbox.open_api
        self._clients: dict[tuple[str, str, str], Backends] = {}

    async def _for(self, kube: Kube, body: Mapping[str, Any]) -> Backends:
        namespace = str(body["metadata"]["namespace"])
        name = str(((body.get("spec") or {}).get("connectionSecretRef") or {}).get("name", ""))
        secret = await kube.get(resources.SECRETS, name, namespace)
        if secret is None:
            raise errors.DependencyMissing(
                f"Secret {namespace}/{name} does not exist", reason="SecretMissing"
            )
        key = (namespace, name, str(secret["metadata"].get("resourceVersion")))
        if key not in self._clients:
            api = self._factory(netbox.connection_from_secret(secret))
            self._clients = {k: v for k, v in self._clients.items() if k[:2] != key[:2]}
            self._clients[key] = Backends(PynetboxDevices(api), PynetboxMachines(api), set())
        return self._clients[key]

    async def devices(self, kube: Kube, body: Mapping[str, Any]) -> PynetboxDevices:
        backends = await self._for(kube, body)
        if "devices" not in backends.checked:
            await backends.devices.check()
            backends.checked.add("devices")
        return backends.devices

    async def machines(self, kube: Kube, body: Mapping[str, Any]) -> PynetboxMachines:
        backends = await self._for(kube, body)
        if "machines" not in backends.checked:
            await backends.machines.check()
            backends.checked.add("machines")
        return backends.machines
