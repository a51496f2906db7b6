"""DHCP for the PXE network: dnsmasq inside the namespace, on its bridge only, from the configuration
capfleet ships for real provisioning networks (deploy/pxe/dnsmasq.conf), rendered with the lab's values.

QEMU's iPXE ROM (Debian's ipxe-qemu) sends user class `iPXE` (option 175) and speaks HTTP, so the shipped
file's iPXE branch gives it `http://<bridge address>:8080/boot.ipxe` directly; the TFTP chain-loading branch
for firmware PXE ROMs serves Debian's `ipxe` binaries from a TFTP root the lab fills (`TFTP_FILES`), which
the harness fetches over TFTP to prove. What only the lab needs is on the command line: DNS answers one
name, the boot front's (`BOOT_HOST`, the bridge's address: busybox wget in the deploy ramdisk verifies TLS
only for names), and nothing else; no router is announced (nothing is routed anywhere), and IPv6 router
advertisements for the bridge's ULA prefix are on, which ends iPXE's IPv6 autoconfiguration wait at once. The
log (with --log-dhcp) and the lease file go to the artifacts directory.

Each server gets its address reserved by MAC (`reserve`, a file in dnsmasq's `--dhcp-hostsdir`, read as it
appears), as Ironic's dnsmasq does for the nodes it provisions: several servers booting at once otherwise race
for one offered address, and iPXE does not start over after the losing DHCPNAK. The reservation ignores the
client identifier, so the OS a server boots later keeps the same address.
"""

from __future__ import annotations

import shutil
import string
from pathlib import Path
from typing import Self

from capfleet_e2e.baremetal.netns import BOOT_HOST, PxeNetwork
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.processes import Component, wait_for

START_TIMEOUT = 20.0
BOOT_SCRIPT = "boot.ipxe"
SHIPPED_CONFIG = Path("deploy/pxe/dnsmasq.conf")
IPXE_DIR = Path("/usr/lib/ipxe")
TFTP_FILES = ("ipxe.efi", "undionly.kpxe")
"""The chain-loaders the shipped configuration names, from Debian's `ipxe` package."""


def placeholders(template: str) -> set[str]:
    """The `${VAR}` names a configuration template uses (what a site must set)."""
    return {m.group("braced") for m in string.Template.pattern.finditer(template) if m.group("braced")}


def render(template: str, values: dict[str, str]) -> str:
    """The template with every `${VAR}` set, as `envsubst` would; a variable left unset is an error."""
    missing = placeholders(template) - values.keys()
    if missing:
        raise KeyError(f"dnsmasq.conf needs {sorted(missing)}")
    return string.Template(template).substitute(values)


class PxeDnsmasq:
    """dnsmasq serving DHCP on `network`'s bridge; `boot_url` is what iPXE clients are told to fetch."""

    def __init__(self, network: PxeNetwork, boot_path: str = BOOT_SCRIPT):
        self.network = network
        self.boot_url = network.http_url(boot_path)
        self.log_path = network.log_dir / "dnsmasq-dhcp.log"
        self.lease_file = network.log_dir / "dnsmasq.leases"
        self.hosts_dir = network.root / "dhcp-hosts"
        self.tftp_root = network.root / "tftp"
        self.config_path = network.root / "dnsmasq.conf"
        self.process: Component | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def site_values(self) -> dict[str, str]:
        """The shipped configuration's variables, as a site would set them, for the lab's network."""
        net = self.network
        hosts = list(net.network.hosts())
        return {
            "PXE_INTERFACE": net.bridge,
            "DHCP_RANGE_START": str(hosts[99]),  # .100 - .200
            "DHCP_RANGE_END": str(hosts[199]),
            "DHCP_NETMASK": str(net.network.netmask),
            "DHCP_LEASE_TIME": "1h",
            "BOOT_URL": self.boot_url,
            "TFTP_ROOT": str(self.tftp_root),
            "DHCP_HOSTS_DIR": str(self.hosts_dir),
        }

    def config(self) -> str:
        return render((repo_root() / SHIPPED_CONFIG).read_text(), self.site_values())

    def argv(self) -> list[str]:
        net = self.network
        return [
            "dnsmasq", "--keep-in-foreground", f"--conf-file={self.config_path}",
            f"--host-record={BOOT_HOST},{net.address}",
            "--no-resolv", "--no-hosts", "--user=root", "--group=root",
            "--dhcp-option=option:router",  # empty: no default route for the guests
            "--enable-ra", f"--dhcp-range=::,constructor:{net.bridge},ra-only,64",
            f"--ra-param={net.bridge},10,0",  # router lifetime 0: not a default router either
            "--log-dhcp", f"--log-facility={self.log_path}",
            f"--dhcp-leasefile={self.lease_file}", f"--pid-file={net.root / 'dnsmasq.pid'}",
        ]  # fmt: skip

    def reserve(self, mac: str, address: str) -> None:
        """Give `mac` always `address` (whatever client identifier it sends)."""
        entry = self.hosts_dir / mac.replace(":", "-")
        entry.with_suffix(".tmp").write_text(f"{mac},id:*,{address}\n")
        entry.with_suffix(".tmp").rename(entry)

    def release(self, mac: str) -> None:
        (self.hosts_dir / mac.replace(":", "-")).unlink(missing_ok=True)

    def start(self) -> Self:
        self.network.log_dir.mkdir(parents=True, exist_ok=True)
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        self.tftp_root.mkdir(parents=True, exist_ok=True)
        for name in TFTP_FILES:
            shutil.copyfile(IPXE_DIR / name, self.tftp_root / name)
        self.config_path.write_text(self.config())
        process = Component("dnsmasq", self.network.exec_argv(self.argv()), self.network.log_dir)
        self.process = process
        wait_for("dnsmasq", self._ready, START_TIMEOUT, [process])
        return self

    def _ready(self) -> bool | None:
        try:
            return True if "DHCP, IP range" in self.log_path.read_text(errors="replace") else None
        except FileNotFoundError:
            return None

    def leases(self) -> dict[str, str]:
        """Current leases: MAC address -> IPv4 address."""
        try:
            lines = self.lease_file.read_text().splitlines()
        except FileNotFoundError:
            return {}
        return {f[1]: f[2] for f in (line.split() for line in lines) if len(f) >= 3}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
