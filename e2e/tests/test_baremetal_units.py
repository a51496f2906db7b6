"""Units of the bare-metal harness that need no namespace or VM: the relay, dnsmasq's arguments, the
servers' domain XML, and the network boot image's /init."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from capfleet_e2e.baremetal.dnsmasq import SHIPPED_CONFIG, PxeDnsmasq, placeholders, render
from capfleet_e2e.baremetal.netboot import netboot_init
from capfleet_e2e.baremetal.netns import PxeNetwork
from capfleet_e2e.baremetal.servers import domain_xml, server_mac
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.processes import Component, free_port, wait_for


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_relay_chain_reaches_loopback_server(tmp_path: Path, http_port: int) -> None:
    """tcp -> unix -> tcp, as between the PXE namespace and the host (here both on the host's loopback)."""
    sock, port = tmp_path / "http.sock", free_port()
    argv = [sys.executable, "-m", "capfleet_e2e.baremetal.relay"]
    relays = [
        Component("relay-host", [*argv, f"unix:{sock}", f"tcp:127.0.0.1:{http_port}"], tmp_path),
        Component("relay-ns", [*argv, f"tcp:127.0.0.1:{port}", f"unix:{sock}"], tmp_path),
    ]
    try:

        def get() -> bytes | None:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(b"GET /boot.ipxe HTTP/1.0\r\n\r\n")
                data = b""
                while chunk := conn.recv(4096):
                    data += chunk
            return data or None

        reply = wait_for("a reply through the relays", get, 20.0, relays)
        assert reply.startswith(b"HTTP/1.0 200")
        assert reply.endswith(b"hello /boot.ipxe")
    finally:
        for relay in relays:
            relay.stop()


def test_dnsmasq_runs_the_shipped_configuration_confined_to_the_bridge() -> None:
    network = PxeNetwork(subnet=42, log_dir=Path("/nonexistent"))
    try:
        dnsmasq = PxeDnsmasq(network)
        argv, config = dnsmasq.argv(), dnsmasq.config().splitlines()
    finally:
        network.stop()
    assert f"--conf-file={dnsmasq.config_path}" in argv
    assert "--host-record=boot.pxe.capfleet.test,172.30.42.1" in argv  # the one name DNS answers
    assert "--no-resolv" in argv  # and nothing else
    assert "--dhcp-option=option:router" in argv  # no default route
    assert "interface=pxebr0" in config
    assert "bind-interfaces" in config
    assert "dhcp-range=172.30.42.100,172.30.42.200,255.255.255.0,1h" in config
    assert "dhcp-boot=tag:ipxe,http://172.30.42.1:8080/boot.ipxe" in config
    assert "dhcp-match=set:ipxe,175" in config
    assert f"tftp-root={dnsmasq.tftp_root}" in config


def test_the_shipped_dnsmasq_configuration_needs_every_variable_set() -> None:
    template = (repo_root() / SHIPPED_CONFIG).read_text()
    assert placeholders(template) == {
        "PXE_INTERFACE", "DHCP_RANGE_START", "DHCP_RANGE_END", "DHCP_NETMASK", "DHCP_LEASE_TIME",
        "BOOT_URL", "TFTP_ROOT", "DHCP_HOSTS_DIR",
    }  # fmt: skip
    with pytest.raises(KeyError, match="BOOT_URL"):
        render(template, dict.fromkeys(placeholders(template) - {"BOOT_URL"}, "x"))
    assert "${" not in render(template, dict.fromkeys(placeholders(template), "x"))


def test_server_domain_network_boots_first() -> None:
    mac = server_mac(42, 3)
    assert mac == "52:54:00:ca:2a:03"
    xml = ET.fromstring(domain_xml("bm-3", mac, "pxebr0", "/pool/bm-3.raw", Path("/logs/bm-3.log")))
    assert [b.get("dev") for b in xml.findall("os/boot")] == ["network", "hd"]
    assert xml.find("features/acpi") is not None
    nic = xml.find("devices/interface")
    assert nic is not None
    assert nic.get("type") == "bridge"
    assert nic.find("source").get("bridge") == "pxebr0"  # type: ignore[union-attr]
    assert nic.find("mac").get("address") == mac  # type: ignore[union-attr]
    assert xml.find("devices/serial/source").get("path") == "/logs/bm-3.log"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cmdline", "seed"),
    [
        (
            "quiet ds=nocloud-net;s=http://172.30.1.1:8080/seed/t/ capfleet.poweroff",
            "http://172.30.1.1:8080/seed/t/",
        ),
        ("ds=nocloud;seedfrom=http://h/x/", "http://h/x/"),
        ("capfleet.seed=http://h/y/ ds=nocloud-net;s=http://h/z/", "http://h/y/"),
        ("console=ttyS0", ""),
    ],
)
def test_netboot_init_finds_the_seed_url(tmp_path: Path, cmdline: str, seed: str) -> None:
    """The seed-URL part of netboot_init.sh, run by sh against a fake /proc/cmdline."""
    init = netboot_init()
    part = init[init.index("arg() {") : init.index("callback=$(arg")]
    (tmp_path / "cmdline").write_text(cmdline + "\n")
    script = part.replace("/proc/cmdline", str(tmp_path / "cmdline")) + 'printf %s "$seed"\n'
    out = subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True).stdout
    assert out == seed
