"""The private PXE network: a network namespace created by the test run, a bridge in it, and a relay.

Bare-metal test servers must really DHCP and network-boot, but test traffic may go only to loopback or to
addresses that exist only inside a namespace the test created. So the PXE network is a fresh namespace
(`capfleet-pxe-<random>`) holding only `lo` and a bridge with 172.30.<n>.1/24 and a ULA IPv6 address (for
router advertisements, which spare iPXE a long IPv6 wait); libvirtd runs inside it (daemon.py's `netns`),
so the VMs' tap devices join that bridge. There is no veth, no route and no forwarding out of it.

HTTP from the guests (iPXE scripts, kernel, seed, callbacks) goes to `http://<bridge address>:8080/`,
where a relay (relay.py) hands each connection through a UNIX socket to a host relay connected to
127.0.0.1:<port> chosen with `forward_http_to`, e.g. the operator's HTTP server, or with `serve_boot_front`
to baremetal-provision's boot front, which relays to the operator's UNIX socket as in its Deployment (the
front runs with no environment but PATH: no kubeconfig, no credentials). The other way round,
`expose` gives a 127.0.0.1 port whose connections reach a guest's address and port inside the namespace
(a workload cluster's API server, say), through the same kind of relay pair.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.pki import CertificateAuthority, write_private
from capfleet_e2e.processes import Component, free_port, wait_for

BRIDGE = "pxebr0"
BOOT_HOST = "boot.pxe.capfleet.test"
"""The boot front's name on the lab network (the lab's DNS answers it with the bridge's address)."""
HTTP_PORT = 8080
START_TIMEOUT = 20.0


def relay_listening(relay: Component) -> bool | None:
    """Whether a relay (relay.py) has said it listens: what to wait for before using it."""
    return True if "relay: listening" in relay.log_path.read_text(errors="replace") else None


@dataclass
class BootFront:
    """A boot front on the lab network: the socket it relays to, and its TLS base URL and CA, if any."""

    socket: Path
    tls_url: str | None = None
    ca_file: Path | None = None

    def operator_env(self) -> dict[str, str]:
        """baremetal-provision's settings to answer behind this front."""
        env = {"CAPFLEET_BOOT_SOCKET": str(self.socket)}
        if self.tls_url and self.ca_file:
            env |= {"CAPFLEET_BOOT_TLS_URL": self.tls_url, "CAPFLEET_BOOT_TLS_CA_FILE": str(self.ca_file)}
        return env


