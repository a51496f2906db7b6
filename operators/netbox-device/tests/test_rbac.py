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
    INSTANCE,
    MACHINES,
    OPERATOR_ENV,
    create_connection_secret,
    create_device_claim,
    owned_devices,
    seed_inventory,
    vm_body,
    wait_reason,
)

from capfleet import resources
from capfleet.kube import Kube
from capfleet.secretholds import HELD_ANNOTATION
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.fixtures import release_leftovers
from capfleet_e2e.namespaces import delete_namespace_while_down
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


async def test_deleting_the_namespace_releases_the_device_and_the_vm_record_before_the_secret_goes(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    netbox: NetboxInstance,
) -> None:
    """`kubectl delete namespace` deletes the connection Secret along with its users, here while the
    operator is down: the users' finalizers on it keep it (readable) until they have given back what they
    hold in NetBox, so the namespace goes and NetBox is left clean. Under the operator's own RBAC."""
    seed_inventory(netbox, 1)
    netbox.seed(
        {"cluster_types": [{"name": "kvm", "slug": "kvm"}], "clusters": [{"name": "kvm1", "type": "kvm"}]}
    )
    await create_connection_secret(kube, namespace, netbox)
    operator = run_operator_as("netbox_device", "netbox-device", namespaces=[namespace], env=OPERATOR_ENV)
    await create_device_claim(kube, netbox, namespace, "m0")
    await kube.create(MACHINES, vm_body(netbox, "vm1"), namespace)
    await wait_reason(kube, DEVICES, namespace, "m0", "Claimed")
    registered = await wait_reason(kube, MACHINES, namespace, "vm1", "Registered")
    vm_id = registered["status"]["virtualMachineID"]

    secret = await kube.get(resources.SECRETS, "netbox", namespace)
    assert secret is not None
    assert sorted(secret["metadata"]["finalizers"]) == [
        f"{namespace}.netboxdevice.holds.capfleet.dev/m0",
        f"{namespace}.netboxvirtualmachine.holds.capfleet.dev/vm1",
    ]
    assert registered["metadata"]["annotations"][HELD_ANNOTATION] == f"{namespace}/netbox"

    # Deleted while the operator is down, the Secret stays (Terminating) for its users' release.
    [kept] = await delete_namespace_while_down(kube, namespace, operator, ["netbox"], within=120)
    assert len(kept["metadata"]["finalizers"]) == 2
    assert owned_devices(netbox) == {}
    assert netbox.client.list_all("virtualization/virtual-machines/", id=vm_id) == []
    for address in ("10.77.0.5", "2001:db8::5", "10.78.0.9"):
        assert netbox.client.list_all("ipam/ip-addresses/", address=address) == [], address
    # Events cannot be created in a terminating namespace: those refusals are the only ones allowed.
    refused = [r for r in forbidden_requests(control_plane, "netbox-device") if "/events" not in r]
    assert refused == []


async def test_a_secret_in_a_namespace_that_did_not_opt_in_is_a_clear_condition(
    kube: Kube,
    namespace: str,
    run_operator_as: RunOperatorAs,
    netbox: NetboxInstance,
) -> None:
    """With the default RBAC the operator claims in a namespace where deploy/tenant is applied and,
    elsewhere, says why it cannot (Ready=False SecretForbidden), instead of a traceback."""
    seed_inventory(netbox, 2)
    other = f"{namespace[:50]}-other"
    await kube.create(resources.NAMESPACES, {"metadata": {"name": other}})
    try:
        for served in (namespace, other):
            await create_connection_secret(kube, served, netbox)
        run_operator_as(
            "netbox_device",
            "netbox-device",
            namespaces=[namespace, other],
            secrets_in=[namespace],
            env=OPERATOR_ENV,
        )
        await create_device_claim(kube, netbox, other, "m0")
        refused = await wait_reason(kube, DEVICES, other, "m0", "SecretForbidden")
        message = next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")["message"]
        assert f"apply deploy/tenant in namespace {other}" in message
        await create_device_claim(kube, netbox, namespace, "m0")
        await wait_reason(kube, DEVICES, namespace, "m0", "Claimed")
        assert list(owned_devices(netbox)) == [f"{INSTANCE}/{namespace}/m0"]
    finally:
        await kube.delete(resources.NAMESPACES, other)
        await release_leftovers(kube, other)
