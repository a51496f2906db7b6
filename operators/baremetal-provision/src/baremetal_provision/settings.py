"""baremetal-provision's own options, read once at startup from `CAPFLEET_*` environment variables.

`CAPFLEET_BOOT_LISTEN` is where the HTTP server for iPXE, seeds and callbacks listens;
`CAPFLEET_BOOT_URL` is the base URL the servers use to reach it (an instance's `spec.bootServerURL`
overrides it); `CAPFLEET_BOOT_FILES_DIR`, when set, is served under `/files/` (installer kernels and
initrds next to the operator, as Ironic's HTTP root); `CAPFLEET_BMC_SHUTDOWN_SECONDS` is how long a
graceful shutdown may take before the power is cut; `CAPFLEET_IPMI_CIPHER_SUITE` (17 or 3) is the cipher
suite proposed to IPMI BMCs first (3 for BMCs that cannot negotiate 17, such as virtualbmc).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    listen_host: str = "0.0.0.0"
    listen_port: int = 8081
    boot_url: str | None = None
    files_dir: str | None = None
    shutdown_seconds: float = 60.0
    power_wait_seconds: float = 30.0
    ipmi_cipher_suite: int = 17

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        host, _, port = environ.get("CAPFLEET_BOOT_LISTEN", "0.0.0.0:8081").rpartition(":")
        return cls(
            listen_host=host or "0.0.0.0",
            listen_port=int(port),
            boot_url=environ.get("CAPFLEET_BOOT_URL") or None,
            files_dir=environ.get("CAPFLEET_BOOT_FILES_DIR") or None,
            shutdown_seconds=float(environ.get("CAPFLEET_BMC_SHUTDOWN_SECONDS", "60")),
            power_wait_seconds=float(environ.get("CAPFLEET_BMC_POWER_WAIT_SECONDS", "30")),
            ipmi_cipher_suite=_cipher_suite(environ.get("CAPFLEET_IPMI_CIPHER_SUITE", "17")),
        )


def _cipher_suite(value: str) -> int:
    if value.strip() not in {"3", "17"}:
        raise ValueError(f"CAPFLEET_IPMI_CIPHER_SUITE must be 3 or 17, not {value!r}")
    return int(value)
