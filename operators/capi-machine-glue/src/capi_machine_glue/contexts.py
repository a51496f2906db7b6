"""What every glue reconcile shares: the API client, the Event recorder, the wake-ups, and status writes.

The `Context` is built once at startup and kept in the operator-wide memo (kopf gives each object a
shallow copy of memo, so shared state must exist before the first object is handled).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import events, resources, statuses
from capfleet.api import kinds
from capfleet.conditions import Update
from capfleet.kube import Kube
from capfleet.resources import Resource
from capi_machine_glue.wakeups import Wakeups

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


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    """How often a loop reconciles without being woken: a safety net, changes wake it at once."""
    deletion_poll_seconds: float = 2.0
    """How often deletion checks whether the children are gone."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        return cls(
            resync_seconds=float(environ.get("CAPFLEET_GLUE_RESYNC_SECONDS", "60")),
            deletion_poll_seconds=float(environ.get("CAPFLEET_GLUE_DELETION_POLL_SECONDS", "2")),
        )


SETTINGS = Settings.from_environ(os.environ)


@dataclass
class Context:
    kube: Kube
    recorder: events.Recorder
    wakeups: Wakeups


async def write_status(
    ctx: Context,
    resource: Resource,
    body: Mapping[str, Any],
    fields: Mapping[str, Any],
    updates: list[Update],
    ready_steps: list[str] | None,
) -> dict[str, Any]:
    return await statuses.write(ctx.kube, ctx.recorder, resource, body, fields, updates, ready_steps)
