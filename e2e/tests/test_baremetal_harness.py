"""The bare-metal harness works end to end: through sushy-tools' Redfish emulator (HTTPS verified by the
run's CA, basic auth) a test server is set to boot from the network once and powered on; QEMU's iPXE ROM
gets DHCP from the namespace's dnsmasq, fetches `boot.ipxe` and a per-MAC script from a loopback HTTP
server (relayed into the namespace), boots the network test image, which fetches its NoCloud seed over
HTTP, calls back and powers off; a wrong password gets 401; the TFTP branch of the shipped dnsmasq
configuration serves the iPXE chain-loaders."""

from __future__ import annotations

import contextlib
import secrets
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import sushy
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector

from capfleet_e2e.baremetal.dnsmasq import IPXE_DIR, TFTP_FILES
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.libvirt.image import TestImage, seed_from_serial
from capfleet_e2e.processes import wait_for

pytestmark = pytest.mark.integration

BOOT_TIMEOUT = 90.0


@dataclass
class BootServer:
    """What the test's HTTP server saw: requests (path, query, time) and callbacks (query, body, time)."""

    files: dict[str, bytes]
    requests: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    callbacks: list[tuple[dict[str, str], bytes, float]] = field(default_factory=list)


def boot_handler(state: BootServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _query(self) -> tuple[str, dict[str, str]]:
            url = urlsplit(self.path)
            return url.path, {k: v[0] for k, v in parse_qs(url.query).items()}

        def do_GET(self) -> None:
            path, query = self._query()
            state.requests.append((path, query, time.monotonic()))
            body = state.files.get(path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            path, query = self._query()
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if path != "/callback":
                self.send_error(404)
                return
            state.callbacks.append((query, body, time.monotonic()))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def boot_http(pxe_lab: PxeLab, netboot_image: TestImage) -> Iterator[tuple[BootServer, str]]:
    """The loopback HTTP server (as an operator would run one) and the seed's token."""
    token = secrets.token_urlsafe(12)
    url = pxe_lab.network.http_url
    cmdline = " ".join(
        [
            netboot_image.cmdline,
            f"ds=nocloud-net;s={url(f'seed/{token}/')}",
            f"capfleet.callback={url('callback')}",
            "capfleet.poweroff",
        ]
    )
    state = BootServer(
        files={
            "/boot.ipxe": f"#!ipxe\nchain {url('ipxe')}?mac=${{net0/mac:hexhyp}}&uuid=${{uuid}}\n".encode(),
            "/ipxe": (f"#!ipxe\nkernel {url('kernel')} {cmdline}\ninitrd {url('initrd')}\nboot\n").encode(),
            "/kernel": netboot_image.kernel.read_bytes(),
            "/initrd": netboot_image.initrd.read_bytes(),
            f"/seed/{token}/meta-data": f"instance-id: {token}\nlocal-hostname: bm\n".encode(),
            f"/seed/{token}/user-data": b"#cloud-config\nruncmd: [echo installed]\n",
        }
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), boot_handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pxe_lab.network.forward_http_to(server.server_address[1])
    try:
        yield state, token
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def redfish(server: BareMetalServer, password: str | None = None) -> Iterator[Any]:
    """A `sushy.Sushy` client for the server's BMC, verifying TLS with the run's CA; closed on exit."""
    base = server.redfish_url.split("/redfish/v1/")[0]
    connector = sushy_connector.Connector(base, verify=str(server.ca_cert))
    basic = sushy_auth.BasicAuth(username=server.username, password=password or server.password)
    try:
        yield sushy.Sushy(f"{base}/redfish/v1/", auth=basic, connector=connector)
    finally:
        connector.close()


def test_redfish_pxe_boot_and_callback(
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    boot_http: tuple[BootServer, str],
    pxe_lab: PxeLab,
) -> None:
    state, token = boot_http
    (server,) = baremetal_servers(1)
    with redfish(server) as bmc:
        power_cycle(server, bmc.get_system(urlsplit(server.redfish_url).path), state, token)
    assert server.mac in pxe_lab.dnsmasq.leases()


def power_cycle(server: BareMetalServer, system: Any, state: BootServer, token: str) -> None:
    """One-time PXE boot and power on through Redfish, then the guest's callback and its power-off."""
    assert system.power_state == sushy.PowerState.OFF
    system.set_system_boot_options(sushy.BootSource.PXE, enabled=sushy.BootSourceOverrideEnabled.ONCE)
    system.refresh()
    assert system.boot.target == sushy.BootSource.PXE

    powered_on = time.monotonic()
    system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.ON

    def called_back() -> tuple[dict[str, str], bytes, float] | None:
        return state.callbacks[0] if state.callbacks else None

    query, body, at = wait_for("the server's callback", called_back, BOOT_TIMEOUT)
    script_at = next(t for path, _, t in state.requests if path == "/boot.ipxe")
    print(
        f"\nPXE timings: boot.ipxe {script_at - powered_on:.1f}s, callback {at - powered_on:.1f}s "
        "after the Redfish power-on"
    )
    assert query == {"mac": server.mac, "uuid": server.uuid.lower()}
    ipxe = [q for path, q, _ in state.requests if path == "/ipxe"]
    assert ipxe == [{"mac": server.mac.replace(":", "-"), "uuid": server.uuid.lower()}]
    seed = seed_from_serial(body.decode())
    assert seed["meta-data"] == state.files[f"/seed/{token}/meta-data"]
    assert seed["user-data"] == state.files[f"/seed/{token}/user-data"]

    def powered_off() -> bool | None:
        system.refresh()
        return True if system.power_state == sushy.PowerState.OFF else None

    wait_for("the server to power itself off", powered_off, 30.0)
    assert "capfleet-testimage: called back" in server.serial_output()


def test_wrong_password_is_refused(baremetal_servers: Callable[[int], list[BareMetalServer]]) -> None:
    (server,) = baremetal_servers(1)
    context = ssl.create_default_context(cafile=str(server.ca_cert))
    request = urllib.request.Request(server.redfish_url)
    request.add_header("Authorization", "Basic " + b64encode(f"{server.username}:wrong".encode()).decode())
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, context=context, timeout=10)
    err.value.close()
    assert err.value.code == 401
    with (
        pytest.raises(sushy.exceptions.AccessError),
        redfish(server, password="wrong") as bmc,
    ):
        bmc.get_system(urlsplit(server.redfish_url).path)


def test_the_shipped_dnsmasq_configuration_chain_loads_ipxe_over_tftp(pxe_lab: PxeLab) -> None:
    """The lab's dnsmasq runs deploy/pxe/dnsmasq.conf: it passes dnsmasq's own check, and a firmware PXE
    ROM's first step, fetching iPXE by TFTP from the DHCP server, gets Debian's binaries byte for byte."""
    dnsmasq, network = pxe_lab.dnsmasq, pxe_lab.network
    check = subprocess.run(
        ["dnsmasq", "--test", f"--conf-file={dnsmasq.config_path}"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    for name in TFTP_FILES:
        fetched = subprocess.run(
            network.exec_argv(
                ["curl", "--silent", "--fail", "--max-time", "20", f"tftp://{network.address}/{name}"]
            ),
            capture_output=True,
            check=True,
        ).stdout
        assert fetched == (IPXE_DIR / name).read_bytes(), name
    outside = subprocess.run(
        network.exec_argv(
            [
                "curl",
                "--silent",
                "--fail",
                "--max-time",
                "20",
                "--path-as-is",
                f"tftp://{network.address}/../dnsmasq.conf",
            ]
        ),
        capture_output=True,
    )
    assert outside.returncode != 0, "TFTP must serve nothing outside its root"
