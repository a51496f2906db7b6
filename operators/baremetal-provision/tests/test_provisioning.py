"""BaremetalInstance on the real control plane with the bare-metal lab: QEMU servers behind sushy-tools'
Redfish emulator really network-boot from the operator's iPXE scripts, fetch their NoCloud seed and call
back; deletion powers them off; an installer that never calls back times out twice, each attempt a real
power cycle, then stops at RetryLimitExceeded; a wrong password shows, and does not block deletion;
an untrusted BMC address (plain HTTP, or outside bmcAddressCIDRs) is refused before its credentials are
read."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from baremetal_helpers import (
    INSTANCES,
    boot_files,
    condition,
    create_instance,
    create_secrets,
    delete_and_wait,
    facts,
    operator_env,
)

from baremetal_provision import markers
from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration


async def test_provision_deprovision_and_timeout(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    good, silent = baremetal_servers(2)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    run_operator("baremetal_provision", namespaces=[namespace], env=env)
    boot_url = env["CAPFLEET_BOOT_URL"]
    for server in (good, silent):
        await create_secrets(kube, namespace, server)
    created = time.monotonic()
    await create_instance(kube, namespace, good, netboot_image, boot_url)
    # This installer's kernel does not exist: iPXE gives up, nothing ever calls back.
    await create_instance(
        kube, namespace, silent, netboot_image, boot_url,
        os={"kernelURL": f"{boot_url}/files/missing", "initrdURL": f"{boot_url}/files/initrd"},
        provisioningTimeoutSeconds=60, maxProvisioningAttempts=2,
    )  # fmt: skip

    async def provisioned() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, good.name, namespace)
        return obj if (obj or {}).get("status", {}).get("phase") == "Provisioned" else None

    obj = await eventually("the server to be provisioned", provisioned, within=150)
    print(f"\ncreate → Provisioned for one server: {time.monotonic() - created:.1f}s")
    annotations = obj["metadata"]["annotations"]
    assert markers.SEED_FETCHED in annotations
    assert markers.CALLED_BACK in annotations
    assert (condition(obj, "Ready") or {}).get("status") == "True"
    serial = good.serial_output()
    assert "installed-by-capfleet" in serial, "the guest fetched the bootstrap data as user-data"
    assert f"provider-id: capfleet://metal/{namespace}/{good.name}" in serial
    seen = await facts(good)
    assert (seen.boot_device, seen.boot_override) == ("disk", "Continuous")

    await delete_and_wait(kube, namespace, good.name, "the instance to be deleted", 60)
    assert (await facts(good)).power_state == "Off"

    async def gave_up() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, silent.name, namespace)
        found = condition(obj, "Provisioned")
        return obj if found and found["reason"] == "RetryLimitExceeded" else None

    obj = await eventually("the silent server to fail both attempts", gave_up, within=240)
    assert obj["status"]["phase"] == "Failed"
    assert obj["status"]["provisioningAttempts"] == 2
    assert obj["status"]["lastFailure"] == "ProvisioningTimedOut: no callback within 60s"
    assert obj["metadata"]["annotations"][markers.FAILED_ATTEMPTS] == "2"
    assert markers.NETWORK_BOOTED not in obj["metadata"]["annotations"], "no third network boot"
    silent_facts = await facts(silent)
    assert (silent_facts.power_state, silent_facts.boot_device) == ("Off", "disk")


async def test_wrong_password_is_reported(
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
    wrong = "not-the-password-4711"
    await create_secrets(kube, namespace, server, password=wrong)
    await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"])

    async def refused() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        found = condition(obj, "BMCReachable")
        return found if found and found["reason"] == "AuthenticationFailed" else None

    found = await eventually("AuthenticationFailed", refused, within=60)
    assert found["status"] == "False"
    assert wrong not in found["message"]
    assert wrong not in operator.log()
    assert (await facts(server)).power_state == "Off", "nothing was done to the server"
    # Nothing was ever done through this BMC, so deleting needs no BMC (it would refuse forever).
    await delete_and_wait(kube, namespace, server.name, "the wrong-password instance deleted", 30)


@pytest.mark.parametrize(
    ("scheme", "bmc_extra", "says"),
    [
        ("redfish+http", {}, "unencrypted"),
        ("redfish+https", {"addressCIDRs": ["10.99.0.0/16"]}, "outside the cluster's bmcAddressCIDRs"),
    ],
    ids=["plain-http", "outside-cidrs"],
)
async def test_an_untrusted_bmc_address_is_refused_before_its_credentials_are_read(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
    scheme: str,
    bmc_extra: dict[str, Any],
    says: str,
) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("reads the apiserver's audit log, which only the harness's own control plane has")
    (server,) = baremetal_servers(1)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    run_operator("baremetal_provision", namespaces=[namespace], env=env)
    await create_secrets(kube, namespace, server)
    _, audit_offset = control_plane.audit_events()
    address = server.bmc_address.replace("redfish+https", scheme, 1)
    bmc = {"address": address, "credentialsSecretRef": {"name": f"{server.name}-bmc"}, **bmc_extra}
    await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"], bmc=bmc)

    async def refused() -> dict[str, Any] | None:
        found = condition(await kube.get(INSTANCES, server.name, namespace), "Ready")
        return found if found and found["reason"] == "BMCAddressRefused" else None

    found = await eventually("BMCAddressRefused", refused, within=60)
    assert found["status"] == "False", found
    assert says in found["message"], found
    warnings = [e for e in await kube.list(resources.EVENTS, namespace) if e["reason"] == "BMCAddressRefused"]
    assert [e["type"] for e in warnings][:1] == ["Warning"], warnings
    events, _ = control_plane.audit_events(audit_offset)
    secret_reads = [
        e["requestURI"]
        for e in events
        if f"/secrets/{server.name}-bmc" in e["requestURI"] and e["verb"] == "get"
    ]
    assert secret_reads == [], "the credentials were read for a refused address"
    assert (await facts(server)).power_state == "Off", "nothing was done to the server"
    await delete_and_wait(kube, namespace, server.name, "the refused instance deleted", 30)
