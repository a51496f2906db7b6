"""What every baremetal-provision reconcile shares: the API client, the Event recorder, the settings, one
lock per instance, the boot attempts it opened and what their tokens are derived from; and which Events
its status writes post (none: `reporting` posts them).

A `Context` is built for each reconcile from the operator-wide memo (`Context.from_memo`): what the
runtime put there at startup, and the instance locks this operator creates at startup (kopf gives each
object a shallow copy of memo, so anything shared must exist before the first object is handled). The
lock keeps the timers and the change handlers from driving the same BMC at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from baremetal_provision import markers
from baremetal_provision.backends import bmc
from baremetal_provision.backends.base import BMC, Credentials
from baremetal_provision.settings import BaremetalSettings
from capfleet import reconciling
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstance
from capfleet.api.base import Condition

INSTANCES = kinds.BAREMETAL_INSTANCE.resource
LOCKS_KEY = "instance_locks"
ATTEMPTS_KEY = "opened_attempts"
TOKENS_KEY = "tokens"


@dataclass
class OpenedAttempts:
    """The instance of each boot attempt this process opened, by the attempt's token.

    The boot server finds an instance by its token through kopf's index, which follows the watch and can
    be seconds behind it when hundreds of servers provision at once: a deploy ramdisk quicker than that
    would be refused its key, seed and callback. The operator opens every attempt itself, so it notes the
    token here before the power-on, and the boot server reads such an instance from the API server."""

    instances: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Set when the boot server took a cleaner's callback: the deletion waiting for it goes on at once.
    _callbacks: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)

    def opened(self, token: str, namespace: str, name: str) -> None:
        self.instances[token] = (namespace, name)

    def instance_of(self, token: str) -> tuple[str, str] | None:
        return self.instances.get(token)

    def callback(self, namespace: str, name: str) -> asyncio.Event:
        """The signal the boot server sets when the instance's cleaner has called back (and its mark is
        written)."""
        return self._callbacks.setdefault((namespace, name), asyncio.Event())

    def forget(self, namespace: str, name: str) -> None:
        for token in [t for t, owner in self.instances.items() if owner == (namespace, name)]:
            del self.instances[token]
        self._callbacks.pop((namespace, name), None)


@dataclass
class Context(reconciling.Context):
    settings: BaremetalSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)
    locks: dict[str, asyncio.Lock] = reconciling.in_memo(LOCKS_KEY)
    attempts: OpenedAttempts = reconciling.in_memo(ATTEMPTS_KEY)
    tokens: markers.Tokens = reconciling.in_memo(TOKENS_KEY)

    async def announce(self, body: Mapping[str, Any], ready: Condition) -> None:
        """Posts nothing on Ready's transitions: this operator's Events are its phases and errors
        (`reporting`), and the Event recorder remembers one transition per object, so posting both would
        alternate and repeat."""

    def connect(self, address: str, credentials: Credentials, verify: bool) -> BMC:
        return bmc.connect(
            address, credentials, verify=verify, ipmi_cipher_suite=self.settings.ipmi_cipher_suite
        )

    def lock(self, meta: Mapping[str, Any]) -> asyncio.Lock:
        return self.locks.setdefault(_key(meta), asyncio.Lock())

    async def current(self, instance: BaremetalInstance) -> BaremetalInstance | None:
        """The instance as the API server has it now; None once it is gone (or another took its name)."""
        meta = instance.metadata
        found = await self.kube.get(INSTANCES, meta["name"], meta.get("namespace"))
        if found is None or found["metadata"].get("uid") != meta.get("uid"):
            return None
        return kinds.BAREMETAL_INSTANCE.parse(found)

    def forget(self, meta: Mapping[str, Any]) -> None:
        """Drop a deleted instance's lock and the attempts it had."""
        self.locks.pop(_key(meta), None)
        self.attempts.forget(str(meta.get("namespace") or ""), str(meta["name"]))


def _key(meta: Mapping[str, Any]) -> str:
    return f"{meta.get('namespace')}/{meta['name']}"
