"""Shared steps of the libvirt-vm integration tests: Hypervisor objects, base images, VMs, callbacks.

The test hypervisors (two private libvirtd instances behind their own sshd) live for the whole session;
each test makes its own Hypervisor objects (unique names) pointing at them, and must delete its VMs
before the operator stops, so that no domain or volume outlives the test.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.api.libvirt import USER_DATA_LABEL
from capfleet.kube import Kube
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.site import BASE_IMAGE, LAB_BASE_IMAGES, LAB_NETWORKS
from capfleet_e2e.waiting import eventually

HYPERVISORS = kinds.HYPERVISOR.resource
VMS = kinds.LIBVIRT_VM.resource
NO_CALLBACK = 9
"""A callback port nothing listens on: tests that watch libvirt or placement, not the guest, give it."""
# TCG: this machine's /dev/kvm cannot run these guests (emulation failure); production uses "auto".
OPERATOR_ENV = {
    "CAPFLEET_HYPERVISOR_POLL_SECONDS": "2",
    "CAPFLEET_VM_POLL_SECONDS": "3",
    "CAPFLEET_LIBVIRT_DOMAIN_TYPE": "qemu",
}


def leftovers(hv: Hypervisor, namespace: str) -> tuple[list[str], list[str]]:
    """Domains and volumes of `namespace`'s VMs still on the hypervisor."""
    conn = hv.connect()
    try:
        domains = [d.name() for d in conn.listAllDomains(0) if d.name().startswith(f"{namespace}_")]
        pool = conn.storagePoolLookupByName(hv.pool_name)
        pool.refresh(0)
        volumes = [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(f"{namespace}_")]
        return domains, volumes
    finally:
        conn.close()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def create_hypervisor(
    kube: Kube,
    namespace: str,
    hv: Hypervisor,
    *,
    known_hosts: str | None = None,
    reserved: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    base_images: tuple[str, ...] = LAB_BASE_IMAGES,
    networks: tuple[dict[str, object], ...] = LAB_NETWORKS,
) -> str:
    """Secrets (in `namespace`) and a Hypervisor object for test hypervisor `hv`, offering `base_images`
    to clone; returns its name."""
    name = f"{hv.name}-{secrets.token_hex(3)}"
    data = {
        "ssh-privatekey": b64(hv.sshd.client_private_key),
        "known_hosts": b64(hv.sshd.known_hosts if known_hosts is None else known_hosts),
    }
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
    await kube.create(resources.SECRETS, secret, namespace)
    ref = {"name": name, "namespace": namespace}
    body = {
        "apiVersion": HYPERVISORS.api_version,
        "kind": "Hypervisor",
        "metadata": {"name": name, "labels": {"capfleet.dev/test": namespace, **(labels or {})}},
        "spec": {
            "connection": {
                "host": hv.sshd.host,
                "port": hv.sshd.port,
                "user": hv.sshd.user,
                "socketPath": str(hv.daemon.socket_path),
            },
            "sshKeySecretRef": ref,
            "knownHostsSecretRef": ref,
            "failureDomain": hv.failure_domain,
            "storagePool": hv.pool_name,
            "baseImages": list(base_images),
            "networks": list(networks),
            "reserved": reserved or {},
        },
    }
    await kube.create(HYPERVISORS, body)
    return name


def vm_body(
    name: str, namespace: str, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": VMS.api_version,
        "kind": "LibvirtVM",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "hypervisorSelector": {"matchLabels": {"capfleet.dev/test": namespace}},
            "vcpus": 1,
            "memoryMiB": 192,
            "disks": [{"name": "root", "sizeGiB": 1, "sourceImage": BASE_IMAGE}],
            "interfaces": [{"userMode": True, "macAddress": "52:54:00:12:34:56"}],
            "cloudInit": {"userDataSecretRef": {"name": f"{name}-bootstrap"}},
            **spec,
        },
    }


def user_data(name: str, callback_port: int) -> str:
    return f"#cloud-config\n# capfleet-callback: http://10.0.2.2:{callback_port}/{name}\nhostname: {name}\n"


async def create_vm(
    kube: Kube,
    namespace: str,
    name: str,
    callback_port: int,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> None:
    """The VM's bootstrap Secret (user-data calling back to `callback_port`) and the LibvirtVM."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-bootstrap", "labels": {USER_DATA_LABEL: "true"}},
        "data": {"value": b64(user_data(name, callback_port))},
    }
    await kube.create(resources.SECRETS, secret, namespace)
    await kube.create(VMS, vm_body(name, namespace, annotations, **spec), namespace)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == type_:
            return dict(found)
    return None


async def wait_condition(
    kube: Kube,
    resource: Any,
    name: str,
    namespace: str | None,
    type_: str,
    status: str,
    within: float = 60,
    reason: str | None = None,
) -> dict[str, Any]:
    """The object once its condition `type_` has `status` (and `reason`, when given)."""

    async def probe() -> dict[str, Any] | None:
        obj = await kube.get(resource, name, namespace)
        found = condition(obj, type_)
        if found is None or found["status"] != status:
            return None
        return obj if reason is None or found.get("reason") == reason else None

    return await eventually(f"{name} {type_}={status} {reason or ''}".rstrip(), probe, within)


async def delete_all(kube: Kube, namespace: str, hypervisor_names: list[str]) -> None:
    """Delete the namespace's VMs and wait until they are gone, then the Hypervisor objects."""
    for vm in await kube.list(VMS, namespace):
        await kube.delete(VMS, vm["metadata"]["name"], namespace)

    async def gone() -> bool:
        return not await kube.list(VMS, namespace)

    await eventually("the VMs to be deleted", gone, 60)
    for name in hypervisor_names:
        await kube.delete(HYPERVISORS, name)


def precreate_volume(hv: Hypervisor, name: str, capacity: int, fmt: str) -> None:
    conn = hv.connect()
    try:
        xml = (
            f"<volume><name>{name}</name><capacity unit='bytes'>{capacity}</capacity>"
            f"<target><format type='{fmt}'/></target></volume>"
        )
        conn.storagePoolLookupByName(hv.pool_name).createXML(xml, 0)
    finally:
        conn.close()


def remove_volume(hv: Hypervisor, name: str) -> None:
    conn = hv.connect()
    try:
        conn.storagePoolLookupByName(hv.pool_name).storageVolLookupByName(name).delete(0)
    finally:
        conn.close()
