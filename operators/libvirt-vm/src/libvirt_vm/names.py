"""Deterministic names of everything a LibvirtVM creates in libvirt, derived from namespace and name only.

Status is a cache and UIDs change on `clusterctl move`, so the domain, its UUID and its volumes must be
found again from the object's namespace and name alone: a retry after a crash or a lost status finds what
the first attempt made instead of creating a second domain or an orphan volume. Kubernetes names never
contain `_`, so `<namespace>_<name>` is unambiguous, and `<domain>_` prefixes exactly one VM's volumes.
"""

from __future__ import annotations

import hashlib

from capfleet import cloudinit

MAX_DOMAIN_NAME = 180
"""Volume file names add a disk name and a suffix and must stay under 255 bytes."""

SEED_SUFFIX = "cidata.iso"


def domain_name(namespace: str, name: str) -> str:
    """`<namespace>_<name>`, shortened with a hash suffix when too long for volume file names."""
    full = f"{namespace}_{name}"
    if len(full) <= MAX_DOMAIN_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[: MAX_DOMAIN_NAME - 11]}-{digest}"


def domain_uuid(namespace: str, name: str) -> str:
    """A UUID fixed by namespace and name: defining the domain twice redefines the same one. It is also the
    guest's cloud-init instance-id, so a re-seeded VM stays the same instance."""
    return cloudinit.instance_id(namespace, name)


def volume_prefix(domain: str) -> str:
    """The prefix every volume of the domain starts with, and no other domain's volume does."""
    return f"{domain}_"


def disk_volume(domain: str, disk: str) -> str:
    return f"{volume_prefix(domain)}{disk}.qcow2"


def seed_volume(domain: str) -> str:
    # Disk names match [a-z0-9-]+, so "cidata.iso" never collides with a disk's "<disk>.qcow2".
    return f"{volume_prefix(domain)}{SEED_SUFFIX}"


def provider_id(hypervisor: str, domain: str) -> str:
    """The CAPI provider ID of a VM: `capfleet://vm/<hypervisor>/<domain-name>`."""
    return f"capfleet://vm/{hypervisor}/{domain}"
