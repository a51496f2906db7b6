"""What every libvirt-vm reconcile shares, and the small steps both kinds need: Secrets, SSH targets, status.

The `Context` is built once at startup and kept in the operator-wide memo (kopf gives each object a
shallow copy of memo, so anything shared must exist before the first object is handled): the API client,
the Event recorder, the connection pool, the placement lock (one placement decision at a time, so two VMs
never both take the last room on a hypervisor) and one lock per VM (a timer and a change never reconcile
the same VM at once).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capfleet import errors, events, resources, statuses
from capfleet.api import kinds
from capfleet.api.libvirt import Hypervisor
from capfleet.conditions import Update
from capfleet.kube import Kube
from capfleet.sshlibvirt import SSHTarget
from libvirt_vm.backends.connections import Pool

HYPERVISORS = kinds.HYPERVISOR.resource
VMS = kinds.LIBVIRT_VM.resource


@dataclass(frozen=True)
class Settings:
    """How often hypervisors and VMs are re-checked (a safety net; changes are handled at once)."""

    hypervisor_poll_seconds: float = 60.0
    vm_poll_seconds: float = 60.0
    vcpu_overcommit: float = 1.0
    """How many vCPUs placement may give out per host CPU (1.0: none)."""
    storage_overcommit: float = 1.0
    """How many GiB of disk placement may give out per GiB of pool (copy-on-write disks are thin)."""
    domain_type: str = "auto"
    """libvirt domain type: "kvm", "qemu" (TCG), or "auto" (kvm when the host offers it)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        return cls(
            hypervisor_poll_seconds=float(environ.get("CAPFLEET_HYPERVISOR_POLL_SECONDS", "60")),
            vm_poll_seconds=float(environ.get("CAPFLEET_VM_POLL_SECONDS", "60")),
            vcpu_overcommit=float(environ.get("CAPFLEET_VCPU_OVERCOMMIT", "1")),
            storage_overcommit=float(environ.get("CAPFLEET_STORAGE_OVERCOMMIT", "1")),
            domain_type=environ.get("CAPFLEET_LIBVIRT_DOMAIN_TYPE", "auto"),
        )


SETTINGS = Settings.from_environ(os.environ)


@dataclass
class Shared:
    """Created once at startup in the operator-wide memo."""

    pool: Pool = field(default_factory=Pool)
    placement_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    vm_locks: dict[str, asyncio.Lock] = field(default_factory=dict)


@dataclass
class Context:
    kube: Kube
    recorder: events.Recorder
    shared: Shared

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


async def secret_value(kube: Kube, namespace: str, name: str, key: str) -> bytes:
    """One key of a Secret, decoded; DependencyMissing (never the value) when it is absent."""
    secret = await kube.get(resources.SECRETS, name, namespace)
    if secret is None:
        raise errors.DependencyMissing(f"Secret {namespace}/{name} not found", reason="SecretMissing")
    data = (secret.get("data") or {}).get(key)
    if data is None:
        raise errors.DependencyMissing(
            f"Secret {namespace}/{name} has no key {key}", reason="SecretKeyMissing"
        )
    return base64.b64decode(data)


async def ssh_target(kube: Kube, hypervisor: Hypervisor) -> SSHTarget:
    spec = hypervisor.spec
    key_ref, hosts_ref = spec.ssh_key_secret_ref, spec.known_hosts_secret_ref
    private_key = await secret_value(kube, key_ref.namespace, key_ref.name, key_ref.key)
    known_hosts = await secret_value(kube, hosts_ref.namespace, hosts_ref.name, hosts_ref.key)
    connection = spec.connection
    return SSHTarget(
        host=connection.host,
        port=connection.port,
        user=connection.user,
        private_key=private_key.decode(),
        known_hosts=known_hosts.decode(),
        remote_uri=f"qemu:///system?socket={connection.socket_path}",
    )


async def write_status(
    ctx: Context,
    body: Mapping[str, Any],
    fields: Mapping[str, Any],
    updates: list[Update],
    ready_steps: list[str],
) -> dict[str, Any]:
    """Write the status keys that change, with a summarised Ready; an Event when Ready changes."""
    resource = VMS if body["metadata"].get("namespace") else HYPERVISORS
    return await statuses.write(ctx.kube, ctx.recorder, resource, body, fields, updates, ready_steps)
