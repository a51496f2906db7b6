"""VMQuotas: what a namespace's VMs use, and whether one more fits under every quota of the namespace.

Pure: the caller lists the quotas and the namespace's VMs, this counts and decides. A VM counts once it
is placed (`spec.hypervisorName` set), until its object is gone: a VM being deleted still holds its
domain and volumes. The check runs inside placement's lock (`vms.place`), so two VMs created at once
are decided one after the other, against counts that include the first: they cannot both pass a limit
that only one fits. Lowering a limit below what is used stops new placements and touches nothing placed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from capfleet.api.libvirt import QuotaLimits, QuotaUsage
from libvirt_vm.placing import Demand

# What each limit is called in messages, by field.
LIMIT_NAMES = {"vcpus": "vCPUs", "memory_mib": "memory MiB", "storage_gib": "disk GiB", "vms": "VMs"}


def usage(demands: Iterable[Demand]) -> QuotaUsage:
    """The sum of `demands`, one VM each."""
    total = QuotaUsage()
    for demand in demands:
        total = with_demand(total, demand)
    return total


def with_demand(used: QuotaUsage, demand: Demand) -> QuotaUsage:
    return QuotaUsage(
        vcpus=used.vcpus + demand.vcpus,
        memory_mib=used.memory_mib + demand.memory_mib,
        storage_gib=used.storage_gib + demand.storage_gib,
        vms=used.vms + 1,
    )


@dataclass(frozen=True)
class Exceeded:
    """One limit a VM would cross: which quota, which limit, and the numbers."""

    quota: str
    limit: str
    hard: int
    used: int
    asked: int

    def __str__(self) -> str:
        return (
            f"VMQuota {self.quota}: {LIMIT_NAMES[self.limit]} {self.used} used + {self.asked} asked "
            f"> {self.hard} allowed"
        )


def exceeded(quota: str, hard: QuotaLimits, used: QuotaUsage, demand: Demand) -> list[Exceeded]:
    """Every limit of `quota` that `demand` would cross, given what is `used` already."""
    after = with_demand(used, demand)
    found = []
    for limit in LIMIT_NAMES:
        allowed: int | None = getattr(hard, limit)
        if allowed is not None and getattr(after, limit) > allowed:
            before = getattr(used, limit)
            found.append(Exceeded(quota, limit, allowed, before, getattr(after, limit) - before))
    return found


def refusal(quotas: Iterable[tuple[str, QuotaLimits]], used: QuotaUsage, demand: Demand) -> str | None:
    """Why `demand` may not be placed under `quotas` (every limit it would cross), or None if it fits."""
    crossed = [
        str(e)
        for name, hard in sorted(quotas, key=lambda q: q[0])
        for e in exceeded(name, hard, used, demand)
    ]
    return "; ".join(crossed) if crossed else None
