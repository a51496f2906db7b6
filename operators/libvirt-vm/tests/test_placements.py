"""The placed VMs placement counts: the watch's index, plus this process's placements it does not show yet;
and placing a VM wakes no second pass of its own."""

from __future__ import annotations

import copy
from typing import Any

import kopf

from capfleet import runtime
from libvirt_vm import handlers, placements, placing, vms

DEMAND = placing.Demand(1, 512, 1, None)


def vm_body(name: str, hypervisor: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "vcpus": 2,
        "memoryMiB": 1024,
        "disks": [
            {"name": "root", "sizeGiB": 5, "sourceImage": "base.qcow2"},
            {"name": "data", "sizeGiB": 3},
        ],
        "cloudInit": {"userDataSecretRef": {"name": "bootstrap"}},
    }
    if hypervisor:
        spec["hypervisorName"] = hypervisor
    return {
        "apiVersion": "libvirt.capfleet.dev/v1alpha1",
        "kind": "LibvirtVM",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    }


def test_a_vm_counts_once_placed_with_all_it_asks_for() -> None:
    assert placements.placed_vm(vm_body("a", None)) is None
    assert placements.placed_vm(vm_body("a", "hv1")) == placements.PlacedVM(
        "ns", "a", "hv1", placing.Demand(2, 1024, 8, None)
    )


def test_a_placement_counts_before_the_watch_shows_it_and_once_after() -> None:
    seen: dict[str, list[placements.PlacedVM]] = {"hv1": [placements.PlacedVM("ns", "a", "hv1", DEMAND)]}
    known = placements.Placements(seen)
    b = placements.PlacedVM("ns", "b", "hv2", DEMAND)
    known.placing(b)
    assert [vm.name for vm in known.all()] == ["a", "b"], "placed here, not yet watched: counted"
    seen["hv2"] = [b]
    assert [vm.name for vm in known.all()] == ["a", "b"], "watched now: counted once"
    del seen["hv2"]
    assert [vm.name for vm in known.all()] == ["a"], "the watch is what counts once it caught up"


def test_a_vm_deleted_before_the_watch_showed_it_placed_stops_counting() -> None:
    known = placements.Placements({})
    known.placing(placements.PlacedVM("ns", "b", "hv2", DEMAND))
    known.gone("ns", "b")
    assert known.all() == []


def test_what_placing_writes_on_a_vm_wakes_no_second_pass_and_a_spec_change_does() -> None:
    settings = kopf.OperatorSettings()
    runtime.configure(settings, handlers.IDENTITY, runtime.Options())
    storage = settings.persistence.diffbase_storage

    def body_of(raw: dict[str, Any]) -> kopf.Body:
        return kopf.Body(raw)  # type: ignore[arg-type]

    new = vm_body("a", None)
    patch = kopf.Patch()
    storage.store(body=body_of(new), patch=patch, essence=storage.build(body=body_of(new)))
    placed = copy.deepcopy(new)
    placed["spec"]["hypervisorName"] = "hv1"
    placed["metadata"]["annotations"] = {
        **patch["metadata"]["annotations"],
        vms.TOUCHED: "true",
        vms.OWNER_INSTANCE: "mc-1",
    }
    assert storage.fetch(body=body_of(placed)) == storage.build(body=body_of(placed))
    placed["spec"]["vcpus"] = 4
    assert storage.fetch(body=body_of(placed)) != storage.build(body=body_of(placed))
