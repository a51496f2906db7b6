"""BaremetalInstance on the real control plane with the bare-metal lab: QEMU servers behind sushy-tools'
Redfish emulator really network-boot from the operator's iPXE scripts, fetch their NoCloud seed and call
back; deletion powers them off; an installer that never calls back times out twice, each attempt a real
power cycle, then stops at RetryLimitExceeded; a wrong password shows, and does not block deletion;
an untrusted BMC address (plain HTTP, or outside bmcAddressCIDRs) is refused before its credentials are
read; another host on the provisioning network, even with the attempt's token, gets nothing of a server's
attempt once the server fetched its boot script."""

from __future__ import annotations

import subprocess
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
    operator_tokens,
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


def intruding(pxe_lab: PxeLab, address: str, verb: str) -> None:
    """Add (or delete) `address` on the lab's bridge: another host on the provisioning network."""
    network = pxe_lab.network
    subprocess.run(
        network.exec_argv(["ip", "addr", verb, f"{address}/32", "dev", network.bridge]), check=True
    )


def ask_as(pxe_lab: PxeLab, address: str, path: str, post: bool = False) -> tuple[int, str]:
    """`path` of the boot server as another host on the provisioning network (source `address`): the HTTP
    status and body."""
    argv = ["curl", "-s", "--max-time", "20", "--interface", address, "-w", "\n%{http_code}"]
    url = pxe_lab.network.http_url(path)
    done = subprocess.run(
        pxe_lab.network.exec_argv([*argv, *(["-X", "POST"] if post else []), url]),
        capture_output=True,
        text=True,
        check=True,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


async def test_another_host_on_the_network_gets_nothing_of_a_bound_attempt(
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
    network = pxe_lab.network
    intruder = str(network.network.network_address + 250)  # outside DHCP's .100-.200 and the node pools
    intruding(pxe_lab, intruder, "add")
    await create_secrets(kube, namespace, server)
    await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"])

    async def bound() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return obj if markers.BOOT_REQUESTER in ((obj or {})["metadata"].get("annotations") or {}) else None

    obj = await eventually("the server to fetch its boot script", bound, within=120, interval=0.2)
    address = obj["metadata"]["annotations"][markers.BOOT_REQUESTER]
    assert address not in (intruder, str(network.address)), "bound to the server's own lease"
    token = (await operator_tokens(kube)).of(obj["metadata"])
    assert token is not None
    status, script = ask_as(pxe_lab, intruder, f"ipxe?mac={server.mac.replace(':', '-')}")
    assert (status, token in script) == (403, False)
    for path in (f"seed/{token}/user-data", f"seed/{token}/meta-data"):
        assert ask_as(pxe_lab, intruder, path)[0] == 403, path
    assert ask_as(pxe_lab, intruder, f"callback/{token}?result=deployed", post=True)[0] == 403

    async def provisioned() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return obj if (obj or {}).get("status", {}).get("phase") == "Provisioned" else None

    obj = await eventually("the server to be provisioned all the same", provisioned, within=150)
    assert obj["metadata"]["annotations"][markers.BOOT_REQUESTER] == address
    assert "installed-by-capfleet" in server.serial_output(), "the server got its user-data"
    warnings = [
        e for e in await kube.list(resources.EVENTS, namespace) if e["reason"] == "BootRequestRefused"
    ]
    assert warnings, "the refusals are reported"
    assert all(intruder in e["message"] and token not in e["message"] for e in warnings)
    await delete_and_wait(kube, namespace, server.name, "the instance to be deleted", 60)
    intruding(pxe_lab, intruder, "del")
