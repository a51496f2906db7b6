"""An IPMI BMC for a test server: virtualbmc's per-domain `VirtualBMC` (pyghmi's IPMI server) in a child
process, listening on 127.0.0.1 only, on a free UDP port, with a random password.

No `vbmcd` daemon or config directory: one process per domain, driving it through the lab's libvirtd
(`libvirt_uri`). virtualbmc 3.3 answers with cipher suite 3 only: clients must force it.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

import pytest

from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.processes import Component, tail, wait_for

START_TIMEOUT = 30.0
USERNAME = "capfleet-ipmi"
READY = "vbmc-listening"
# Bound before READY is printed, so a client never talks to a port nobody listens on.
SERVER_SCRIPT = f"""
import sys
from virtualbmc.vbmc import VirtualBMC
user, password, port, domain, uri = sys.argv[1:6]
bmc = VirtualBMC(user, password, int(port), "127.0.0.1", domain, uri)
print({READY!r}, flush=True)
bmc.listen(timeout=5)
"""


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class VirtualBmc:
    """One virtualbmc server for one libvirt domain; `start()`/`stop()` or `with`."""

    def __init__(
        self,
        domain: str,
        libvirt_uri: str,
        log_dir: Path,
        username: str = USERNAME,
        password: str | None = None,
    ) -> None:
        self.domain = domain
        self.libvirt_uri = libvirt_uri
        self.log_dir = log_dir
        self.username = username
        self.password = password or secrets.token_urlsafe(12)  # IPMI passwords are at most 20 bytes
        self.port = 0
        self.process: Component | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The BMC address in a BaremetalInstance's form."""
        return f"ipmi://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_udp_port()
        argv = [sys.executable, "-c", SERVER_SCRIPT]
        argv += [self.username, self.password, str(self.port), self.domain, self.libvirt_uri]
        self.process = Component(f"vbmc-{self.domain}-{self.port}", argv, self.log_dir)
        log = self.process.log_path
        try:
            wait_for(
                "virtualbmc", lambda: True if READY in tail(log) else None, START_TIMEOUT, [self.process]
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@pytest.fixture
def ipmi_bmcs(pxe_lab: PxeLab) -> Iterator[Callable[..., VirtualBmc]]:
    """`ipmi_bmcs(server[, same_credentials=True])`: a running virtualbmc for a lab server (with the Redfish
    emulator's credentials if asked), stopped after the test."""
    started: list[VirtualBmc] = []

    def start(server: BareMetalServer, same_credentials: bool = False) -> VirtualBmc:
        credentials = {"username": server.username, "password": server.password} if same_credentials else {}
        vbmc = VirtualBmc(server.name, pxe_lab.daemon.uri, pxe_lab.network.log_dir, **credentials).start()
        started.append(vbmc)
        return vbmc

    yield start
    for vbmc in started:
        vbmc.stop()
