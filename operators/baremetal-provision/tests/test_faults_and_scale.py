"""Faults and scale on the real control plane with the bare-metal lab: an operator SIGKILLed while a server
network-boots comes back without power-cycling it again, and three servers provision at once (timed).

Power actions are counted where the BMC sees them: each Redfish `ComputerSystem.Reset` POST for a system
is a line in the emulator's request log; each Linux boot of a guest is an `init started` line on its
serial console.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from baremetal_helpers import INSTANCES, boot_files, create_instance, create_secrets, facts, operator_env

from baremetal_provision import markers
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

GUEST_BOOT = "capfleet-testimage: init started"


def resets(pxe_lab: PxeLab, server: BareMetalServer) -> int:
    """How many power actions (Reset POSTs) the Redfish emulator has served for this server so far."""
    assert pxe_lab.emulator.process is not None
    log = pxe_lab.emulator.process.log_path.read_text(errors="replace")
    action = f"POST /redfish/v1/Systems/{server.uuid}/Actions/ComputerSystem.Reset "
    return sum(action in line for line in log.splitlines())


def write_figures(name: str, lines: list[str]) -> Path:
    path = artifacts_dir() / "baremetal-figures" / f"{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


async def phase_of(kube: Kube, namespace: str, name: str) -> str | None:
    obj = await kube.get(INSTANCES, name, namespace)
    return ((obj or {}).get("status") or {}).get("phase")


async def test_operator_killed_while_network_booting_does_not_power_cycle_again(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    (server,) = baremetal_servers(1)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    operator = run_operator("baremetal_provision", namespaces=[namespace], env=env)
    await create_secrets(kube, namespace, server)
    before = resets(pxe_lab, server)
    created = time.monotonic()
    await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"])

    async def network_booted() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return (
            obj
            if markers.NETWORK_BOOTED in markers.annotations_of((obj or {}).get("metadata") or {})
            else None
        )

    await eventually("the network-boot power cycle to be recorded", network_booted, within=60, interval=0.1)
    # A real server spends minutes in its firmware before it asks for its boot script; this one would ask
    # within seconds, while the operator (which serves that script) is down. Freezing the VM through the
    # lab's libvirt stands in for that firmware time: it stays powered on and resumes where it was.
    conn = pxe_lab.daemon.connect()
    try:
        domain = conn.lookupByName(server.name)
        domain.suspend()
        try:
            operator.kill()
            await asyncio.to_thread(operator.start)

            async def resumed_reconcile() -> bool:
                return "Handler 'provision' succeeded" in operator.log()

            await eventually("the restarted operator to reconcile the instance", resumed_reconcile, within=60)
            assert await phase_of(kube, namespace, server.name) == "NetworkBooting"
        finally:
            domain.resume()
    finally:
        conn.close()

    async def provisioned() -> bool:
        return await phase_of(kube, namespace, server.name) == "Provisioned"

    await eventually("the server to be provisioned after the restart", provisioned, within=120)
    elapsed = time.monotonic() - created
    power_actions = resets(pxe_lab, server) - before
    boots = server.serial_output().count(GUEST_BOOT)
    figures = [
        f"create → Provisioned across an operator SIGKILL + restart: {elapsed:.1f}s",
        f"power actions (Redfish Reset) on {server.name}: {power_actions}",
        f"guest boots on {server.name}: {boots}",
    ]
    print("\n" + "\n".join(figures))
    write_figures("operator-killed-while-network-booting", figures)
    assert operator.starts == 2
    assert power_actions == 1, "exactly one power-on: the restarted operator did not power-cycle again"
    assert boots == 1, "the guest booted exactly once"
    seen = await facts(server)
    assert (seen.power_state, seen.boot_device) == ("On", "disk")


async def test_three_servers_at_once(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    servers = baremetal_servers(3)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    run_operator("baremetal_provision", namespaces=[namespace], env=env)
    for server in servers:
        await create_secrets(kube, namespace, server)
    before = {server.name: resets(pxe_lab, server) for server in servers}

    started = time.monotonic()
    created: dict[str, float] = {}

    async def create(server: BareMetalServer) -> None:
        created[server.name] = time.monotonic()
        await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"])

    await asyncio.gather(*(create(server) for server in servers))

    async def until_provisioned(server: BareMetalServer) -> float:
        async def provisioned() -> float | None:
            if await phase_of(kube, namespace, server.name) == "Provisioned":
                return time.monotonic() - created[server.name]
            return None

        return await eventually(f"{server.name} to be provisioned", provisioned, within=90, interval=0.2)

    took = await asyncio.gather(*(until_provisioned(server) for server in servers))
    total = time.monotonic() - started
    figures = [f"create → Provisioned for {s.name}: {t:.1f}s" for s, t in zip(servers, took, strict=True)]
    figures.append(f"create → Provisioned for all three at once: {total:.1f}s")
    print("\n" + "\n".join(figures))
    write_figures("three-servers-at-once", figures)
    for server in servers:
        assert resets(pxe_lab, server) - before[server.name] == 1, f"{server.name} was powered on once"
        assert server.serial_output().count(GUEST_BOOT) == 1
        seen = await facts(server)
        assert (seen.power_state, seen.boot_device) == ("On", "disk")
