"""Blocking libvirt operations on one hypervisor connection (`virConnect`), each idempotent.

Called through `connections.Pool.run`, which runs them in a worker thread, so none of them ever blocks
kopf's event loop. Each step finds what an earlier attempt made (by deterministic name) before creating
anything, and removes what it created when it fails half-way, so retries never leave a second domain or
an orphan volume behind.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capfleet import errors, lean_imports
from libvirt_vm.placing import BASE_IMAGE_NOT_OFFERED

if TYPE_CHECKING:
    import libvirt
else:
    libvirt = lean_imports.lazy("libvirt")

GIB = 1 << 30
_CHUNK = 1 << 20
STATES = {0: "nostate", 1: "running", 2: "blocked", 3: "paused", 4: "shutdown", 5: "shutoff", 6: "crashed"}


@dataclass(frozen=True)
class HostFacts:
    libvirt_version: str
    qemu_version: str
    vcpus: int
    memory_mib: int
    storage_gib: int
    kvm: bool


@dataclass(frozen=True)
class DomainInfo:
    uuid: str
    state: str
    active: bool
    xml: str


def _version(number: int) -> str:
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _pool(conn: Any, pool_name: str) -> Any:
    try:
        pool = conn.storagePoolLookupByName(pool_name)
    except libvirt.libvirtError as e:
        raise errors.DependencyMissing(f"storage pool {pool_name} not found", reason="PoolMissing") from e
    if not pool.isActive():
        raise errors.DependencyMissing(f"storage pool {pool_name} is not active", reason="PoolInactive")
    return pool


def facts(conn: Any, pool_name: str) -> HostFacts:
    """Versions and capacity of the host and its storage pool."""
    info = conn.getInfo()
    pool = _pool(conn, pool_name)
    refresh_pool(pool)
    return HostFacts(
        libvirt_version=_version(conn.getLibVersion()),
        qemu_version=_version(conn.getVersion()),
        vcpus=int(info[2]),
        memory_mib=int(info[1]),
        storage_gib=int(pool.info()[1] // GIB),
        kvm=kvm_offered(conn),
    )


def kvm_offered(conn: Any) -> bool:
    """Whether the host offers KVM guests (its capabilities list a kvm domain type)."""
    capabilities: str = conn.getCapabilities()
    return "type='kvm'" in capabilities or 'type="kvm"' in capabilities


def refresh_pool(pool: Any) -> None:
    """Re-read the pool's volumes and sizes from its storage. libvirt refuses while any volume of the pool is
    being built (a VM's disk cloned, say: hundreds at once in a burst), with no error code of its own; then
    what the pool last read stands, which the next refresh corrects."""
    try:
        pool.refresh(0)
    except libvirt.libvirtError as e:
        if "asynchronous jobs" not in str(e):
            raise


def _lookup_volume(pool: Any, name: str) -> Any | None:
    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError:
        return None


def _volume_xml(name: str, size: int, fmt: str, backing: tuple[str, str] | None = None) -> str:
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "bytes"}).text = str(size)
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", {"type": fmt})
    if backing is not None:
        store = ET.SubElement(volume, "backingStore")
        ET.SubElement(store, "path").text = backing[0]
        ET.SubElement(store, "format", {"type": backing[1]})
    return ET.tostring(volume, encoding="unicode")


def _format_of(volume: Any) -> str:
    found = ET.fromstring(volume.XMLDesc(0)).find("target/format")
    return found.get("type", "raw") if found is not None else "raw"


def _delete_quietly(volume: Any) -> None:
    with contextlib.suppress(libvirt.libvirtError):
        volume.delete(0)


@dataclass(frozen=True)
class Clone:
    """What a disk is cloned from: a base image volume, how, and whether the hypervisor offers it."""

    image: str
    strategy: str
    offered: Callable[[str], bool]


def ensure_disk(conn: Any, pool_name: str, name: str, size_gib: int, source: Clone | None) -> str:
    """The path of volume `name` (qcow2, `size_gib`), cloned from `source` if given; created if missing,
    and cloned only from an image the hypervisor offers (`spec.baseImages`)."""
    pool = _pool(conn, pool_name)
    existing = _lookup_volume(pool, name)
    size = size_gib * GIB
    if existing is not None:
        if int(existing.info()[1]) < size:  # cloned, then killed before the resize
            existing.resize(size, 0)
        return str(existing.path())
    if source is None:
        return str(pool.createXML(_volume_xml(name, size, "qcow2"), 0).path())
    if not source.offered(source.image):
        raise errors.DependencyMissing(
            f"the Hypervisor does not offer base image {source.image}: an administrator lists what VMs may "
            "clone in its spec.baseImages",
            reason=BASE_IMAGE_NOT_OFFERED,
        )
    base = _lookup_volume(pool, source.image)
    if base is None:
        raise errors.DependencyMissing(
            f"base image volume {source.image} not found in pool {pool_name}", reason="BaseImageMissing"
        )
    base_size = int(base.info()[1])
    if base_size > size:
        raise errors.InvalidSpec(f"disk {name} ({size_gib} GiB) is smaller than base image {source.image}")
    if source.strategy == "BackingFile":
        xml = _volume_xml(name, size, "qcow2", (str(base.path()), _format_of(base)))
        return str(pool.createXML(xml, 0).path())
    volume = pool.createXMLFrom(_volume_xml(name, base_size, "qcow2"), base, 0)
    try:
        if int(volume.info()[1]) < size:
            volume.resize(size, 0)
    except BaseException:
        _delete_quietly(volume)
        raise
    return str(volume.path())


def ensure_seed(
    conn: Any, pool_name: str, name: str, data: bytes, current: Callable[[bytes], bool] | None = None
) -> str:
    """The path of raw volume `name` holding `data`, uploaded through a libvirt stream if missing, or
    again when `current` (given the volume's bytes) says what is there is not the seed wanted: in place
    when it fits, the rest zeroed, so nothing of the old seed stays on the disk (a running QEMU keeps a
    deleted file's blocks alive for as long as it runs)."""
    pool = _pool(conn, pool_name)
    existing = _lookup_volume(pool, name)
    if existing is not None:
        if current is None or current(_content(conn, existing)):
            return str(existing.path())
        capacity = int(existing.info()[1])
        if capacity >= len(data):
            _upload(conn, existing, data + bytes(capacity - len(data)))
            return str(existing.path())
        _upload(conn, existing, bytes(capacity))
        existing.delete(0)
    volume = pool.createXML(_volume_xml(name, len(data), "raw"), 0)
    try:
        _upload(conn, volume, data)
    except BaseException:
        _delete_quietly(volume)
        raise
    return str(volume.path())


def _upload(conn: Any, volume: Any, data: bytes) -> None:
    stream = conn.newStream(0)
    volume.upload(stream, 0, len(data), 0)
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK):
        stream.send(view[start : start + _CHUNK].tobytes())
    stream.finish()


def _content(conn: Any, volume: Any) -> bytes:
    """The volume's bytes, through a libvirt stream (for small volumes: seeds)."""
    stream = conn.newStream(0)
    volume.download(stream, 0, int(volume.info()[1]), 0)
    chunks: list[bytes] = []
    while chunk := stream.recv(_CHUNK):
        chunks.append(chunk)
    stream.finish()
    return b"".join(chunks)


def domain_states(conn: Any) -> dict[str, tuple[str, str]] | None:
    """Every domain's UUID and state by name, in one call (libvirt's bulk stats; a domain's name and UUID
    come with it, without a call of their own); None where the host refuses that call, and the VMs there
    are then re-checked in full."""
    try:
        listed = conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0)
    except libvirt.libvirtError:
        return None
    return {
        domain.name(): (domain.UUIDString(), STATES.get(stats["state.state"], str(stats["state.state"])))
        for domain, stats in listed
    }


def find_domain(conn: Any, name: str) -> DomainInfo | None:
    try:
        domain = conn.lookupByName(name)
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise
    state = domain.state()[0]
    active = bool(domain.isActive())
    return DomainInfo(domain.UUIDString(), STATES.get(state, str(state)), active, domain.XMLDesc(0))


def define(conn: Any, xml: str) -> DomainInfo:
    domain = conn.defineXML(xml)
    found = find_domain(conn, domain.name())
    assert found is not None
    return found


def set_power(conn: Any, name: str, on: bool) -> None:
    """Start or hard-stop the domain, if it is not already in that state."""
    domain = conn.lookupByName(name)
    if on and not domain.isActive():
        domain.create()
    elif not on and domain.isActive():
        domain.destroy()


def remove(conn: Any, name: str, pool_name: str, volume_prefix: str) -> None:
    """Destroy and undefine the domain, then delete every volume of the pool starting with the prefix."""
    with contextlib.suppress(libvirt.libvirtError):
        domain = conn.lookupByName(name)
        if domain.isActive():
            domain.destroy()
        domain.undefine()
    if find_domain(conn, name) is not None:
        raise errors.BackendUnavailable(f"domain {name} could not be removed", reason="DomainNotRemoved")
    pool = _pool(conn, pool_name)
    refresh_pool(pool)
    for volume in pool.listAllVolumes(0):
        if volume.name().startswith(volume_prefix):
            volume.delete(0)
