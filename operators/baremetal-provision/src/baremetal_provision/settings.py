"""baremetal-provision's own options, read once at startup (by `capfleet.runtime.run`) from environment
variables; a bad value stops the operator before any handler runs.

`CAPFLEET_BOOT_LISTEN` (host:port) is where the HTTP server for iPXE, seeds and callbacks listens, unless
`CAPFLEET_BOOT_SOCKET` names a UNIX socket to listen on instead: then a boot front (`python -m
baremetal_provision.front`, a process without credentials) faces the network and relays to it;
`CAPFLEET_BOOT_URL` is the base URL the servers use to reach it (an instance's `spec.bootServerURL` overrides
it); `CAPFLEET_BOOT_TLS_URL` (https://, with `CAPFLEET_BOOT_TLS_CA_FILE`, the PEM of the CA that signed the
front's certificate) is where the deploy ramdisk reaches the boot front over TLS instead, for its seed, image
and callbacks; `CAPFLEET_BOOT_FILES_DIR`, when set, is served under `/files/` (installer kernels and initrds
next to the operator, as Ironic's HTTP root); `CAPFLEET_DEPLOY_RAMDISK_DIR`, when set, is served under
`/deploy/` and must hold the deploy ramdisk's `vmlinuz` and `initrd.img` (what `make deploy-ramdisk` builds),
unless `CAPFLEET_DEPLOY_KERNEL_URL` and `CAPFLEET_DEPLOY_INITRD_URL` say where else servers fetch them;
`CAPFLEET_IMAGE_CACHE_DIR`, when set, turns on the image cache: servers fetch their image from the operator,
which downloads it once per checksum (verified) and keeps it there, so a provisioning network needs no route
to the image's URL, up to `CAPFLEET_IMAGE_CACHE_MAX_GIB` (least recently served images evicted), fetching
only from `CAPFLEET_IMAGE_SOURCE_CIDRS` when set (comma-separated networks) and never from loopback,
link-local or its own addresses otherwise; `CAPFLEET_BMC_SHUTDOWN_SECONDS` is how long a graceful
shutdown may take before the power is cut; `CAPFLEET_BMC_POWER_WAIT_SECONDS` how long a power change is
waited for; `CAPFLEET_IPMI_CIPHER_SUITE` (17 or 3) is the cipher suite proposed to IPMI BMCs first (3 for
BMCs that cannot negotiate 17, such as virtualbmc); `CAPFLEET_TOKEN_KEY_NAMESPACE` is where the Secret holding
the key of every boot token lives (`tokenkey`), by default the operator's own namespace.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from capfleet import reconciling
from capfleet.reconciling import setting

DEFAULT_LISTEN_HOST = "0.0.0.0"


def split_listen(value: str) -> tuple[str, int]:
    """`host:port` (the host may be empty: all addresses) → (host, port); ValueError when not."""
    host, _, port = value.strip().rpartition(":")
    number = int(port)
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} out of range")
    return host or DEFAULT_LISTEN_HOST, number


def _listen(value: str) -> str:
    split_listen(value)
    return value.strip()


def listen_setting() -> Any:
    """`CAPFLEET_BOOT_LISTEN`, as the operator and the boot front read it."""
    return setting(f"{DEFAULT_LISTEN_HOST}:8081", parse=_listen)


def _tls_url(value: str) -> str:
    url = urlsplit(value.strip())
    if url.scheme != "https" or not url.hostname:
        raise ValueError("must be an https:// URL")
    # The ramdisk's busybox wget checks an IP address with the port appended ("-verify_ip 10.0.0.1:443"),
    # which never matches a certificate: it can verify names only.
    if _is_address(url.hostname):
        raise ValueError("must name the boot front by a host name, not an IP address")
    return value.strip().rstrip("/")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _cipher_suite(value: str) -> int:
    if value.strip() not in {"3", "17"}:
        raise ValueError("must be 3 or 17")
    return int(value)


@dataclass(frozen=True)
class BaremetalSettings(reconciling.Settings):
    boot_listen: str = listen_setting()
    boot_socket: str | None = None
    boot_url: str | None = None
    boot_tls_url: str | None = setting(None, parse=_tls_url)
    boot_tls_ca_file: str | None = None
    files_dir: str | None = setting(None, env="CAPFLEET_BOOT_FILES_DIR")
    deploy_ramdisk_dir: str | None = None
    deploy_kernel_url: str | None = None
    deploy_initrd_url: str | None = None
    image_cache_dir: str | None = None
    image_cache_max_gib: float = setting(16.0, env="CAPFLEET_IMAGE_CACHE_MAX_GIB")
    image_source_cidrs: str = setting("", env="CAPFLEET_IMAGE_SOURCE_CIDRS")
    shutdown_seconds: float = setting(60.0, env="CAPFLEET_BMC_SHUTDOWN_SECONDS")
    power_wait_seconds: float = setting(30.0, env="CAPFLEET_BMC_POWER_WAIT_SECONDS")
    ipmi_cipher_suite: int = setting(17, parse=_cipher_suite)
    token_key_namespace: str | None = None

    def __post_init__(self) -> None:
        if bool(self.boot_tls_url) != bool(self.boot_tls_ca_file):
            raise ValueError("CAPFLEET_BOOT_TLS_URL and CAPFLEET_BOOT_TLS_CA_FILE go together")

    def deploy_ramdisk(self, base: str) -> tuple[str, str]:
        """The deploy ramdisk's kernel and initrd URLs: as configured, else served under `base`/deploy/."""
        return (
            self.deploy_kernel_url or f"{base}/deploy/vmlinuz",
            self.deploy_initrd_url or f"{base}/deploy/initrd.img",
        )

    @property
    def listen_host(self) -> str:
        return split_listen(self.boot_listen)[0]

    @property
    def listen_port(self) -> int:
        return split_listen(self.boot_listen)[1]
