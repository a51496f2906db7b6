"""Why a VM's one-minute re-check costs nothing while its domain is as its status says.

The re-check is a safety net: it notices a domain stopped, crashed or undefined behind the operator's back,
and a status someone wiped, and converges again. Run in full it is a Hypervisor read, two Secret reads and
a round of libvirt calls over SSH per VM per minute, which on a hypervisor with many VMs keeps the API
server, libvirtd, sshd and the operator busy.

The Hypervisor's own re-check already connects once a minute; it now also lists every domain's UUID and
state in one call (`hosts.domain_states`) and keeps the listing here. A VM's re-check compares its status
with that listing and converges in full only when they disagree, when the VM is not Ready on its current
generation, or when no listing younger than the VM's poll interval is at hand (a hypervisor that cannot be
reached, or a Hypervisor re-checked less often than its VMs). A listing that agrees with the status says
the domain was as the status says when it was taken; a change after it is seen at the next re-check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from capfleet import conditions
from capfleet.api.libvirt import LibvirtVM

DomainStates = Mapping[str, tuple[str, str]]
"""Domain name to (UUID, state) as `hosts.domain_states` lists them."""


@dataclass(frozen=True)
class Listing:
    """One hypervisor's domains, and when they were listed (monotonic clock)."""

    domains: DomainStates
    taken: float


@dataclass
class Listings:
    """The latest listing of each hypervisor's domains, kept by its re-check."""

    by_hypervisor: dict[str, Listing] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    def store(self, hypervisor: str, domains: DomainStates) -> None:
        self.by_hypervisor[hypervisor] = Listing(domains, self.clock())

    def forget(self, hypervisor: str) -> None:
        self.by_hypervisor.pop(hypervisor, None)

    def fresh(self, hypervisor: str, max_age: float) -> Listing | None:
        """The hypervisor's listing when it is at most `max_age` seconds old."""
        found = self.by_hypervisor.get(hypervisor)
        if found is None or self.clock() - found.taken > max_age:
            return None
        return found


def as_listed(vm: LibvirtVM, generation: int | None, listing: Listing | None) -> bool:
    """Whether the VM is Ready on its current generation, its domain is listed with the UUID and state its
    status gives, and that state is the one its spec asks for."""
    status = vm.status
    if listing is None or status is None or not status.domain_name:
        return False
    ready = conditions.find(status.conditions, conditions.READY)
    if ready is None or ready.status != "True" or ready.observed_generation != generation:
        return False
    listed = listing.domains.get(status.domain_name)
    if listed is None:
        return False
    uuid, state = listed
    wanted = "running" if vm.spec.power_state == "On" else "shutoff"
    return uuid == status.domain_uuid and state == status.state == wanted
