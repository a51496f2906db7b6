"""What every netbox-device reconcile shares: the kit's Context plus settings, NetBox clients and claims.

The shared parts are created once at startup in the operator-wide memo (kopf gives each object a shallow
copy of memo, so anything shared must exist before the first object is handled): one NetBox client per
connection Secret, and the devices this process is trying to claim right now.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import conditions, errors, instances, pausing, reconciling, secretholds
from capfleet.api import kinds
from capfleet.api.netbox import NetboxDevice, NetboxVirtualMachine
from capfleet.conditions import Update
from capfleet.controller import contexts as controller
from capfleet.resources import Resource
from netbox_device import selection
from netbox_device.backends.devices import Devices
from netbox_device.backends.machines import Machines
from netbox_device.claiming import FreeDevices
from netbox_device.clients import Clients
from netbox_device.settings import NetboxSettings

SHARED_KEY = "netbox_device"
DETACHED = "netbox.capfleet.dev/detached"
"""Set by a person, as Metal3's `detached`: deletion leaves NetBox alone (the way out for a NetBox gone for
good, or a connection Secret that will never come back); what the object held there stays as it is."""


@dataclass
class Shared:
    """Created once at startup in the operator-wide memo."""

    clients: Clients = field(default_factory=Clients)
    free: FreeDevices = field(default_factory=FreeDevices)
    """The devices this process's claims are trying, and those listed free for them."""
    instance: str | None = None
    """This management cluster's instance name, once known (configured, or derived from kube-system)."""


@dataclass
class Context(controller.Context):
    settings: NetboxSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)
    shared: Shared = reconciling.in_memo(SHARED_KEY)

    def owner(self, obj: NetboxDevice | NetboxVirtualMachine) -> str:
        """The owner value that marks what `obj` holds in NetBox: under the instance name recorded on it,
        or, for an object that claimed before names were recorded, the one it claimed under."""
        configured = "" if instances.is_derived(self.settings.instance) else self.settings.instance
        instance = selection.recorded_instance(obj.metadata) or configured or selection.LEGACY_INSTANCE
        return selection.owner_of(instance, obj.metadata)

    async def possible_owners(self, obj: NetboxDevice | NetboxVirtualMachine) -> list[str]:
        """The owner values `obj` may hold something under: the one recorded on it, else (nothing claimed
        with it yet, or claimed before names were recorded) the one it would have claimed under then and
        this management cluster's, so one lookup in NetBox answers `settled_owner` and the claim after it."""
        owners = [self.owner(obj)]
        if not selection.recorded_instance(obj.metadata):
            owners.append(selection.owner_of(await self.instance(), obj.metadata))
        return list(dict.fromkeys(owners))

    async def settled_owner(
        self,
        resource: Resource,
        obj: NetboxDevice | NetboxVirtualMachine,
        holds: Callable[[str], Awaitable[object | None]],
    ) -> str:
        """The owner value `obj` claims under, recorded on it before anything is claimed with it: the one it
        already holds something under (`holds`), else this management cluster's instance name."""
        if selection.recorded_instance(obj.metadata):
            return self.owner(obj)
        earlier = self.owner(obj)
        if await holds(earlier) is not None:
            instance = earlier.split("/", 1)[0]
        else:
            instance = await self.instance()
        meta = obj.metadata
        patch = {"metadata": {"annotations": {selection.OWNER_INSTANCE: instance}}}
        await self.kube.patch(resource, meta["name"], patch, meta["namespace"])
        return selection.owner_of(instance, meta)

    async def instance(self) -> str:
        """This management cluster's instance name (`capfleet.instances`), resolved once."""
        if self.shared.instance is None:
            self.shared.instance = await instances.resolve(self.kube, self.settings.instance)
        return self.shared.instance

    async def devices(self, claim: NetboxDevice) -> Devices:
        ref = claim.spec.connection_secret_ref
        return await self.shared.clients.devices(self.kube, holder_of(claim), ref)

    async def machines(self, vm: NetboxVirtualMachine) -> Machines:
        ref = vm.spec.connection_secret_ref
        return await self.shared.clients.machines(self.kube, holder_of(vm), ref)

    async def release(
        self,
        body: Mapping[str, Any],
        obj: NetboxDevice | NetboxVirtualMachine,
        what: str,
        give_back: Callable[[], Awaitable[None]],
    ) -> None:
        """A deletion: give back what `obj` holds in NetBox (`what` names it), unless the object is being
        moved, is detached, or never reached NetBox, then let go of its connection Secret (a run after
        that only lets go again); a paused object waits. A give-back that fails says why on Ready (with
        its Event) while the deletion waits: a claim stuck Terminating names what it waits for."""

        async def unless_moving() -> None:
            if pausing.moving(obj.metadata) or DETACHED in (obj.metadata.get("annotations") or {}):
                return
            if pausing.annotated(obj.metadata):
                raise errors.Waiting(f"paused: {what} once the object is unpaused", reason="Paused")
            if not await secretholds.ever_held(self.kube, holder_of(obj)):
                return  # never reached NetBox: nothing there to give back
            try:
                await give_back()
            except errors.CapfleetError as exc:
                recorder = reconciling.Recorder(self, holder_of(obj).resource, body, None)
                recorder.note(Update.false(conditions.READY, exc.reason, exc.message))
                await recorder.finish()
                raise

        await secretholds.release(self.kube, holder_of(obj), unless_moving)


def holder_of(obj: NetboxDevice | NetboxVirtualMachine) -> secretholds.Holder:
    kind = kinds.NETBOX_DEVICE if isinstance(obj, NetboxDevice) else kinds.NETBOX_VIRTUAL_MACHINE
    return secretholds.Holder(kind.resource, obj.metadata)


async def record(recorder: reconciling.Recorder, fields: Mapping[str, Any], ready: Update) -> None:
    """Write what a reconcile found: its status fields and the Ready that names it. Ready's message names
    what NetBox holds, known only once the work is done, so it replaces the one `Recorder.step` noted."""
    recorder.fields = dict(fields)
    recorder.note(ready)
    await recorder.finish()


async def serve(
    ctx: Context,
    resource: Resource,
    body: Mapping[str, Any],
    work: Callable[[], Awaitable[tuple[dict[str, Any], Update]]],
    reason: str,
) -> None:
    """One reconcile of a claim or a VM record: left alone when paused or moving, else `work` recorded
    on Ready (its failure with the error's reason, its success with the Ready it returns)."""
    recorder = reconciling.Recorder(ctx, resource, body, None)
    if pausing.hands_off(body["metadata"]):
        await recorder.paused()
        return
    fields, ready = await recorder.step(conditions.READY, work(), reason)
    await record(recorder, fields, ready)
