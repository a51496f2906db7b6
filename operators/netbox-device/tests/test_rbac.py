"""netbox-device claims a NetBox device with exactly the RBAC of its kustomize base, as its own account.

The operator runs without a configured instance name (so it derives one from kube-system's UID) and with a
TokenRequest token of capfleet-netbox-device-manager, bound only to the
ClusterRole that deploy/overlays/netbox-device renders; it must read the connection Secret, claim a
device, write status and release the device on deletion without a single 403 in the audit log.
"""

from __future__ import annotations

import pytest
from netbox_device_helpers import (
    DEVICES,
    OPERATOR_ENV,
    create_connection_secret,
    create_device_claim,
    owned_devices,
    seed_inventory,
    wait_reason,
)

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.serviceaccounts import RunOperatorAs, forbidden_requests
from capfleet_e2e.waiting import eventually
from netbox_device.selection import OWNER_INSTANCE

pytestmark = pytest.mark.integration


async def test_device_is_claimed_and_released_with_only_the_base_rbac(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    netbox: NetboxInstance,
) -> None:
    seed_inventory(netbox, 1)
    await create_connection_secret(kube, namespace, netbox)
    # No instance name configured: the operator derives it from kube-system's UID, with its own rights.
    env = {k: v for k, v in OPERATOR_ENV.items() if k != "CAPFLEET_INSTANCE_NAME"}
    run_operator_as("netbox_device", "netbox-device", namespaces=[namespace], env=env)
    await create_device_claim(kube, netbox, namespace, "m0")

    claimed = await wait_reason(kube, DEVICES, namespace, "m0", "Claimed")
    cluster = await kube.get(resources.NAMESPACES, "kube-system")
    assert cluster is not None
    instance = "capfleet-" + cluster["metadata"]["uid"].replace("-", "")[:12]
    assert claimed["metadata"]["annotations"][OWNER_INSTANCE] == instance
    owned = owned_devices(netbox)
    assert list(owned) == [f"{instance}/{namespace}/m0"]
    assert claimed["status"]["deviceID"] == owned[f"{instance}/{namespace}/m0"]["id"]

    await kube.delete(DEVICES, "m0", namespace)

    async def released() -> bool:
        return await kube.get(DEVICES, "m0", namespace) is None and not owned_devices(netbox)

    await eventually("m0 deleted and its device released", released)
    assert forbidden_requests(control_plane, "netbox-device") == []
