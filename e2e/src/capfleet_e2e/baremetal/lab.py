"""The bare-metal lab: PXE network + dnsmasq + a libvirtd inside the namespace + the Redfish emulator.

Started in that order and stopped in reverse, each part even if another failed, so a test run leaves no
namespace, bridge, daemon or domain behind. `define_servers` adds `BareMetalServer`s to it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Self

from capfleet_e2e.baremetal.dnsmasq import PxeDnsmasq
from capfleet_e2e.baremetal.netns import PxeNetwork
from capfleet_e2e.baremetal.redfish import RedfishEmulator
from capfleet_e2e.baremetal.servers import (
    DEFAULT_SHAPE,
    BareMetalServer,
    Shape,
    define_server,
    remove_server,
    server_mac,
)
from capfleet_e2e.libvirt.daemon import LibvirtDaemon


class PxeLab:
    """Everything bare-metal tests need around their servers; `network.forward_http_to(port)` points the
    guests' HTTP (`network.http_url(...)`, dnsmasq's `boot.ipxe` URL included) at a host loopback port."""

    def __init__(self, name: str = "bm") -> None:
        self.name = name
        self.network = PxeNetwork()
        self.dnsmasq = PxeDnsmasq(self.network)
        self.daemon = LibvirtDaemon(
            f"{name}-{self.network.name}", log_dir=self.network.log_dir / "libvirt", netns=self.network.name
        )
        self.emulator = RedfishEmulator(self.daemon.uri, log_dir=self.network.log_dir)
        self._stops: list[Callable[[], None]] = []
        self._counter = itertools.count(1)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        try:
            for part in (self.network, self.dnsmasq, self.daemon, self.emulator):
                self._stops.append(part.stop)
                part.start()
        except BaseException:
            self.stop()
            raise
        return self

    def define_servers(
        self, count: int, prefix: str = "bm", shape: Shape = DEFAULT_SHAPE
    ) -> list[BareMetalServer]:
        """Define `count` powered-off servers (see servers.py); `remove_servers` undefines them."""
        servers = []
        conn = self.daemon.connect()
        try:
            for _ in range(count):
                index = next(self._counter)
                name = f"{prefix}-{index}"
                mac = server_mac(self.network.network.network_address.packed[2], index)
                self.dnsmasq.reserve(mac, self.server_address(index))
                serial_log = self.network.log_dir / "serial" / f"{name}.log"
                bridge = self.network.bridge
                defined = define_server(conn, self.daemon.pool_name, name, mac, bridge, serial_log, shape)
                servers.append(
                    BareMetalServer(
                        name=name,
                        uuid=defined.uuid,
                        mac=mac,
                        redfish_url=self.emulator.system_url(defined.uuid),
                        username=self.emulator.username,
                        password=self.emulator.password,
                        ca_cert=self.emulator.ca_cert,
                        serial_log=serial_log,
                        disk_path=defined.disk_path,
                    )
                )
        finally:
            conn.close()
        return servers

    def server_address(self, index: int) -> str:
        """Server `index`'s DHCP address: .100 + index % 100, inside dnsmasq's range (.100-.200)."""
        return str(self.network.network.network_address + 100 + index % 100)

    def address_of(self, server: BareMetalServer) -> str:
        """The address dnsmasq gives `server` (its reservation)."""
        entry = self.dnsmasq.hosts_dir / server.mac.replace(":", "-")
        return entry.read_text().strip().split(",")[-1]

    def remove_servers(self, servers: list[BareMetalServer]) -> None:
        conn = self.daemon.connect()
        try:
            for server in servers:
                remove_server(conn, self.daemon.pool_name, server.name)
                self.dnsmasq.release(server.mac)
        finally:
            conn.close()

    def stop(self) -> None:
        while self._stops:
            stop = self._stops.pop()
            with contextlib.suppress(Exception):
                stop()
