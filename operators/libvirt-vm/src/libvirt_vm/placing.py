"""Choosing a Hypervisor for a LibvirtVM: selector, failure domain, base images, free capacity,
anti-affinity.

Pure: the caller lists Hypervisors and placed VMs, this decides. Free capacity is what a hypervisor has,
less what it keeps for itself (`spec.reserved`) and what the VMs already placed on it ask for (counted
from the VMs' specs, which is fresher than any hypervisor's status). Among the hypervisors a VM fits on,
the one with the fewest VMs of the same anti-affinity key wins, then the one with the most free memory,
then the first by name, so the same inputs always give the same answer. A VM goes only where every
base image it clones is offered (`spec.baseImages`): a hypervisor's pool holds every VM's volumes, and
what may be cloned from it is the administrator's list, never whatever the pool holds. Likewise its
interfaces go only where the hypervisor offers each bridge, network or user-mode networking to the VM's
namespace (`spec.networks`), so no tenant puts a VM on the provisioning or BMC network.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

BASE_IMAGE_NOT_OFFERED = "BaseImageNotOffered"
NETWORK_NOT_OFFERED = "NetworkNotOffered"


@dataclass(frozen=True)
class Attachment:
    """What an interface attaches to (`kind` bridge, network or userMode, and its `name`), and, as a
    hypervisor offers it, the namespaces whose VMs may (every namespace when empty)."""

    kind: str
    name: str = ""
    namespaces: frozenset[str] = frozenset()

    def describe(self) -> str:
        return self.kind if not self.name else f"{self.kind} {self.name}"


def attachment(bridge: str | None, network: str | None, user_mode: bool) -> Attachment:
    if bridge:
        return Attachment("bridge", bridge)
    if network:
        return Attachment("network", network)
    return Attachment("userMode") if user_mode else Attachment("none")


def not_attachable(offered: Iterable[Attachment], wanted: Iterable[Attachment], namespace: str) -> list[str]:
    """What of `wanted` a hypervisor offering `offered` (names may be shell patterns) does not let a VM
    of `namespace` attach to."""
    allowed = [o for o in offered if not o.namespaces or namespace in o.namespaces]

    def offered_for(w: Attachment) -> bool:
        return any(o.kind == w.kind and fnmatch.fnmatchcase(w.name, o.name or "") for o in allowed)

    return sorted({w.describe() for w in wanted if not offered_for(w)})


@dataclass(frozen=True)
class Demand:
    """What a VM asks of its hypervisor."""

    vcpus: int
    memory_mib: int
    storage_gib: int
    anti_affinity_key: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A hypervisor as placement sees it."""

    name: str
    labels: Mapping[str, str]
    failure_domain: str | None
    ready: bool
    vcpus: int
    memory_mib: int
    storage_gib: int
    base_images: tuple[str, ...] = ()
    networks: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class Request:
    demand: Demand
    match_labels: Mapping[str, str]
    failure_domain: str | None
    images: frozenset[str] = frozenset()
    attachments: frozenset[Attachment] = frozenset()
    namespace: str = ""


@dataclass(frozen=True)
class Decision:
    hypervisor: str | None
    reason: str
    message: str


def used_by(placed: Iterable[tuple[str, Demand]], hypervisor: str) -> Demand:
    """The sum of what the VMs placed on `hypervisor` ask for (no anti-affinity key)."""
    vcpus = memory = storage = 0
    for where, demand in placed:
        if where == hypervisor:
            vcpus += demand.vcpus
            memory += demand.memory_mib
            storage += demand.storage_gib
    return Demand(vcpus, memory, storage)


def free(candidate: Candidate, used: Demand) -> Demand:
    return Demand(
        candidate.vcpus - used.vcpus,
        candidate.memory_mib - used.memory_mib,
        candidate.storage_gib - used.storage_gib,
    )


def fits(available: Demand, demand: Demand) -> bool:
    return (
        demand.vcpus <= available.vcpus
        and demand.memory_mib <= available.memory_mib
        and demand.storage_gib <= available.storage_gib
    )


def offers(base_images: Iterable[str], image: str) -> bool:
    """Whether a hypervisor whose `spec.baseImages` are `base_images` lets a VM clone volume `image`. A
    name with `_` is a VM's own volume and never offered, whatever a pattern matches."""
    return "_" not in image and any(fnmatch.fnmatchcase(image, pattern) for pattern in base_images)


def not_offered(base_images: Iterable[str], images: Iterable[str]) -> list[str]:
    """The images of `images` that `base_images` does not offer, sorted."""
    patterns = tuple(base_images)
    return sorted(image for image in images if not offers(patterns, image))


def place(request: Request, candidates: Iterable[Candidate], placed: list[tuple[str, Demand]]) -> Decision:
    """The hypervisor for `request`, or why there is none (NoHypervisorMatches, BaseImageNotOffered,
    NetworkNotOffered, InsufficientCapacity)."""
    matching = [
        c
        for c in candidates
        if c.ready
        and all(c.labels.get(k) == v for k, v in request.match_labels.items())
        and (request.failure_domain is None or c.failure_domain == request.failure_domain)
    ]
    if not matching:
        message = "no ready Hypervisor matches the selector and failure domain"
        return Decision(None, "NoHypervisorMatches", message)
    offering = [c for c in matching if not not_offered(c.base_images, request.images)]
    if not offering:
        images = ", ".join(sorted(request.images))
        message = f"no matching Hypervisor offers base image(s) {images} in spec.baseImages"
        return Decision(None, BASE_IMAGE_NOT_OFFERED, message)
    attaching = [
        c for c in offering if not not_attachable(c.networks, request.attachments, request.namespace)
    ]
    if not attaching:
        wanted = ", ".join(sorted(a.describe() for a in request.attachments))
        message = f"no matching Hypervisor offers {wanted} to namespace {request.namespace} in spec.networks"
        return Decision(None, NETWORK_NOT_OFFERED, message)
    matching = attaching
    key = request.demand.anti_affinity_key
    options: list[tuple[int, int, str]] = []
    for candidate in matching:
        available = free(candidate, used_by(placed, candidate.name))
        if not fits(available, request.demand):
            continue
        peers = sum(1 for on, d in placed if key and on == candidate.name and d.anti_affinity_key == key)
        options.append((peers, -available.memory_mib, candidate.name))
    if not options:
        names = ", ".join(sorted(c.name for c in matching))
        return Decision(None, "InsufficientCapacity", f"no matching Hypervisor has room ({names})")
    chosen = min(options)[2]
    return Decision(chosen, "Placed", f"placed on Hypervisor {chosen}")
