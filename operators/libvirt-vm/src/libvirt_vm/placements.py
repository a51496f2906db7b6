"""Which LibvirtVMs are placed where, known without listing every VM for every placement.

Placing a VM counts what every VM placed before it asks of each hypervisor. Listing all LibvirtVMs from
the API server for that made each placement O(N), and placing a fleet of VMs O(N²). The watch already
brings each VM here, so a kopf index keeps what each placed VM asks for (kopf fills its indexes from its
first listing before any handler runs, so a placement never counts from a half-filled index), and
`Placements` adds what this process placed itself and its watch has not shown yet: placements are
serialised, and the next one must count the previous one even when the watch lags behind the patch that
placed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from capfleet.api import kinds
from capfleet.api.libvirt import LibvirtVM
from libvirt_vm import placing


def demand_of(vm: LibvirtVM) -> placing.Demand:
    spec = vm.spec
    return placing.Demand(
        spec.vcpus, spec.memory_mib, sum(d.size_gib for d in spec.disks), spec.anti_affinity_key
    )


@dataclass(frozen=True)
class PlacedVM:
    namespace: str
    name: str
    hypervisor: str
    demand: placing.Demand


def placed_vm(body: Mapping[str, Any]) -> PlacedVM | None:
    """The LibvirtVM as placed on its hypervisor (a deleting one included: it holds its domain yet); None
    while it is not placed."""
    vm = kinds.LIBVIRT_VM.parse(body)
    if not vm.spec.hypervisor_name:
        return None
    meta = vm.metadata
    return PlacedVM(str(meta.get("namespace", "")), str(meta["name"]), vm.spec.hypervisor_name, demand_of(vm))


def on_hypervisors(vms: Iterable[PlacedVM]) -> list[tuple[str, placing.Demand]]:
    return [(vm.hypervisor, vm.demand) for vm in vms]


class Placements:
    """Every placed LibvirtVM: those the watch shows (`seen`, kopf's index: hypervisor -> the VMs on it)
    and those this process placed that it does not show yet."""

    def __init__(self, seen: Mapping[Any, Iterable[PlacedVM]]) -> None:
        self.seen = seen
        self._ahead: dict[tuple[str, str], PlacedVM] = {}

    def placing(self, vm: PlacedVM) -> None:
        """`vm` was just placed by this process."""
        self._ahead[(vm.namespace, vm.name)] = vm

    def gone(self, namespace: str, name: str) -> None:
        """The VM is deleted: the watch will not show it placed any more."""
        self._ahead.pop((namespace, name), None)

    def all(self) -> list[PlacedVM]:
        seen = [vm for hypervisor in list(self.seen) for vm in self.seen.get(hypervisor, ())]
        for key in {(vm.namespace, vm.name) for vm in seen} & self._ahead.keys():
            del self._ahead[key]  # the watch caught up
        return seen + list(self._ahead.values())
