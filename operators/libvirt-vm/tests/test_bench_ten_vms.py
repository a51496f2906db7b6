"""Benchmark (not part of `make test`; run with CAPFLEET_BENCH_LIBVIRT=1): create and start 10 VMs at once
on the two test hypervisors (TCG), time until every domain runs and until every guest has called back with
its seed, and read the operator's peak RSS (VmHWM). The figures are printed and kept in the artifacts."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from libvirt_vm_helpers import (
    HYPERVISORS,
    OPERATOR_ENV,
    VMS,
    condition,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    wait_condition,
)

from capfleet.kube import Kube
from capfleet_e2e.callbacks import Callbacks
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.environ.get("CAPFLEET_BENCH_LIBVIRT"), reason="benchmark: CAPFLEET_BENCH_LIBVIRT=1"
    ),
]
COUNT = 10
# Ten 1-vCPU VMs with 1 GiB thin disks on two 2-CPU hosts with 2 GiB pools need overcommit.
BENCH_ENV = {**OPERATOR_ENV, "CAPFLEET_VCPU_OVERCOMMIT": "4", "CAPFLEET_STORAGE_OVERCOMMIT": "4"}


@pytest.fixture
def callbacks() -> Iterator[Callbacks]:
    server = Callbacks()
    yield server
    server.close()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_ten_vms_at_once(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    callbacks: Callbacks,
) -> None:
    for hv in hypervisors:
        ensure_base_image(hv, test_image)
    operator = run_operator("libvirt_vm", env=BENCH_ENV)
    assert operator.component is not None
    names = [await create_hypervisor(kube, namespace, hv) for hv in hypervisors]
    try:
        for name in names:
            await wait_condition(kube, HYPERVISORS, name, None, "Reachable", "True", 30)
        vms = [f"vm{i}" for i in range(COUNT)]
        started = time.monotonic()
        await asyncio.gather(
            *(create_vm(kube, namespace, vm, callbacks.port, antiAffinityKey="bench") for vm in vms)
        )

        async def all_running() -> bool:
            found = await kube.list(VMS, namespace)
            return len(found) == COUNT and all(
                (condition(vm, "Ready") or {}).get("status") == "True" for vm in found
            )

        await eventually("all VMs running", all_running, 180)
        running_s = time.monotonic() - started

        async def all_called_back() -> bool:
            return all(f"/{vm}" in callbacks.received for vm in vms)

        await eventually("all guests to call back", all_called_back, 240)
        booted_s = time.monotonic() - started
        rss = peak_rss_mib(operator.component.pid)
        spread = [len(leftovers(hv, namespace)[0]) for hv in hypervisors]
        figures = (
            f"{COUNT} VMs at once (TCG): all domains running after {running_s:.1f}s, "
            f"all guests called back after {booted_s:.1f}s; per hypervisor {spread}; "
            f"operator peak RSS (VmHWM) {rss:.1f} MiB"
        )
        print(figures)
        (artifacts_dir() / "libvirt-vm-bench.txt").write_text(figures + "\n")
        assert sorted(spread) == [COUNT // 2, COUNT // 2]
    finally:
        await delete_all(kube, namespace, names)
        for hv in hypervisors:
            remove_base_image(hv)
    for hv in hypervisors:
        assert leftovers(hv, namespace) == ([], [])
