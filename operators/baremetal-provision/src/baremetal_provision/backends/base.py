"""What every BMC backend shares: the `BMC` Protocol the provisioning logic drives, and the plain types
its backends (Redfish in bmc.py, IPMI in ipmi.py) both speak.

Kept apart from both so that neither backend imports the other for its types, and so that the pure
phase logic can read `SystemFacts` without importing sushy or pyghmi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from capfleet import lanes

PowerState = Literal["On", "Off", "Unknown"]
BootDevice = Literal["pxe", "disk", "other"]
SYSTEMS_PREFIX = "/redfish/v1/Systems/"
IPMI_PORT = 623
LANE = lanes.Lane("bmc", threads=16)
"""The threads both backends call BMCs in: at most sixteen calls of the operator in flight at once."""


@dataclass(frozen=True)
class SystemFacts:
    """What the BMC reports about the server."""

    power_state: PowerState
    boot_device: BootDevice
    boot_override: str
    """`Disabled`, `Once` or `Continuous` (a "Once" may stick as "Continuous" on real BMCs)."""
    uuid: str | None = None
    serial: str | None = None


class BMC(Protocol):
    """Power and boot control of one server. Every method raises `capfleet.errors.CapfleetError`:
    `BackendRejected` (reason AuthenticationFailed, SystemNotFound, ...) when only a fix helps,
    `BackendUnavailable` when the BMC is unreachable or failing."""

    async def facts(self) -> SystemFacts:
        """The server's power state and boot override, read fresh."""
        ...

    async def power_on(self) -> None: ...

    async def power_off(self, *, force: bool) -> None:
        """Ask the OS to shut down (`force=False`, may be ignored) or cut the power (`force=True`)."""
        ...

    async def set_boot_device(self, device: Literal["pxe", "disk"], *, once: bool) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Address:
    """A parsed Redfish BMC address: where the service lives and which system it is."""

    base_url: str
    system_path: str


@dataclass(frozen=True)
class IpmiAddress:
    """A parsed IPMI (RMCP+, UDP) BMC address."""

    host: str
    port: int = IPMI_PORT

    @property
    def url(self) -> str:
        return f"ipmi://{self.host}:{self.port}"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    ca_bundle: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"
