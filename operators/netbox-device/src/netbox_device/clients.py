"""One NetBox client per connection (a Secret's URL and token), shared by every object.

A client is checked (token, NetBox version, custom fields) once when it is made, by one caller while the
others wait for it; a failed check is not cached, so fixing NetBox or the Secret is picked up at the next
retry. The object asking holds the Secret (`capfleet.secretholds`) before it gets a client, so the Secret
outlives what it claims with it. Clients are keyed by the Secret's data, not its resourceVersion: each
holder's finalizer changes the latter, and a hundred claims made at once were a hundred clients, each
checking NetBox again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import errors, netbox, secretholds
from capfleet.api.base import ConnectionSecretReference
from capfleet.kube import Kube
from netbox_device.backends.devices import Devices, PynetboxDevices
from netbox_device.backends.machines import Machines, PynetboxMachines


@dataclass
class Backends:
    devices: PynetboxDevices
    machines: PynetboxMachines
    checked: set[str]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def connection_key(secret: Mapping[str, Any]) -> tuple[str, str, str]:
    """Which client a connection Secret gets: its namespace, name and a digest of its data (URL, token,
    CA), whatever else changes on it."""
    meta = secret["metadata"]
    data = json.dumps(secret.get("data") or {}, sort_keys=True).encode()
    return (str(meta.get("namespace")), str(meta["name"]), hashlib.sha256(data).hexdigest())


class Clients:
    def __init__(self, factory: Callable[[netbox.Connection], Any] | None = None) -> None:
        self._factory = factory or netbox.open_api
        self._clients: dict[tuple[str, str, str], Backends] = {}

    async def _for(self, kube: Kube, holder: secretholds.Holder, ref: ConnectionSecretReference) -> Backends:
        namespace = str(holder.namespace)
        secret = await secretholds.get_secret(kube, namespace, ref.name)
        if secret is None:
            raise errors.DependencyMissing(
                f"Secret {namespace}/{ref.name} does not exist", reason="SecretMissing"
            )
        await secretholds.hold(kube, holder, [secret])
        key = connection_key(secret)
        if key not in self._clients:
            api = self._factory(netbox.connection_from_secret(secret))
            self._clients = {k: v for k, v in self._clients.items() if k[:2] != key[:2]}
            self._clients[key] = Backends(PynetboxDevices(api), PynetboxMachines(api), set())
        return self._clients[key]

    async def devices(
        self, kube: Kube, holder: secretholds.Holder, ref: ConnectionSecretReference
    ) -> Devices:
        backends = await self._for(kube, holder, ref)
        async with backends.lock:
            if "devices" not in backends.checked:
                await backends.devices.check()
                backends.checked.add("devices")
        return backends.devices

    async def machines(
        self, kube: Kube, holder: secretholds.Holder, ref: ConnectionSecretReference
    ) -> Machines:
        backends = await self._for(kube, holder, ref)
        async with backends.lock:
            if "machines" not in backends.checked:
                await backends.machines.check()
                backends.checked.add("machines")
        return backends.machines
