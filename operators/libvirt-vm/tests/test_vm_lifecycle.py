"""A LibvirtVM on a real libvirtd over SSH: it boots the test image from a disk cloned from a base image,
the guest reports the NoCloud seed it read (user-data, meta-data with provider-id, network-config) by
calling back to a loopback HTTP server; a wiped status is rebuilt identically; `removeUserData` takes the
user-data out of the seed on the hypervisor without restarting the VM, for good; deletion leaves no domain
and no volume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from libvirt_vm_helpers import (
    HYPERVISORS,
    OPERATOR_ENV,
    VMS,
    b64,
    create_hypervisor,
    create_vm,
    delete_all,
    leftovers,
    user_data,
    wait_condition,
)

from capfleet.kube import Kube, KubeError
from capfleet_e2e.callbacks import Callbacks
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage, seed_from_serial
from capfleet_e2e.site import ensure_base_image, remove_base_image
from capfleet_e2e.waiting import eventually
from libvirt_vm import seeding

pytestmark = pytest.mark.integration


@pytest.fixture
def callbacks() -> Iterator[Callbacks]:
    server = Callbacks()
    yield server
    server.close()


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]]
    return {**status, "conditions": conditions}


async def test_vm_boots_with_its_seed_rebuilds_status_and_leaves_nothing(
    kube: Kube,
    namespace: str,
    run_operator: RunOperator,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    callbacks: Callbacks,
) -> None:
    hv = hypervisors[0]
    ensure_base_image(hv, test_image)
    operator = run_operator("libvirt_vm", env=OPERATOR_ENV)
    hv_name = await create_hypervisor(kube, namespace, hv)
    try:
        found = await wait_condition(kube, HYPERVISORS, hv_name, None, "Reachable", "True", 30)
        status = found["status"]
        assert status["capacity"]["vcpus"] >= 1
        assert status["capacity"]["storageGiB"] >= 1
        assert status["libvirtVersion"]
        assert status["qemuVersion"]
        interface = {
            "userMode": True,
            "macAddress": "52:54:00:ab:00:01",
            "addresses": ["10.0.2.15/24"],
            "gateway": "10.0.2.2",
            "nameservers": ["10.0.2.3"],
        }
        await create_vm(kube, namespace, "vm1", callbacks.port, interfaces=[interface])
        vm = await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 90)
        domain = f"{namespace}_vm1"
        assert vm["spec"]["hypervisorName"] == hv_name
        assert vm["status"]["domainName"] == domain
        assert vm["status"]["state"] == "running"
        assert vm["status"]["providerID"] == f"capfleet://vm/{hv_name}/{domain}"

        report = await eventually("vm1 to call back", lambda_get(callbacks, "/vm1"), 90)
        seed = seed_from_serial(report.decode())
        assert seed["user-data"].decode() == user_data("vm1", callbacks.port)
        meta = yaml.safe_load(seed["meta-data"])
        assert meta["provider-id"] == vm["status"]["providerID"]
        assert meta["local-hostname"] == "vm1"
        assert meta["instance-id"]
        assert yaml.safe_load(seed["network-config"]) == {
            "version": 2,
            "ethernets": {
                "eth0": {
                    "match": {"macaddress": "52:54:00:ab:00:01"},
                    "set-name": "eth0",
                    "addresses": ["10.0.2.15/24"],
                    "routes": [{"to": "0.0.0.0/0", "via": "10.0.2.2"}],
                    "nameservers": {"addresses": ["10.0.2.3"]},
                }
            },
        }
        domains, volumes = leftovers(hv, namespace)
        assert domains == [domain]
        assert sorted(volumes) == [f"{domain}_cidata.iso", f"{domain}_root.qcow2"]

        before = vm["status"]
        await kube.patch_status(VMS, "vm1", dict.fromkeys(before), namespace)

        async def rebuilt() -> dict[str, Any] | None:
            obj = await kube.get(VMS, "vm1", namespace)
            status = (obj or {}).get("status") or {}
            return status if status.get("domainUUID") and status.get("state") else None

        after = await eventually("the status to be rebuilt", rebuilt, 30)
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 30)
        after = (await kube.get(VMS, "vm1", namespace) or {})["status"]
        assert without_times(after) == without_times(before)
        assert leftovers(hv, namespace)[0] == [domain]

        # The Node joined (capi-machine-glue says so): the user-data leaves the hypervisor; the VM runs on.
        running_as = domain_id(hv, domain)
        await kube.patch(VMS, "vm1", {"spec": {"cloudInit": {"removeUserData": True}}}, namespace)
        secret = user_data("vm1", callbacks.port).encode()

        async def removed() -> dict[str, bytes] | None:
            content = seed_volume(hv, f"{domain}_cidata.iso")
            files = seeding.files_of(content)
            return (
                files if files is not None and files["user-data"] == b"" and secret not in content else None
            )

        files = await eventually("the seed to lose its user-data", removed, 60)
        assert (files["meta-data"], files["network-config"]) == (seed["meta-data"], seed["network-config"])
        assert domain_id(hv, domain) == running_as, "the VM was not restarted"
        await wait_condition(kube, VMS, "vm1", namespace, "Ready", "True", 30)
        with pytest.raises(KubeError, match="removeUserData cannot be undone"):
            await kube.patch(VMS, "vm1", {"spec": {"cloudInit": {"removeUserData": False}}}, namespace)
    finally:
        await delete_all(kube, namespace, [hv_name])
        remove_base_image(hv)
    assert leftovers(hv, namespace) == ([], [])
    log = operator.log_path.read_text()
    key = hv.sshd.client_private_key
    assert b64(key) not in log
    assert key.splitlines()[1] not in log  # the operator runs with --verbose


def domain_id(hv: Hypervisor, domain: str) -> int:
    """The running domain's ID, which a restart changes."""
    conn = hv.connect()
    try:
        return int(conn.lookupByName(domain).ID())
    finally:
        conn.close()


def seed_volume(hv: Hypervisor, name: str) -> bytes:
    """All bytes of the seed volume `name`."""
    conn = hv.connect()
    try:
        volume = conn.storagePoolLookupByName(hv.pool_name).storageVolLookupByName(name)
        stream = conn.newStream(0)
        volume.download(stream, 0, int(volume.info()[1]), 0)
        chunks = []
        while chunk := stream.recv(1 << 16):
            chunks.append(chunk)
        stream.finish()
        return b"".join(chunks)
    finally:
        conn.close()


def lambda_get(callbacks: Callbacks, path: str) -> Any:
    async def probe() -> bytes | None:
        return callbacks.received.get(path)

    return probe
