"""VMQuotas on real hypervisors: VMs created at once against a quota that fits all but one (exactly one
waits, with QuotaExceeded naming the limit and the numbers, and an Event); the quota's status counts the
placed VMs and is rebuilt when wiped; lowering the limit touches no placed VM; the waiting VM is placed
soon after another one goes. The operator runs as its own ServiceAccount with its base's RBAC, which
only reads VMQuotas and writes their status: the audit log must show no refusal."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from libvirt_vm_helpers import (
    HYPERVISORS,
    NO_CALLBACK,
    OPERATOR_ENV,
    VMS,
    condition,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    wait_condition,
)

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
QUOTAS = kinds.VM_QUOTA.resource
VM_MIB = 192  # what libvirt_vm_helpers.vm_body asks for
VMS_AT_ONCE = 4


def quota_body(name: str, **hard: int) -> dict[str, Any]:
    return {
        "apiVersion": QUOTAS.api_version,
        "kind": "VMQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard},
    }


async def scheduled(kube: Kube, namespace: str, names: list[str]) -> dict[str, dict[str, Any]] | None:
    """Each VM's Scheduled condition, once every VM has one that is final: placed, or over quota."""
    found = {}
    for name in names:
        cond = condition(await kube.get(VMS, name, namespace), "Scheduled")
        if cond is None or (cond["status"] != "True" and cond.get("reason") != "QuotaExceeded"):
            return None
        found[name] = cond
    return found


async def quota_status(kube: Kube, namespace: str, name: str, wanted: dict[str, Any]) -> dict[str, Any]:
    async def counted() -> dict[str, Any] | None:
        status = ((await kube.get(QUOTAS, name, namespace)) or {}).get("status") or {}
        return status if all(status.get(k) == v for k, v in wanted.items()) else None

    return await eventually(f"VMQuota {name}'s status to be {wanted}", counted, 60)


async def test_vms_created_at_once_against_a_quota_that_fits_all_but_one(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
) -> None:
    for hv in hypervisors:
        ensure_base_image(hv, test_image)
    run_operator_as("libvirt_vm", "libvirt-vm", secrets_in=[namespace], env=OPERATOR_ENV)
    hv_names = [await create_hypervisor(kube, namespace, hv) for hv in hypervisors]
    fits = VMS_AT_ONCE - 1
    try:
        for hv_name in hv_names:
            await wait_condition(kube, HYPERVISORS, hv_name, None, "Reachable", "True", 30)
        await kube.create(QUOTAS, quota_body("team", memoryMiB=fits * VM_MIB, vms=10), namespace)
        names = [f"vm{i}" for i in range(VMS_AT_ONCE)]
        await asyncio.gather(*(create_vm(kube, namespace, name, NO_CALLBACK) for name in names))

        decided = await eventually(
            "every VM placed or over quota", lambda: scheduled(kube, namespace, names), 90
        )
        waiting = [name for name, cond in decided.items() if cond["status"] != "True"]
        assert len(waiting) == 1, decided
        [late] = waiting
        message = f"VMQuota team: memory MiB {fits * VM_MIB} used + {VM_MIB} asked > {fits * VM_MIB} allowed"
        assert decided[late]["message"] == message
        assert "hypervisorName" not in ((await kube.get(VMS, late, namespace)) or {})["spec"]
        events = [e for e in await kube.list(resources.EVENTS, namespace) if e["reason"] == "QuotaExceeded"]
        assert {e["involvedObject"]["name"] for e in events} == {late}, events
        used = {"vcpus": fits, "memoryMiB": fits * VM_MIB, "storageGiB": fits, "vms": fits}
        await quota_status(
            kube, namespace, "team", {"used": used, "hard": {"memoryMiB": fits * VM_MIB, "vms": 10}}
        )
        placed = [name for name in names if name != late]
        for name in placed:
            await wait_condition(kube, VMS, name, namespace, "Ready", "True", 120)

        # Status is a cache: wiped, it is counted again.
        await kube.patch_status(QUOTAS, "team", {"used": None, "hard": None}, namespace)
        await quota_status(kube, namespace, "team", {"used": used})

        # A limit lowered below what is used touches no placed VM; the late one still waits, told why.
        await kube.patch(QUOTAS, "team", {"spec": {"hard": {"memoryMiB": VM_MIB}}}, namespace)
        await quota_status(kube, namespace, "team", {"used": used, "hard": {"memoryMiB": VM_MIB, "vms": 10}})
        lowered = f"VMQuota team: memory MiB {fits * VM_MIB} used + {VM_MIB} asked > {VM_MIB} allowed"

        async def told_lowered() -> bool:
            return (condition(await kube.get(VMS, late, namespace), "Scheduled") or {}).get(
                "message"
            ) == lowered

        await eventually("the waiting VM to name the lowered limit", told_lowered, 60)
        for name in placed:
            assert (condition(await kube.get(VMS, name, namespace), "Ready") or {}).get("status") == "True"
        assert sum(len(leftovers(hv, namespace)[0]) for hv in hypervisors) == fits

        # Room frees up: the limit back, one placed VM deleted; the waiting VM is placed soon after it goes.
        await kube.patch(QUOTAS, "team", {"spec": {"hard": {"memoryMiB": fits * VM_MIB}}}, namespace)
        await kube.delete(VMS, placed[0], namespace)
        await eventually("the deleted VM to be gone", lambda: gone(kube, namespace, placed[0]), 60)
        freed = time.monotonic()
        await wait_condition(kube, VMS, late, namespace, "Scheduled", "True", 60)
        print(f"\nthe waiting VM was placed {time.monotonic() - freed:.1f} s after room freed up")
        await wait_condition(kube, VMS, late, namespace, "Ready", "True", 120)
        await quota_status(kube, namespace, "team", {"used": used})
    finally:
        await delete_all(kube, namespace, hv_names)
        for hv in hypervisors:
            remove_base_image(hv)
    for hv in hypervisors:
        assert leftovers(hv, namespace) == ([], [])
    none = {"vcpus": 0, "memoryMiB": 0, "storageGiB": 0, "vms": 0}
    await quota_status(kube, namespace, "team", {"used": none})
    assert forbidden_requests(control_plane, "libvirt-vm", namespace=namespace) == []


async def gone(kube: Kube, namespace: str, name: str) -> bool:
    return await kube.get(VMS, name, namespace) is None
