"""What every glue reconcile shares: the API client, the Event recorder, the settings, the watch cache,
and how this reconcile reads (from the cache, or from the API server when a timer brought it).

A `Context` is built for each reconcile from the operator-wide memo (`Context.from_memo`): the runtime
puts the API client, the Event recorder and the settings there, and the engine's startup the watch cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import conditions, errors, reconciling, resources
from capfleet.api import kinds
from capfleet.api.base import Condition
from capfleet.controller import contexts as controller
from capi_machine_glue.settings import GlueSettings

HYBRID_MACHINES = kinds.HYBRID_MACHINE.resource
HYBRID_CLUSTERS = kinds.HYBRID_CLUSTER.resource
CLUSTERS = resources.CAPI_CLUSTERS
MACHINES = resources.CAPI_MACHINES
CLAIMS = resources.IP_ADDRESS_CLAIMS
ADDRESSES = resources.IP_ADDRESSES
LIBVIRT_VMS = kinds.LIBVIRT_VM.resource
NETBOX_VMS = kinds.NETBOX_VIRTUAL_MACHINE.resource
NETBOX_DEVICES = kinds.NETBOX_DEVICE.resource
INSTANCES = kinds.BAREMETAL_INSTANCE.resource


@dataclass
class Context(controller.Context):
    settings: GlueSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)

    async def announce(self, body: Mapping[str, Any], ready: Condition) -> None:
        """A Normal Event when the object becomes Ready, and none while it is not: a machine's Ready is
        False at every step a child takes (a server powering off, network booting, installing), and the
        children post their own Events for their steps and failures, which the step conditions quote. The
        glue's own refusals are Warnings (`refused`)."""
        if ready.status == "True":
            await self.recorder.transition(body, "Normal", ready.reason, ready.message)
        else:
            self.recorder.forget(body, "Normal", conditions.READY)  # Ready again later is news again

    async def refused(self, body: Mapping[str, Any], error: errors.CapfleetError) -> None:
        """A Warning with the error's reason when the glue itself cannot go on (a child spec that would be
        invalid, a child's name taken by another object); waiting is not worth one."""
        if not isinstance(error, errors.Waiting):
            await self.recorder.transition(body, "Warning", error.reason, error.message)


# The glue creates these: until it has, each reconcile would GET one in vain (see `cache`).
CHILDREN = (CLAIMS, LIBVIRT_VMS, NETBOX_VMS, NETBOX_DEVICES, INSTANCES)
