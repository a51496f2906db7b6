"""The libvirt test harness works end to end: over SSH (paramiko, verified host key) to each of two private
libvirtd instances, a TCG VM boots the test image, reads its NoCloud seed and reports it on its serial
console and by calling back to a loopback HTTP server; a wrong known_hosts entry is refused."""

from __future__ import annotations

import io
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import libvirt
import paramiko
import pycdlib
import pytest

from capfleet.sshlibvirt import SSHLibvirtConnection
from capfleet_e2e.callbacks import Callbacks
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.libvirt.bootdisk import boot_disk
from capfleet_e2e.libvirt.hypervisor import Hypervisor, upload_volume
from capfleet_e2e.libvirt.image import TestImage, seed_from_serial
from capfleet_e2e.libvirt.sshd import generate_ed25519
from capfleet_e2e.processes import wait_for

pytestmark = pytest.mark.integration

BOOT_TIMEOUT = 60.0


def cidata_iso(files: dict[str, bytes]) -> bytes:
    """A NoCloud seed: ISO 9660 labelled `cidata`, names kept by Rock Ridge and Joliet."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    for name, data in files.items():
        short = re.sub(r"[^A-Z0-9]", "", name.upper())[:8]
        iso.add_fp(io.BytesIO(data), len(data), f"/{short}.;1", rr_name=name, joliet_path=f"/{name}")
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


def domain_xml(
    name: str, image: TestImage, seed_path: str, serial_log: Path, root_disk: str | None = None
) -> str:
    """A TCG domain with the seed as a CD-ROM and user networking that boots the test image directly,
    or from `root_disk` (a qcow2 volume made by bootdisk.py) if given."""
    if root_disk is None:
        boot = f"<kernel>{image.kernel}</kernel><initrd>{image.initrd}</initrd>"
        boot += f"<cmdline>{image.cmdline}</cmdline>"
        disk = ""
    else:
        boot = "<boot dev='hd'/>"
        disk = (
            "<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>"
            f"<source file='{root_disk}'/><target dev='vda' bus='virtio'/></disk>"
        )
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    {boot}
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    {disk}
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='{seed_path}'/>
      <target dev='hdc' bus='ide'/>
      <readonly/>
    </disk>
    <interface type='user'><model type='virtio'/></interface>
    <serial type='file'><source path='{serial_log}'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>"""


@pytest.fixture
def callbacks() -> Iterator[Callbacks]:
    server = Callbacks()
    yield server
    server.close()


def boot_and_check(hv: Hypervisor, image: TestImage, callbacks: Callbacks, workdir: Path) -> dict[str, float]:
    """Boot a VM on `hv` through SSH; return timings. Leaves no domain and no volume behind."""
    name = f"harness-{hv.name}"
    seed = {
        "user-data": (
            f"#cloud-config\n# capfleet-callback: http://10.0.2.2:{callbacks.port}/{hv.name}\n"
            f"# capfleet-poweroff\nhostname: {name}\n"
        ).encode(),
        "meta-data": f"instance-id: {name}\nlocal-hostname: {name}\nprovider-id: capfleet://{hv.name}/{name}\n".encode(),
        "network-config": b"version: 2\nethernets:\n  eth0:\n    dhcp4: true\n",
    }
    serial_log = workdir / f"{name}-serial.log"
    timings: dict[str, float] = {}
    with SSHLibvirtConnection(hv.ssh_target()) as conn:
        assert conn.getHostname()
        vol = upload_volume(conn, hv.pool_name, f"{name}-cidata.iso", cidata_iso(seed))
        dom = conn.defineXML(domain_xml(name, image, vol.path(), serial_log))
        try:
            started = time.monotonic()
            dom.create()
            wait_for(f"{name} to call back", lambda: callbacks.received.get(f"/{hv.name}"), BOOT_TIMEOUT)
            timings["callback_s"] = time.monotonic() - started
            wait_for(f"{name} to power off", lambda: True if not dom.isActive() else None, BOOT_TIMEOUT)
            timings["poweroff_s"] = time.monotonic() - started
        finally:
            if dom.isActive():
                dom.destroy()
            dom.undefine()
            vol.delete(0)
        assert not [d.name() for d in conn.listAllDomains(0)]
        assert not [v.name() for v in conn.storagePoolLookupByName(hv.pool_name).listAllVolumes(0)]
    log = serial_log.read_text(errors="replace")
    assert seed_from_serial(log) == seed, log
    report = callbacks.received[f"/{hv.name}"].decode()
    assert f"provider-id: capfleet://{hv.name}/{name}" in report
    assert seed_from_serial(report) == seed
    uptimes = re.findall(r"capfleet-testimage: done \(uptime ([0-9.]+)\)", log)
    timings["guest_uptime_s"] = float(uptimes[-1])
    return timings


