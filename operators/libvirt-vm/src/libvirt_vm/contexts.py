"""What every libvirt-vm reconcile shares, and the small steps both kinds need: Secrets and SSH targets.

A `Context` is built for each reconcile from the operator-wide memo (`Context.from_memo`): the API client,
the Event recorder and the settings the runtime put there, and the `Shared` parts this operator creates
at startup (kopf gives each object a shallow copy of memo, so anything shared must exist before the first
object is handled): the connection pool, the placement lock (one placement decision at a time, so two VMs
never both take the last room on a hypervisor) and one lock per VM (a timer and a change never reconcile
the same VM at once), and what VMQuota status needs to count without recounting on every event.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import errors, instances, reconciling, secretholds
from capfleet.api import kinds
from capfleet.api.libvirt import Hypervisor
from capfleet.kube import Kube, Obj
from capfleet.sshlibvirt import SSHTarget
from libvirt_vm.backends.connections import Pool
from libvirt_vm.placements import Placements
from libvirt_vm.placing import Demand
from libvirt_vm.rechecks import Listings
from libvirt_vm.settings import LibvirtSettings

HYPERVISORS = kinds.HYPERVISOR.resource
VMS = kinds.LIBVIRT_VM.resource
SHARED_KEY = "libvirt_shared"


@dataclass
class Shared:
    """Created once at startup in the operator-wide memo (under `SHARED_KEY`)."""

    placements: Placements
    """Every placed LibvirtVM (from the watch's index), for placement and counting: no default, since an
    empty stand-in would count no VM and overcommit every hypervisor."""
    pool: Pool = field(default_factory=Pool)
    listings: Listings = field(default_factory=Listings)
    """Each hypervisor's domains as its last re-check listed them, for the VMs' re-checks (`rechecks`)."""
    placement_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    vm_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    checked_seeds: set[str] = field(default_factory=set)  # `<hypervisor>/<volume>` read back this run
    instance: str | None = None  # this management cluster's instance name, once resolved
    # VMQuota status (`vmquotas`): namespaces whose counts changed, one refresh lock per namespace, and
    # what each placed VM (`<namespace>/<name>`) was counted with.
    quota_dirty: set[str] = field(default_factory=set)
    quota_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    counted_vms: dict[str, Demand] = field(default_factory=dict)


@dataclass
class Context(reconciling.Context):
    settings: LibvirtSettings = reconciling.in_memo(reconciling.SETTINGS_KEY)
    shared: Shared = reconciling.in_memo(SHARED_KEY)

    @property
    def pool(self) -> Pool:
        return self.shared.pool

    @property
    def placement_lock(self) -> asyncio.Lock:
        return self.shared.placement_lock

    @property
    def vm_locks(self) -> dict[str, asyncio.Lock]:
        return self.shared.vm_locks

    def vm_lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self.vm_locks.setdefault(f"{namespace}/{name}", asyncio.Lock())

    async def instance(self) -> str:
        """This management cluster's instance name (`capfleet.instances`), resolved once."""
        if self.shared.instance is None:
            self.shared.instance = await instances.resolve(self.kube, self.settings.instance)
        return self.shared.instance


async def read_secret(kube: Kube, namespace: str, name: str) -> Obj:
    secret = await secretholds.get_secret(kube, namespace, name)
    if secret is None:
        raise errors.DependencyMissing(f"Secret {namespace}/{name} not found", reason="SecretMissing")
    return secret


def value_of(secret: Mapping[str, Any], key: str) -> bytes:
    """One key of a Secret, decoded; DependencyMissing (never the value) when it is absent."""
    data = (secret.get("data") or {}).get(key)
    if data is None:
        meta = secret["metadata"]
        raise errors.DependencyMissing(
            f"Secret {meta['namespace']}/{meta['name']} has no key {key}", reason="SecretKeyMissing"
        )
    return base64.b64decode(data)


async def ssh_target(
    kube: Kube, hypervisor: Hypervisor, holder: secretholds.Holder | None = None
) -> SSHTarget:
    """How to reach the hypervisor; `holder` (a VM placed there) first holds its SSH Secrets, which its
    deletion needs to remove the domain."""
    spec = hypervisor.spec
    key_ref, hosts_ref = spec.ssh_key_secret_ref, spec.known_hosts_secret_ref
    key_secret = await read_secret(kube, key_ref.namespace, key_ref.name)
    hosts_secret = await read_secret(kube, hosts_ref.namespace, hosts_ref.name)
    if holder is not None:
        await secretholds.hold(kube, holder, [key_secret, hosts_secret])
    private_key, known_hosts = value_of(key_secret, key_ref.key), value_of(hosts_secret, hosts_ref.key)
    connection = spec.connection
    return SSHTarget(
        host=connection.host,
        port=connection.port,
        user=connection.user,
        private_key=private_key.decode(),
        known_hosts=known_hosts.decode(),
        remote_uri=f"qemu:///system?socket={connection.socket_path}",
    )
