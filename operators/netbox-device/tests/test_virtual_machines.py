"""NetboxVirtualMachine on the real control plane: register with linked IPs, update, pause, delete.

Both MAC models: plain interface MACs before NetBox 4.2, MAC address objects from 4.2.
"""

from __future__ import annotations

from typing import Any

import pytest
from netbox_device_helpers import (
    INSTANCE,
    MACHINES,
    OPERATOR_ENV,
    create_connection_secret,
    ensure_custom_fields,
    ready,
    vm_body,
    wait_reason,
    without_times,
)

from capfleet import netbox as netbox_api
from capfleet.api.netbox import NetboxVirtualMachineSpec
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.waiting import eventually
from netbox_device import registering
from netbox_device.backends.machines import PynetboxMachines

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)
async def test_register_link_update_and_delete(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    ensure_custom_fields(netbox)
    seeded = netbox.seed(
        {
            "tenants": [{"name": "acme", "slug": "acme"}],
            "cluster_types": [{"name": "kvm", "slug": "kvm"}],
            "clusters": [{"name": "kvm1", "type": "kvm"}],
            "ip_addresses": [{"address": "10.77.0.5/24", "description": "from a pool"}],
        }
    )
    pool_ip = seeded.id("ip_addresses", "10.77.0.5/24")
    await create_connection_secret(kube, namespace, netbox)
    run_operator("netbox_device", namespaces=[namespace], env=OPERATOR_ENV)
    await kube.create(MACHINES, vm_body(netbox, "vm1"), namespace)
    obj = await wait_reason(kube, MACHINES, namespace, "vm1", "Registered")
    vm_id = obj["status"]["virtualMachineID"]

    client = netbox.client
    vm = client.get(f"virtualization/virtual-machines/{vm_id}")
    assert vm["custom_fields"]["capfleet_owner"] == f"{INSTANCE}/{namespace}/vm1"
    assert (vm["vcpus"], vm["memory"], vm["disk"]) in {(2, 4096, 20480), ("2.00", 4096, 20480)}
    assert vm["tenant"]["slug"] == "acme"
    interfaces = {
        i["name"]: i for i in client.list_all("virtualization/interfaces/", virtual_machine_id=vm_id)
    }
    assert interfaces["eth0"]["mac_address"] == "52:54:00:AA:00:01"
    ips = {ip["address"]: ip for ip in client.list_all("ipam/ip-addresses/", virtual_machine_id=vm_id)}
    assert set(ips) == {"10.77.0.5/24", "2001:db8::5/64", "10.78.0.9/24"}
    assert ips["10.77.0.5/24"]["id"] == pool_ip, "an existing IP is linked, not duplicated"
    assert len(client.list_all("ipam/ip-addresses/", address="10.77.0.5")) == 1
    assert vm["primary_ip4"]["id"] == pool_ip
    assert vm["primary_ip6"]["address"] == "2001:db8::5/64"
    owners = {address: (ip.get("custom_fields") or {}).get("capfleet_owner") for address, ip in ips.items()}
    created_by = f"{INSTANCE}/{namespace}/vm1"
    assert owners == {"10.77.0.5/24": None, "2001:db8::5/64": created_by, "10.78.0.9/24": created_by}

    # Update: more vCPUs, eth1 dropped (its created IP goes with it), a new MAC on eth0.
    spec = vm_body(netbox, "vm1")["spec"]
    spec["vcpus"] = 4
    spec["interfaces"] = [{**spec["interfaces"][0], "macAddress": "52:54:00:aa:00:09"}]
    await kube.patch(MACHINES, "vm1", {"spec": spec}, namespace)

    async def updated() -> dict[str, Any] | None:
        found = client.get(f"virtualization/virtual-machines/{vm_id}")
        names = [i["name"] for i in client.list_all("virtualization/interfaces/", virtual_machine_id=vm_id)]
        return found if float(found["vcpus"]) == 4 and names == ["eth0"] else None

    await eventually("the VM to follow the spec", updated)
    eth0 = client.list_all("virtualization/interfaces/", virtual_machine_id=vm_id)[0]
    assert eth0["mac_address"] == "52:54:00:AA:00:09"
    assert not client.list_all("ipam/ip-addresses/", address="10.78.0.9"), "a created IP is deleted"

    # A wiped status comes back; a paused object is left alone.
    before = (await kube.get(MACHINES, "vm1", namespace) or {})["status"]
    await kube.patch_status(MACHINES, "vm1", {"virtualMachineID": None, "conditions": None}, namespace)
    restored = await wait_reason(kube, MACHINES, namespace, "vm1", "Registered")
    assert without_times(restored["status"]) == without_times(before)
    paused = {"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}
    await kube.patch(MACHINES, "vm1", paused, namespace)

    async def paused_condition() -> bool:
        found = await kube.get(MACHINES, "vm1", namespace)
        conds = (found or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Paused" and c["status"] == "True" for c in conds)

    await eventually("the Paused condition", paused_condition)
    await kube.patch(
        MACHINES, "vm1", {"metadata": {"annotations": {"cluster.x-k8s.io/paused": None}}}, namespace
    )

    # Delete: the VM goes, the linked pool IP stays (unassigned).
    await kube.delete(MACHINES, "vm1", namespace)

    async def deregistered() -> bool:
        return not client.list_all("virtualization/virtual-machines/", id=vm_id)

    await eventually("the VM to be deleted from NetBox", deregistered)
    kept = client.get(f"ipam/ip-addresses/{pool_ip}")
    assert kept["assigned_object_id"] is None
    assert not client.list_all("ipam/ip-addresses/", address="2001:db8::5")


async def test_missing_cluster_is_a_condition_with_netbox_message(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    ensure_custom_fields(netbox)
    netbox.seed({"tenants": [{"name": "acme", "slug": "acme"}]})
    await create_connection_secret(kube, namespace, netbox)
    run_operator("netbox_device", namespaces=[namespace], env=OPERATOR_ENV)
    await kube.create(MACHINES, vm_body(netbox, "lost"), namespace)
    obj = await wait_reason(kube, MACHINES, namespace, "lost", "NotFoundInNetBox")
    assert "virtualization/clusters" in (ready(obj) or {})["message"]
    assert netbox.token not in str(obj)


@pytest.mark.parametrize("netbox", ["4.4.10"], indirect=True)
@pytest.mark.parametrize("instance_named", [True, False], ids=["instance-named", "instance-derived"])
async def test_the_operator_asks_netbox_once_for_the_vm_a_new_record_holds(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance, instance_named: bool
) -> None:
    """A new record's first pass asks what its owner holds once: settling the owner and registering
    under it share the answer, and with the instance name derived (not configured), the owner a record
    made before names were recorded would hold under and this cluster's are asked in one listing. The
    record's own writes (its owner mark, its status) bring no second pass."""
    ensure_custom_fields(netbox)
    netbox.seed(
        {
            "tenants": [{"name": "acme", "slug": "acme"}],
            "cluster_types": [{"name": "kvm", "slug": "kvm"}],
            "clusters": [{"name": "kvm1", "type": "kvm"}],
        }
    )
    await create_connection_secret(kube, namespace, netbox)
    netbox.faults.reset_log()
    env = OPERATOR_ENV if instance_named else {**OPERATOR_ENV, "CAPFLEET_INSTANCE_NAME": ""}
    run_operator("netbox_device", namespaces=[namespace], env=env)
    host = 8 if instance_named else 9
    name = f"vm-once-{host}"
    interfaces = [
        {"name": "eth0", "macAddress": f"52:54:00:aa:00:0{host}", "addresses": [f"10.79.0.{host}/24"]}
    ]
    await kube.create(MACHINES, vm_body(netbox, name, interfaces=interfaces), namespace)
    await wait_reason(kube, MACHINES, namespace, name, "Registered")

    assert netbox.faults.count("GET", "/api/virtualization/virtual-machines/") == 1
    assert netbox.faults.count("POST", "/api/virtualization/virtual-machines/") == 1


@pytest.mark.parametrize("netbox", ["4.4.10"], indirect=True)
async def test_a_new_vm_is_written_without_reading_back_what_it_cannot_have_yet(
    netbox: NetboxInstance,
) -> None:
    ensure_custom_fields(netbox)
    netbox.seed(
        {
            "tenants": [{"name": "acme", "slug": "acme"}],
            "cluster_types": [{"name": "kvm", "slug": "kvm"}],
            "clusters": [{"name": "kvm1", "type": "kvm"}],
        }
    )
    body = vm_body(
        netbox,
        "vm-new",
        interfaces=[{"name": "eth0", "macAddress": "52:54:00:aa:00:07", "addresses": ["10.79.0.7/24"]}],
    )
    spec = NetboxVirtualMachineSpec.model_validate(body["spec"])
    api = netbox_api.open_api(netbox_api.Connection(url=netbox.url, token=netbox.token, ca_bundle=None))
    machines = PynetboxMachines(api)
    owner = f"{INSTANCE}/ns/vm-new"
    netbox.faults.reset_log()
    vm_id = await registering.register(machines, spec, owner)
    assert netbox.faults.by_endpoint() == {
        "GET /api/virtualization/virtual-machines/": 1,  # what the owner holds: nothing
        "GET /api/virtualization/clusters/": 1,
        "GET /api/tenancy/tenants/": 1,
        "POST /api/virtualization/virtual-machines/": 1,
        "POST /api/virtualization/interfaces/": 1,
        "POST /api/dcim/mac-addresses/": 1,
        "PATCH /api/virtualization/interfaces/": 1,
        "GET /api/ipam/ip-addresses/": 1,  # the address may exist unassigned (a NetboxIPPool's)
        "POST /api/ipam/ip-addresses/": 1,
        "PATCH /api/virtualization/virtual-machines/": 1,  # its primary IPv4
    }
    netbox.faults.reset_log()
    assert await registering.register(machines, spec, owner) == vm_id
    assert netbox.faults.by_endpoint() == {
        "GET /api/virtualization/virtual-machines/": 1,
        "GET /api/virtualization/interfaces/": 1,
        "GET /api/ipam/ip-addresses/": 1,
    }, "a second pass finds everything in place from three reads and writes nothing"
    vm = netbox.client.get(f"virtualization/virtual-machines/{vm_id}")
    (eth0,) = netbox.client.list_all("virtualization/interfaces/", virtual_machine_id=vm_id)
    assert eth0["mac_address"] == "52:54:00:AA:00:07"
    (ip,) = netbox.client.list_all("ipam/ip-addresses/", virtual_machine_id=vm_id)
    assert (ip["address"], vm["primary_ip4"]["id"]) == ("10.79.0.7/24", ip["id"])

    netbox.faults.reset_log()
    await registering.deregister(machines, owner)
    assert netbox.faults.by_endpoint() == {
        "GET /api/virtualization/virtual-machines/": 1,  # what the owner holds
        "PATCH /api/virtualization/virtual-machines/": 1,  # its primary IP let go of
        "GET /api/ipam/ip-addresses/": 1,
        f"DELETE /api/ipam/ip-addresses/{ip['id']}/": 1,  # created for it: deleted, in one request
        f"DELETE /api/virtualization/virtual-machines/{vm_id}/": 1,
    }
    assert not netbox.client.list_all("virtualization/virtual-machines/", id=vm_id)
    netbox.faults.reset_log()
    await machines.delete(registering.VMS, vm_id)
    assert netbox.faults.count() == 1, "deleting what is gone already: one request, no error"
