"""baremetal-provision does its job with exactly the RBAC of its kustomize base, as its own ServiceAccount.

The operator runs with a TokenRequest token of capfleet-baremetal-provision-manager, bound only to the
ClusterRole that deploy/overlays/baremetal-provision renders, and provisions one lab server through
Redfish (reading its Secrets, marking the instance, writing status and Events, serving the guest), then
deprovisions it when its namespace is deleted: a missing permission stalls the flow or shows as a 403 in
the apiserver's audit log.
"""

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
    facts,
    operator_env,
)

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.namespaces import delete_namespace_while_down
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration


async def test_server_is_provisioned_with_only_the_base_rbac(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    tmp_path: Path,
) -> None:
    (server,) = baremetal_servers(1)
    env = operator_env(pxe_lab, boot_files(netboot_image, tmp_path / "files"))
    operator = run_operator_as("baremetal_provision", "baremetal-provision", namespaces=[namespace], env=env)
    await create_secrets(kube, namespace, server)
    await create_instance(kube, namespace, server, netboot_image, env["CAPFLEET_BOOT_URL"])

    async def provisioned() -> dict[str, Any] | None:
        obj = await kube.get(INSTANCES, server.name, namespace)
        return obj if (obj or {}).get("status", {}).get("phase") == "Provisioned" else None

    await eventually("the server to be provisioned", provisioned, within=180)
    assert "installed-by-capfleet" in server.serial_output(), "the user-data Secret was read"
    seen = await facts(server)
    assert (seen.power_state, seen.boot_device) == ("On", "disk")
    listed = await kube.list(resources.EVENTS, namespace)
    assert any(e.get("reason") == "Provisioned" for e in listed), "Events were posted"

    # The instance holds its BMC credentials Secret: `kubectl delete namespace` (the Secret with it) still
    # powers the server off through the BMC, then lets the Secret and the namespace go.
    secret = await kube.get(resources.SECRETS, f"{server.name}-bmc", namespace)
    assert secret is not None
    assert secret["metadata"]["finalizers"] == [
        f"{namespace}.baremetalinstance.holds.capfleet.dev/{server.name}"
    ]
    # Deleted while the operator is down, the Secret stays (Terminating) until the instance lets it go.
    bmc_secret = f"{server.name}-bmc"
    [kept] = await delete_namespace_while_down(kube, namespace, operator, [bmc_secret], within=120)
    assert kept["metadata"]["finalizers"] == secret["metadata"]["finalizers"]
    assert (await facts(server)).power_state == "Off"
    # Events cannot be created in a terminating namespace: those refusals are the only ones allowed.
    assert [r for r in forbidden_requests(control_plane, "baremetal-provision") if "/events" not in r] == []
