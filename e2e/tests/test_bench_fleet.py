"""`make bench-fleet` end to end at N = 2, so the bench cannot rot between the runs that give the README its
figures: both sides provision and delete their Machines (capfleet's one bare-metal server and one VM, a
QEMU domain on the lab's hypervisor), every operator's cost is read, and the fleet makes no write in a
quiet minute once it has settled. In `make test-full` (about 6 minutes here: its own control plane,
Cluster API, CAPD, NetBox and a hypervisor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capfleet_e2e.bench.fleet import OPERATORS, bench
from capfleet_e2e.bench.fleetfigures import format_results

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(1800)]


async def test_the_fleet_bench_measures_both_sides_at_two_machines(tmp_path: Path) -> None:
    floor, fleet = await bench(2, 600, tmp_path)
    print("\n" + format_results(floor, fleet))
    assert floor.seconds_to_provisioned > 0
    assert fleet.seconds_to_provisioned > 0
    assert floor.seconds_to_deleted > 0
    assert fleet.seconds_to_deleted > 0
    assert set(fleet.operators) == set(OPERATORS.values())
    assert fleet.operators["capi-machine-glue"].writes > 0
    assert fleet.operators["baremetal-provision"].cpu_seconds > 0
    assert fleet.vms == 1
    assert fleet.operators["libvirt-vm"].writes_by_target.get("patch libvirtvms/status", 0) > 0
    assert fleet.cpu.get("QEMU (VM workers)", 0) > 0
    assert fleet.idle_writes_per_minute == 0
