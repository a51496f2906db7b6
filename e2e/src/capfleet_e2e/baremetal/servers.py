"""Bare-metal test servers: libvirt domains that behave like physical machines behind a BMC.

Each is defined but not started: one virtio NIC on the PXE bridge (a deterministic MAC; QEMU's iPXE ROM
network-boots it), boot order network then disk (the BMC changes it through Redfish), `<acpi/>` so that a
`poweroff` in the guest powers it off, an empty disk (small and sparse; its size, serial number and the
server's memory are the `Shape`'s), and a serial console written to a file in the artifacts directory.
Tests see a `BareMetalServer`: what an operator's BaremetalInstance would be given.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import libvirt

MEMORY_MIB = 256
DISK_MIB = 64


@dataclass(frozen=True)
class Shape:
    """A server's hardware: enough to run an installer by default; a node needs more memory and disk."""

    memory_mib: int = MEMORY_MIB
    disk_mib: int = DISK_MIB
    disk_serial: str | None = None
    vcpus: int = 1


DEFAULT_SHAPE = Shape()


@dataclass(frozen=True)
class BareMetalServer:
    """One server: its BMC (Redfish System URL, credentials, CA to verify the emulator), MAC, serial log."""

    name: str
    uuid: str
    mac: str
    redfish_url: str
    username: str
    password: str
    ca_cert: Path
    serial_log: Path
    disk_path: Path

    @property
    def bmc_address(self) -> str:
        """The BMC address in a BaremetalInstance's form (`redfish+https://...`)."""
        return f"redfish+{self.redfish_url}"

    def power_state(self) -> str:
        """What the BMC reports now (`On`, `Off`), asked over Redfish with its CA, as an operator would."""
        credentials = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        request = urllib.request.Request(self.redfish_url, headers={"Authorization": f"Basic {credentials}"})
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return str(json.load(response)["PowerState"])

    def serial_output(self) -> str:
        """What the server printed on its serial console so far (all boots)."""
        try:
            return self.serial_log.read_text(errors="replace").replace("\r", "")
        except FileNotFoundError:
            return ""


def server_mac(network_index: int, index: int) -> str:
    """A locally administered MAC, stable for a given PXE network and server index."""
    return f"52:54:00:ca:{network_index & 0xFF:02x}:{index & 0xFF:02x}"


def domain_xml(
    name: str, mac: str, bridge: str, disk_path: str, serial_log: Path, shape: Shape = DEFAULT_SHAPE
) -> str:
    """A TCG domain that network-boots first, then boots from its (empty) disk."""
    serial = f"<serial>{shape.disk_serial}</serial>" if shape.disk_serial else ""
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{shape.memory_mib}</memory>
  <vcpu>{shape.vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='network'/><boot dev='hd'/></os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/><source file={quoteattr(disk_path)}/>
      <target dev='vda' bus='virtio'/>{serial}
    </disk>
    <interface type='bridge'>
      <mac address='{mac}'/><source bridge='{bridge}'/><model type='virtio'/>
    </interface>
    <serial type='file'><source path={quoteattr(str(serial_log))} append='on'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>"""


@dataclass(frozen=True)
class Defined:
    uuid: str
    disk_path: Path


def define_server(
    conn: Any,
    pool_name: str,
    name: str,
    mac: str,
    bridge: str,
    serial_log: Path,
    shape: Shape = DEFAULT_SHAPE,
) -> Defined:
    """Create the server's disk in the pool and define (not start) its domain."""
    pool = conn.storagePoolLookupByName(pool_name)
    vol = pool.createXML(
        f"<volume><name>{name}-disk.raw</name><capacity unit='MiB'>{shape.disk_mib}</capacity>"
        "<allocation>0</allocation><target><format type='raw'/></target></volume>",
        0,
    )
    serial_log.parent.mkdir(parents=True, exist_ok=True)
    dom = conn.defineXML(domain_xml(name, mac, bridge, vol.path(), serial_log, shape))
    return Defined(dom.UUIDString(), Path(vol.path()))


def remove_server(conn: Any, pool_name: str, name: str) -> None:
    """Destroy (if running) and undefine the domain, and delete its disk."""
    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError:
        dom = None
    if dom is not None:
        if dom.isActive():
            dom.destroy()
        dom.undefine()
    with contextlib.suppress(libvirt.libvirtError):
        conn.storagePoolLookupByName(pool_name).storageVolLookupByName(f"{name}-disk.raw").delete(0)
