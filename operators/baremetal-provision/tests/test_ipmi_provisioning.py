"""The whole flow through IPMI on the real control plane: a lab server behind virtualbmc (pyghmi) network-
boots from the operator's iPXE script and calls back → Provisioned with the boot device back on disk;
`spec.online` powers it off and on again; a lost status is rebuilt from the marks and the BMC without
provisioning again; deletion powers it off. The operator's BMC metrics count the IPMI calls."""

from __future__ import annotations

import base64
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
    ipmi_spec,
    operator_env,
    operator_tokens,
)

from baremetal_provision import markers
from capfleet.kube import Kube
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

GUEST_BOOT = "capfleet-testimage: init started"


async def test_provision_online_status_rebuild_and_deprovision_through_ipmi(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    ipmi_bmcs: Callable[[BareMetalServer], VirtualBmc],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    (server,) = baremetal_servers(1)
    vbmc = ipmi_bmcs(server)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    env["CAPFLEET_IPMI_CIPHER_SUITE"] = "3"  # virtualbmc cannot negotiate 17
    operator = run_operator("baremetal_provision", namespaces=[namespace], env=env)
    await create_secrets(kube, namespace, server, ipmi=vbmc)
    created = time.monotonic()
    await create_instance(
        kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"], bmc=ipmi_spec(vbmc, server)
    )

    async def status_of() -> dict[str, Any]:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return dict((obj or {}).get("status") or {})

    async def provisioned() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return obj if (obj or {}).get("status", {}).get("phase") == "Provisioned" else None

    obj = await eventually("the server to be provisioned through IPMI", provisioned, within=180)
    print(f"\ncreate → Provisioned through IPMI: {time.monotonic() - created:.1f}s")
    annotations = obj["metadata"]["annotations"]
    assert markers.CALLED_BACK in annotations
    assert (condition(obj, "Ready") or {}).get("status") == "True"
    assert "installed-by-capfleet" in server.serial_output()
    assert (await facts(server, vbmc)).power_state == "On"

    async def power(state: str) -> bool:
        status = await status_of()
        return status.get("powerState") == state and (await facts(server, vbmc)).power_state == state

    await kube.patch(INSTANCES, server.name, {"spec": {"online": False}}, namespace)
    await eventually("online=false to power the server off", lambda: power("Off"), within=90)
    await kube.patch(INSTANCES, server.name, {"spec": {"online": True}}, namespace)
    await eventually("online=true to power the server on", lambda: power("On"), within=90)
    # virtualbmc reports a boot device set while the server runs only after the next cold start: this one.
    assert (await facts(server, vbmc)).boot_device == "disk"

    # Status is a cache: wiped, it comes back from the marks and the BMC, without a second installation.
    await kube.patch_status(
        INSTANCES, server.name, {"phase": None, "powerState": None, "conditions": None}, namespace
    )

    async def rebuilt() -> dict[str, Any] | None:
        status = await status_of()
        return status if status.get("phase") == "Provisioned" and status.get("powerState") else None

    status = await eventually("the status to be rebuilt", rebuilt, within=60)
    assert status["powerState"] == "On"
    after = await kube.get(INSTANCES, server.name, namespace)
    assert after is not None
    assert after["metadata"]["annotations"][markers.NETWORK_BOOTED] == annotations[markers.NETWORK_BOOTED]
    assert server.serial_output().count(GUEST_BOOT) == 1, "the installer ran exactly once"

    await delete_and_wait(kube, namespace, server.name, "the instance to be deleted", 90)
    seen = await facts(server, vbmc)
    assert (seen.power_state, seen.boot_device) == ("Off", "disk")
    log = operator.log()
    assert vbmc.password not in log
    assert markers.LEGACY_TOKEN_SECRET not in annotations, "no token secret on the instance"
    key = (await operator_tokens(kube)).key
    assert base64.b64encode(key).decode() not in log, "the token key is never logged"
    assert key.hex() not in log
    scraped = operator.metrics()
    assert 'capfleet_backend_call_duration_seconds_count{backend="ipmi",operation="facts",outcome="ok"}' in (
        scraped
    )
    assert "capfleet_provisioning_duration_seconds_count" in scraped