def _serving(front: Component) -> bool | None:
    """Whether the front's server is up (aiohttp logs nothing when it is: the front says so first)."""
    return True if "relaying the boot routes" in front.log_path.read_text(errors="replace") else None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class PxeNetwork:
    """One namespace with its bridge; `start()`/`stop()` (or `with`) create and remove everything."""

    def __init__(self, subnet: int | None = None, log_dir: Path | None = None):
        self.name = f"capfleet-pxe-{secrets.token_hex(4)}"
        n = subnet if subnet is not None else 1 + secrets.randbelow(254)
        self.network = ipaddress.IPv4Network(f"172.30.{n}.0/24")
        self.address = self.network.network_address + 1
        ula = f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{n:x}::/64"  # a random unique local prefix
        self.ipv6_network = ipaddress.IPv6Network(ula)
        self.bridge = BRIDGE
        self.http_port = HTTP_PORT
        self.log_dir = log_dir or artifacts_dir() / "baremetal" / self.name
        self.root = Path(tempfile.mkdtemp(prefix="capfleet-pxe-"))
        self.root.chmod(0o700)
        self.http_socket = self.root / "http.sock"
        self._created = False
        self._ns_relay: Component | None = None
        self._host_relay: Component | None = None
        self._front: Component | None = None
        self._fronts = 0
        self._exposed: dict[tuple[str, int], tuple[int, list[Component]]] = {}
        self._published: list[Component] = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def exec_argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def http_url(self, path: str = "") -> str:
        """A URL the guests use to reach the host-side HTTP server chosen with `forward_http_to`."""
        return f"http://{self.address}:{self.http_port}/{path.lstrip('/')}"

    def start(self) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _ip("netns", "add", self.name)
        self._created = True
        try:
            self._configure()
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self) -> None:
        ns = ["-n", self.name]
        subprocess.run(
            self.exec_argv(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0"]),
            check=True,
            capture_output=True,
        )
        _ip(*ns, "link", "set", "lo", "up")
        _ip(*ns, "link", "add", self.bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        _ip(*ns, "addr", "add", f"{self.address}/{self.network.prefixlen}", "dev", self.bridge)
        v6 = f"{self.ipv6_network.network_address + 1}/{self.ipv6_network.prefixlen}"
        _ip(*ns, "addr", "add", v6, "dev", self.bridge, "nodad")
        _ip(*ns, "link", "set", self.bridge, "up")
        self._start_ns_relay()

    def _start_ns_relay(self) -> None:
        if self._ns_relay is not None:
            return
        argv = [sys.executable, "-m", "capfleet_e2e.baremetal.relay"]
        listen = f"tcp:{self.address}:{self.http_port}"
        self._ns_relay = Component(
            "relay-pxe", self.exec_argv([*argv, listen, f"unix:{self.http_socket}"]), self.log_dir
        )
        relay = self._ns_relay
        wait_for("the PXE network's HTTP relay", lambda: relay_listening(relay), START_TIMEOUT, [relay])

    def _stop_ns_relay(self) -> None:
        if self._ns_relay is not None:
            self._ns_relay.stop()
            self._ns_relay = None

    def forward_http_to(self, port: int, host: str = "127.0.0.1", via: Sequence[str] = ()) -> None:
        """Relay the guests' HTTP connections to `host`:`port` from now on (replacing any earlier one),
        connecting from the host, or from wherever the argv prefix `via` runs the relay (another
        namespace: a management node's boot Service)."""
        self._stop_host_relay()
        self._start_ns_relay()
        self.http_socket.unlink(missing_ok=True)
        argv = [*via, sys.executable, "-m", "capfleet_e2e.baremetal.relay"]
        relay = Component(
            "relay-host", [*argv, f"unix:{self.http_socket}", f"tcp:{host}:{port}"], self.log_dir
        )
        self._host_relay = relay
        wait_for("the host HTTP relay", lambda: relay_listening(relay), START_TIMEOUT, [relay])

    def publish(self, lab_port: int, port: int) -> str:
        """The host's 127.0.0.1:`port` at `lab_port` of the lab's address (not HTTP_PORT), for as long as
        the network lives; returns its URL base, e.g. a file server's."""
        socket_path = self.root / f"publish-{lab_port}.sock"
        argv = [sys.executable, "-m", "capfleet_e2e.baremetal.relay"]
        inside = Component(
            f"relay-pxe-{lab_port}",
            self.exec_argv([*argv, f"tcp:{self.address}:{lab_port}", f"unix:{socket_path}"]),
            self.log_dir,
        )
        self._published.append(inside)
        wait_for(f"the relay at port {lab_port}", lambda: relay_listening(inside), START_TIMEOUT, [inside])
        outside = Component(
            f"relay-host-{lab_port}", [*argv, f"unix:{socket_path}", f"tcp:127.0.0.1:{port}"], self.log_dir
        )
        self._published.append(outside)
        wait_for(
            f"the host relay of port {lab_port}", lambda: relay_listening(outside), START_TIMEOUT, [outside]
        )
        return f"http://{self.address}:{lab_port}"

    def serve_boot_front(self, tls: bool = False) -> BootFront:
        """Serve the guests' HTTP with a boot front (`baremetal_provision.front`) from now on, in place of
        the relay: on the provisioning network itself, as in production, so it sees each guest's address.
        With `tls`, it also serves https:// on port 443 with a certificate for `BOOT_HOST` from a CA made
        for this network. Returns what the operator needs to sit behind it (files cross the
        namespace, packets do not)."""
        self._stop_host_relay()
        self._stop_ns_relay()
        self._fronts += 1
        front = BootFront(self.root / f"boot-{self._fronts}.sock")
        env = {
            "CAPFLEET_BOOT_LISTEN": f"{self.address}:{self.http_port}",
            "CAPFLEET_BOOT_UPSTREAM": str(front.socket),
        }
        if tls:
            ca = CertificateAuthority.generate(f"{self.name}-boot-ca")
            cert, key = ca.issue_serving("boot", dns_names=[BOOT_HOST])
            front.ca_file = self.root / "boot-ca.crt"
            front.ca_file.write_bytes(ca.cert_pem)
            (self.root / "boot-tls.crt").write_bytes(cert)
            write_private(self.root / "boot-tls.key", key)
            front.tls_url = f"https://{BOOT_HOST}"
            env |= {
                "CAPFLEET_BOOT_TLS_LISTEN": f"{self.address}:443",
                "CAPFLEET_BOOT_TLS_CERT_FILE": str(self.root / "boot-tls.crt"),
                "CAPFLEET_BOOT_TLS_KEY_FILE": str(self.root / "boot-tls.key"),
            }
        argv = self.exec_argv([sys.executable, "-m", "baremetal_provision.front"])
        process = Component(f"boot-front-{self._fronts}", argv, self.log_dir, env, inherit_env=False)
        self._front = process
        wait_for("the boot front", lambda: _serving(process), 3 * START_TIMEOUT, [process])
        return front

    def expose(self, host: str, port: int) -> int:
        """A 127.0.0.1 port relayed to `host`:`port` inside the namespace (the same one for repeated calls).

        Connections are made lazily, one per client connection, so the guest need not be up yet.
        """
        if (host, port) in self._exposed:
            return self._exposed[(host, port)][0]
        socket_path = self.root / f"expose-{len(self._exposed)}.sock"
        loopback = free_port()
        argv = [sys.executable, "-m", "capfleet_e2e.baremetal.relay"]
        label = f"{host.replace(':', '_')}-{port}"
        inside = Component(
            f"relay-in-{label}",
            self.exec_argv([*argv, f"unix:{socket_path}", f"tcp:{host}:{port}"]),
            self.log_dir,
        )
        relays = [inside]
        self._exposed[(host, port)] = (loopback, relays)
        wait_for(f"the relay to {host}:{port}", lambda: relay_listening(inside), START_TIMEOUT, [inside])
        outside = Component(
            f"relay-out-{label}", [*argv, f"tcp:127.0.0.1:{loopback}", f"unix:{socket_path}"], self.log_dir
        )
        relays.append(outside)
        wait_for(
            f"the loopback relay to {host}:{port}", lambda: relay_listening(outside), START_TIMEOUT, [outside]
        )
        return loopback

    def _stop_host_relay(self) -> None:
        if self._host_relay is not None:
            self._host_relay.stop()
            self._host_relay = None
        if self._front is not None:
            self._front.stop()
            self._front = None

    def stop(self) -> None:
        """Stop the relays and delete the namespace (with its bridge); safe to call twice."""
        self._stop_host_relay()
        for _, relays in self._exposed.values():
            for relay in relays:
                relay.stop()
        self._exposed.clear()
        for relay in self._published:
            relay.stop()
        self._published.clear()
        self._stop_ns_relay()
        if self._created:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "delete", self.name)
            self._created = False
        shutil.rmtree(self.root, ignore_errors=True)