def test_vms_boot_on_both_hypervisors_over_ssh(
    hypervisors: list[Hypervisor], test_image: TestImage, callbacks: Callbacks
) -> None:
    assert len({hv.daemon.socket_path for hv in hypervisors}) == len(hypervisors) == 2
    workdir = Path(tempfile.mkdtemp(prefix="harness-", dir=artifacts_dir() / "libvirt"))
    results = {hv.name: boot_and_check(hv, test_image, callbacks, workdir) for hv in hypervisors}
    (workdir / "boot-times.txt").write_text(f"{results}\n")
    print(f"boot times: {results}")
    for timings in results.values():
        assert timings["callback_s"] < BOOT_TIMEOUT


def test_instances_are_isolated(hypervisors: list[Hypervisor]) -> None:
    """A domain defined on one hypervisor does not exist on the other."""
    first, second = hypervisors
    xml = (
        "<domain type='qemu'><name>only-on-first</name><memory>65536</memory>"
        "<os><type>hvm</type></os></domain>"
    )
    conn_a, conn_b = first.connect(), second.connect()
    try:
        dom = conn_a.defineXML(xml)
        try:
            assert "only-on-first" not in [d.name() for d in conn_b.listAllDomains(0)]
            with pytest.raises(libvirt.libvirtError):
                conn_b.lookupByName("only-on-first")
        finally:
            dom.undefine()
    finally:
        conn_a.close()
        conn_b.close()


def test_wrong_host_key_is_refused_before_authentication(hypervisors: list[Hypervisor]) -> None:
    hv = hypervisors[0]
    _, other_key = generate_ed25519()
    wrong = f"[{hv.sshd.host}]:{hv.sshd.port} {other_key}\n"
    log_path = hv.sshd.process.log_path if hv.sshd.process else None
    assert log_path is not None
    accepted_before = log_path.read_text().count("Accepted publickey")
    with pytest.raises(paramiko.BadHostKeyException):
        SSHLibvirtConnection(hv.ssh_target(known_hosts=wrong)).open()
    assert log_path.read_text().count("Accepted publickey") == accepted_before
    # An unknown host (no known_hosts entry at all) is refused too.
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        SSHLibvirtConnection(hv.ssh_target(known_hosts="")).open()


def test_vm_boots_the_test_image_from_a_disk_volume(
    hypervisors: list[Hypervisor], test_image: TestImage
) -> None:
    """The boot-disk form, uploaded over SSH as a base image volume would be, boots and reads its seed."""
    hv = hypervisors[1]
    name = "harness-disk"
    seed = {"user-data": b"#cloud-config\n", "meta-data": f"instance-id: {name}\n".encode()}
    serial_log = Path(tempfile.mkdtemp(prefix="harness-", dir=artifacts_dir() / "libvirt")) / "serial.log"
    with SSHLibvirtConnection(hv.ssh_target()) as conn:
        root = upload_volume(
            conn, hv.pool_name, f"{name}-root.qcow2", boot_disk(test_image, "qcow2"), "qcow2"
        )
        iso = upload_volume(conn, hv.pool_name, f"{name}-cidata.iso", cidata_iso(seed))
        dom = conn.defineXML(domain_xml(name, test_image, iso.path(), serial_log, root_disk=root.path()))
        try:
            started = time.monotonic()
            dom.create()

            def reported() -> bool | None:
                text = serial_log.read_text(errors="replace") if serial_log.exists() else ""
                return True if "capfleet-testimage: done" in text else None

            wait_for(f"{name} to report its seed", reported, BOOT_TIMEOUT)
            print(f"boot from disk to report: {time.monotonic() - started:.1f}s")
        finally:
            dom.destroy()
            dom.undefine()
            root.delete(0)
            iso.delete(0)
    assert seed_from_serial(serial_log.read_text(errors="replace")) == seed
