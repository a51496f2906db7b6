"""What every glue reconcile shares: the API client, the Event recorder, the settings, the wake-ups and
the watch cache.

A `Context` is built for each reconcile from the operator-wide memo (`Context.from_memo`): the runtime
puts the API client, the Event recorder and the settings there, and the glue's startup handler the
wake-up registry and the watch cache (kopf gives each object a shallow copy of memo, so shared state must
exist before the first object is handled).
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling, resources
from capfleet.api import kinds
from capi_machine_glue.cache import WatchCache
from capi_machine_glue.settings import GlueSettings
from capi_machine_glue.wakeups import Wakeups

WAKEUPS_KEY = "glue_wakeups"
CACHE_KEY = "glue_watch_cache"

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
class Context(reconciling.Context):
    settings: GlueSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)
    wakeups: Wakeups = reconciling.in_memo(WAKEUPS_KEY)
    cache: WatchCache = reconciling.in_memo(CACHE_KEY)


# The glue creates these: until it has, each reconcile would GET one in vain (see `cache`).
CHILDREN = (CLAIMS, LIBVIRT_VMS, NETBOX_VMS, NETBOX_DEVICES, INSTANCES)
