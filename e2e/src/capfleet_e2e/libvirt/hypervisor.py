"""A test hypervisor as the operator sees one: a private libvirtd reached through its own sshd.

Pairs a `LibvirtDaemon` with an `Sshd` whose sessions run in the daemon's mount namespace, and offers what
tests need around it: the `SSHTarget` (or its pieces, for a Hypervisor's Secrets), a direct connection for
checks, and uploading a volume (a base image, a seed ISO) through a libvirt stream as the operator does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capfleet.sshlibvirt import SSHTarget
from capfleet_e2e.libvirt.daemon import LibvirtDaemon
from capfleet_e2e.libvirt.sshd import Sshd

REMOTE_URI = "qemu:///system"


@dataclass
class Hypervisor:
    """One running test hypervisor; `failure_domain` is a suggestion for the Hypervisor resource."""

    name: str
    failure_domain: str
    daemon: LibvirtDaemon
    sshd: Sshd

    @property
    def pool_name(self) -> str:
        return self.daemon.pool_name

    def ssh_target(self, known_hosts: str | None = None) -> SSHTarget:
        """How to reach this hypervisor's libvirtd over SSH (with a different known_hosts if given)."""
        return SSHTarget(
            host=self.sshd.host,
            port=self.sshd.port,
            user=self.sshd.user,
            private_key=self.sshd.client_private_key,
            known_hosts=self.sshd.known_hosts if known_hosts is None else known_hosts,
            remote_uri=REMOTE_URI,
        )

    def connect(self) -> Any:
        """A direct local libvirt connection (not over SSH), for set-up and assertions."""
        return self.daemon.connect()

    def stop(self) -> None:
        self.sshd.close()
        self.daemon.stop()


def start_hypervisor(
    name: str,
    failure_domain: str | None = None,
    pool_size_mib: int | None = None,
    netns: str | None = None,
    reaper: bool = False,
) -> Hypervisor:
    """Start a private libvirtd and an sshd in front of it; stop both with `Hypervisor.stop()`.

    With `netns`, libvirtd (and so its VMs' bridged NICs) lives in that network namespace, while sshd stays
    on the host's loopback: the operator reaches the hypervisor as usual, the guests only each other. With
    `reaper`, its QEMUs stay in the caller's process tree (`LibvirtDaemon`).
    """
    daemon = LibvirtDaemon(name, pool_size_mib=pool_size_mib, netns=netns, reaper=reaper).start()
    try:
        sshd = Sshd(name, mount_namespace=lambda: daemon.namespace_pid).start()
    except BaseException:
        daemon.stop()
        raise
    return Hypervisor(name=name, failure_domain=failure_domain or f"fd-{name}", daemon=daemon, sshd=sshd)


def upload_volume(conn: Any, pool_name: str, name: str, source: Path | bytes, fmt: str = "raw") -> Any:
    """Create volume `name` in the pool and fill it through a libvirt stream; returns the `virStorageVol`."""
    data = source.read_bytes() if isinstance(source, Path) else source
    pool = conn.storagePoolLookupByName(pool_name)
    xml = (
        f"<volume><name>{name}</name><capacity unit='bytes'>{len(data)}</capacity>"
        f"<target><format type='{fmt}'/></target></volume>"
    )
    vol = pool.createXML(xml, 0)
    stream = conn.newStream(0)
    vol.upload(stream, 0, len(data), 0)
    view = memoryview(data)
    for start in range(0, len(data), 1 << 20):
        stream.send(view[start : start + (1 << 20)].tobytes())
    stream.finish()
    return vol
