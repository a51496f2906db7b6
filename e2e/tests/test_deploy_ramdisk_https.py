"""capfleet's deploy ramdisk fetching https:// URLs, without booting it: its initramfs is unpacked and its
own busybox and openssl run in a chroot against TLS servers on loopback. Debian's CA bundle vouches for
any https:// URL; `capfleet.ca` alone vouches for the boot server's (deploy_lib.sh's `trust_boot_ca`).
"""

from __future__ import annotations

import base64
import gzip
import os
import ssl
import stat
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from capfleet_e2e.pki import CertificateAuthority
from capfleet_images.deployramdisk.build import DeployRamdisk, ensure_deploy_ramdisk

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot into the unpacked ramdisk needs root"),
]
BODY = b"over tls\n"


@pytest.fixture(scope="module")
def ramdisk() -> DeployRamdisk:
    return ensure_deploy_ramdisk()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _tls_server(cert: Path, key: Path) -> ThreadingHTTPServer:
    """A TLS server on loopback that answers every GET with BODY."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _unpacked(ramdisk: DeployRamdisk, tree: Path) -> Path:
    """The ramdisk's initramfs unpacked at `tree`, with the /dev/null its programs need."""
    tree.mkdir()
    initramfs = gzip.decompress(ramdisk.initrd.read_bytes())
    subprocess.run(["busybox", "cpio", "-id"], input=initramfs, cwd=tree, check=True, capture_output=True)
    os.mknod(tree / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (tree / "tmp").mkdir(exist_ok=True)
    return tree


def test_https_downloads_verify_the_server_against_the_ca_bundle(
    ramdisk: DeployRamdisk, tmp_path: Path
) -> None:
    """busybox wget hands https:// to `openssl s_client`, which must find its libraries and CA bundle."""
    tree = _unpacked(ramdisk, tmp_path / "tree")
    ca = CertificateAuthority.generate("stand-in-public-ca")
    cert, key = ca.issue_serving("localhost", dns_names=["localhost"])
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server = _tls_server(tmp_path / "cert.pem", tmp_path / "key.pem")
    url = f"https://localhost:{server.server_address[1]}/f.txt"
    wget = ["chroot", str(tree), "/bin/busybox", "wget", "-q", "-O", "-", url]
    try:
        untrusted = subprocess.run(wget, capture_output=True, check=False, timeout=60)
        assert untrusted.returncode != 0
        assert not untrusted.stdout
        with (tree / "etc/ssl/certs/ca-certificates.crt").open("ab") as bundle:
            bundle.write(ca.cert_pem)
        trusted = subprocess.run(wget, capture_output=True, check=False, timeout=60)
        assert trusted.returncode == 0, trusted.stderr
        assert trusted.stdout == BODY
    finally:
        server.shutdown()
        server.server_close()


def test_the_boot_servers_own_ca_alone_vouches_for_its_https_urls(
    ramdisk: DeployRamdisk, tmp_path: Path
) -> None:
    """`capfleet.ca` makes the ramdisk's busybox wget and openssl trust the boot server's CA for its URLs,
    and only for them: another server with a certificate of that CA is refused, as is the boot server
    without the CA."""
    tree = _unpacked(ramdisk, tmp_path / "tree")
    ca = CertificateAuthority.generate("boot-ca")
    cert, key = ca.issue_serving("boot", dns_names=["localhost"])
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    boot, other = (_tls_server(tmp_path / "cert.pem", tmp_path / "key.pem") for _ in range(2))
    der = base64.b64encode(ssl.PEM_cert_to_DER_cert(ca.cert_pem.decode())).decode()

    def fetch(url: str, with_ca: bool = True) -> subprocess.CompletedProcess[bytes]:
        callback = f"https://localhost:{boot.server_address[1]}/callback/t"
        cmdline = f"capfleet.ca={der}" if with_ca else ""
        script = (
            "/bin/busybox --install -s; PATH=/usr/sbin:/usr/bin:/sbin:/bin; set -f; "
            f". /lib/capfleet/deploy_lib.sh; trust_boot_ca {callback} && wget -q -O - {url}"
        )
        argv = ["chroot", str(tree), "/bin/busybox", "sh", "-c", script]
        env = {"PATH": os.environ["PATH"], "CMDLINE": cmdline}
        return subprocess.run(argv, capture_output=True, check=False, timeout=60, env=env)

    try:
        trusted = fetch(f"https://localhost:{boot.server_address[1]}/f.txt")
        assert (trusted.returncode, trusted.stdout) == (0, BODY), trusted.stderr
        assert fetch(f"https://localhost:{other.server_address[1]}/f.txt").returncode != 0
        assert fetch(f"https://localhost:{boot.server_address[1]}/f.txt", with_ca=False).returncode != 0
    finally:
        for server in (boot, other):
            server.shutdown()
            server.server_close()
