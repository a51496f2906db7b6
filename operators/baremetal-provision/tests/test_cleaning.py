"""`cleaning: metadata` on the real control plane with the bare-metal lab: deleting a provisioned instance
network-boots the cleaning profile (here the test image, which calls back to the cleaning URL on its
kernel command line), waits for its callback, then powers the server off and puts its boot device back
on disk; the phases show as Events. A cleaner that never calls back is waited for until the instance's
timeout, then the server is powered off anyway (a Warning Event says so). An instance deleted for a
clusterctl move is neither cleaned nor powered off."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from baremetal_helpers import (
    INSTANCES,
    boot_files,
    create_instance,
    create_secrets,
    delete_and_wait,
    facts,
    operator_env,
)

from capfleet import pausing, resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

GUEST_BOOT = "capfleet-testimage: init started"


async def test_deletion_cleans_through_the_cleaning_profile(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    server, moved = baremetal_servers(2)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    operator = run_operator("baremetal_provision", namespaces=[namespace], env=env)
    for each in (server, moved):
        await create_secrets(kube, namespace, each)
        await create_instance(
            kube, namespace, each, netboot_image, env["CAPFLEET_BOOT_URL"], cleaning="metadata"
        )

    async def provisioned() -> bool:
        for each in (server, moved):
            obj = await kube.get(INSTANCES, each.name, namespace)
            if ((obj or {}).get("status") or {}).get("phase") != "Provisioned":
                return False
        return True

    await eventually("both servers to be provisioned", provisioned, within=180)
    assert server.serial_output().count(GUEST_BOOT) == 1

    # clusterctl move deletes the source object after copying it: the server is left as it is.
    move = {"metadata": {"annotations": {pausing.DELETE_FOR_MOVE_ANNOTATION: ""}}}
    await kube.patch(INSTANCES, moved.name, move, namespace)
    await delete_and_wait(kube, namespace, moved.name, "the moved instance to be deleted", 60)
    assert (await facts(moved)).power_state == "On", "not powered off"
    assert moved.serial_output().count(GUEST_BOOT) == 1, "not cleaned"

    took = await delete_and_wait(kube, namespace, server.name, "the instance to be cleaned and deleted", 180)
    print(f"\ndelete → gone with metadata cleaning: {took:.1f}s")
    serial = server.serial_output()
    assert serial.count(GUEST_BOOT) == 2, "the cleaner booted once after the installer"
    assert "capfleet-testimage: called back" in serial.rsplit(GUEST_BOOT, 1)[1]
    assert "/cleaned/" in serial.rsplit(GUEST_BOOT, 1)[1], "the cleaner called the cleaning callback"
    assert "cleaner of" in operator.log()
    seen = await facts(server)
    assert (seen.power_state, seen.boot_device) == ("Off", "disk")

    events: list[dict[str, Any]] = await kube.list(resources.EVENTS, namespace)
    reasons = [e.get("reason") for e in sorted(events, key=lambda e: e["metadata"]["creationTimestamp"])]
    assert "Cleaning" in reasons
    assert "Deprovisioning" in reasons
    assert reasons.index("Cleaning") < reasons.index("Deprovisioning")


async def test_a_cleaner_that_never_calls_back_times_out(
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
    run_operator("baremetal_provision", namespaces=[namespace], env=env)
    boot_url = env["CAPFLEET_BOOT_URL"]
    await create_secrets(kube, namespace, server)
    # This cleaner's kernel does not exist: iPXE gives up, nothing ever calls back.
    await create_instance(
        kube, namespace, server, netboot_image, boot_url,
        cleaning="metadata", provisioningTimeoutSeconds=60,
        cleaningOs={"kernelURL": f"{boot_url}/files/missing", "initrdURL": f"{boot_url}/files/initrd"},
    )  # fmt: skip

    async def provisioned() -> bool:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return ((obj or {}).get("status") or {}).get("phase") == "Provisioned"

    await eventually("the server to be provisioned", provisioned, within=120)
    what = "the cleaning to time out and the instance to be deleted"
    took = await delete_and_wait(kube, namespace, server.name, what, 180)
    assert took >= 60, "the cleaner was waited for"
    assert server.serial_output().count(GUEST_BOOT) == 1, "no cleaner ever booted Linux"
    seen = await facts(server)
    assert (seen.power_state, seen.boot_device) == ("Off", "disk")
    events: list[dict[str, Any]] = await kube.list(resources.EVENTS, namespace)
    timed_out = [e for e in events if e.get("reason") == "CleaningTimedOut"]
    assert [e["type"] for e in timed_out] == ["Warning"]
