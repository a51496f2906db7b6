"""The libvirt domain XML of a LibvirtVM, and reading back who owns a domain.

A domain carries a capfleet metadata element naming its owner (namespace and name, never the UID, which
changes on `clusterctl move`, and the instance name of the management cluster, `capfleet.instances`), so
the operator can tell its own domain from a foreign one of the same name, another management cluster's
included, before it writes anything and before it deletes anything. Built with ElementTree so that
names and paths are always escaped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from capfleet.api.libvirt import VMInterface

METADATA_NS = "https://capfleet.dev/xmlns/libvirt-vm/v1"
METADATA_PREFIX = "capfleet"
CONSOLE_LOG_DIR = "/var/log/libvirt/qemu"


@dataclass(frozen=True)
class Owner:
    namespace: str
    name: str
    instance: str | None = None
    """The management cluster's instance name; None for domains (and VMs) from before it was recorded."""


@dataclass(frozen=True)
class DiskDevice:
    """A disk volume attached to the domain, by path on the hypervisor."""

    path: str
    format: str = "qcow2"


@dataclass(frozen=True)
class DomainPlan:
    """Everything the domain XML is made from."""

    name: str
    uuid: str
    owner: Owner
    vcpus: int
    memory_mib: int
    disks: tuple[DiskDevice, ...]
    seed_path: str
    interfaces: tuple[VMInterface, ...]
    virt_type: str = "qemu"


def parse_owner(xml: str) -> Owner | None:
    """The owner named in a domain's capfleet metadata element (or whole domain XML); None if absent."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    found = root.find(f".//{{{METADATA_NS}}}owner")
    if found is None:
        return None
    namespace, name = found.get("namespace"), found.get("name")
    return Owner(namespace, name, found.get("instance") or None) if namespace and name else None


def _interface(devices: ET.Element, nic: VMInterface) -> None:
    if nic.bridge:
        element = ET.SubElement(devices, "interface", {"type": "bridge"})
        ET.SubElement(element, "source", {"bridge": nic.bridge})
    elif nic.network:
        element = ET.SubElement(devices, "interface", {"type": "network"})
        ET.SubElement(element, "source", {"network": nic.network})
    else:
        element = ET.SubElement(devices, "interface", {"type": "user"})
    ET.SubElement(element, "mac", {"address": nic.mac_address.lower()})
    ET.SubElement(element, "model", {"type": "virtio"})


# libvirt's default CPU is QEMU's qemu64: no AES-NI, PCLMULQDQ or AVX, so Go's TLS and hashing (every
# Kubernetes call) fall back to generic code. Under KVM the guest gets the host's CPU (capfleet does not
# live-migrate); under TCG everything QEMU can emulate, whose AES and carry-less multiply are host C code.
CPU_MODES = {"kvm": "host-passthrough", "qemu": "maximum"}


def domain_xml(plan: DomainPlan) -> str:
    """A domain booting from its first disk, with the seed as a CD-ROM and a serial console."""
    ET.register_namespace(METADATA_PREFIX, METADATA_NS)
    domain = ET.Element("domain", {"type": plan.virt_type})
    ET.SubElement(domain, "name").text = plan.name
    ET.SubElement(domain, "uuid").text = plan.uuid
    metadata = ET.SubElement(domain, "metadata")
    vm = ET.SubElement(metadata, f"{{{METADATA_NS}}}vm")
    owner = {"namespace": plan.owner.namespace, "name": plan.owner.name}
    if plan.owner.instance:
        owner["instance"] = plan.owner.instance
    ET.SubElement(vm, f"{{{METADATA_NS}}}owner", owner)
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = str(plan.memory_mib)
    ET.SubElement(domain, "vcpu").text = str(plan.vcpus)
    ET.SubElement(domain, "cpu", {"mode": CPU_MODES.get(plan.virt_type, "maximum")})
    os_ = ET.SubElement(domain, "os")
    ET.SubElement(os_, "type", {"arch": "x86_64", "machine": "pc"}).text = "hvm"
    ET.SubElement(os_, "boot", {"dev": "hd"})
    features = ET.SubElement(domain, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(domain, "on_poweroff").text = "destroy"
    devices = ET.SubElement(domain, "devices")
    for index, disk in enumerate(plan.disks):
        element = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
        ET.SubElement(element, "driver", {"name": "qemu", "type": disk.format})
        ET.SubElement(element, "source", {"file": disk.path})
        ET.SubElement(element, "target", {"dev": f"vd{chr(ord('a') + index)}", "bus": "virtio"})
    cdrom = ET.SubElement(devices, "disk", {"type": "file", "device": "cdrom"})
    ET.SubElement(cdrom, "driver", {"name": "qemu", "type": "raw"})
    ET.SubElement(cdrom, "source", {"file": plan.seed_path})
    ET.SubElement(cdrom, "target", {"dev": "hdc", "bus": "ide"})
    ET.SubElement(cdrom, "readonly")
    for nic in plan.interfaces:
        _interface(devices, nic)
    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    # Everything the guest prints on its console (boot, cloud-init, kubeadm) is kept on the hypervisor.
    ET.SubElement(serial, "log", {"file": f"{CONSOLE_LOG_DIR}/{plan.name}-console.log", "append": "on"})
    ET.SubElement(serial, "target", {"port": "0"})
    console = ET.SubElement(devices, "console", {"type": "pty"})
    ET.SubElement(console, "target", {"type": "serial", "port": "0"})
    ET.SubElement(devices, "memballoon", {"model": "none"})
    return ET.tostring(domain, encoding="unicode")
