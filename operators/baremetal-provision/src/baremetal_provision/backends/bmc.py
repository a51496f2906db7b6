"""One server's BMC behind a small Protocol (power, one boot device, facts), with a Redfish implementation
(IPMI's is in ipmi.py).

The provisioning logic deals only in `BMC` and capfleet's errors; sushy and pyghmi (synchronous) are
called off the event loop, each call timed in capfleet's backend-call histogram (backend `redfish` or
`ipmi`, operation, outcome), and `wire_error` is the one place where their exceptions become capfleet
errors, so a wrong password reads `AuthenticationFailed` everywhere and never a stack trace. Addresses
are checked before any BMC is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import sushy
from pyghmi import exceptions as ipmi_errors
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_errors

from capfleet import errors, metrics

T = TypeVar("T")
PowerState = Literal["On", "Off", "Unknown"]
BootDevice = Literal["pxe", "disk", "other"]
SYSTEMS_PREFIX = "/redfish/v1/Systems/"
IPMI_PORT = 623
# pyghmi's messages for a refused login (RAKP status codes) and for a BMC that never answered.
_IPMI_AUTH_FAILURES = ("Unauthorized name", "Incorrect password", "Invalid integrity check value")
_IPMI_TIMEOUTS = ("timeout", "Session failed to initialize", "Unable to establish")


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


def parse_address(address: str) -> Address | IpmiAddress:
    """`redfish+https://host[:port]/redfish/v1/Systems/<id>` (or `redfish+http`), or `ipmi://host[:port]`;
    raises InvalidSpec."""
    scheme, sep, rest = address.partition("://")
    if scheme == "ipmi" and sep:
        return _parse_ipmi(rest)
    if not sep or scheme not in {"redfish+https", "redfish+http"}:
        raise errors.InvalidSpec(f"unsupported BMC address scheme {scheme!r}", reason="InvalidBMCAddress")
    url = urlsplit(f"{scheme.removeprefix('redfish+')}://{rest}")
    system_id = url.path.removeprefix(SYSTEMS_PREFIX).strip("/")
    if not url.hostname or not url.path.startswith(SYSTEMS_PREFIX) or not system_id or "/" in system_id:
        raise errors.InvalidSpec(
            f"BMC address must look like {scheme}://host[:port]{SYSTEMS_PREFIX}<id>",
            reason="InvalidBMCAddress",
        )
    if url.query or url.fragment or url.username or url.password:
        raise errors.InvalidSpec(
            "BMC address must carry no query, fragment or credentials", reason="InvalidBMCAddress"
        )
    return Address(f"{url.scheme}://{url.netloc}", f"{SYSTEMS_PREFIX}{system_id}")


def _parse_ipmi(rest: str) -> IpmiAddress:
    url = urlsplit(f"ipmi://{rest}")
    try:
        port = url.port or IPMI_PORT
    except ValueError:
        port = 0
    if not url.hostname or url.path.strip("/") or url.query or url.fragment or url.username or not port:
        raise errors.InvalidSpec("BMC address must look like ipmi://host[:port]", reason="InvalidBMCAddress")
    return IpmiAddress(url.hostname, port)


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    ca_bundle: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"


def wire_error(exc: Exception, address: Address | IpmiAddress) -> errors.CapfleetError:
    """The capfleet error for a sushy (or requests) or pyghmi failure; messages never carry credentials."""
    if isinstance(address, IpmiAddress):
        return _ipmi_error(exc, f"BMC {address.url}")
    where = f"BMC {address.base_url}{address.system_path}"
    if isinstance(exc, sushy_errors.AccessError):
        return errors.BackendRejected(
            f"{where} refused the credentials (HTTP {exc.status_code})", reason="AuthenticationFailed"
        )
    if isinstance(exc, sushy_errors.ResourceNotFoundError):
        return errors.BackendRejected(f"{where}: no such system", reason="SystemNotFound")
    if isinstance(exc, sushy_errors.ConnectionError):
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSLError" in text:
            return errors.BackendRejected(
                f"{where}: TLS certificate not trusted", reason="CertificateNotTrusted"
            )
        return errors.BackendUnavailable(f"{where} is unreachable", reason="BMCUnreachable")
    if isinstance(exc, sushy_errors.ServerSideError):
        return errors.BackendUnavailable(f"{where} failed: {exc}", reason="BMCError")
    if isinstance(exc, sushy_errors.HTTPError):
        return errors.BackendRejected(f"{where} rejected the request: {exc}", reason="BMCRejected")
    if isinstance(exc, sushy_errors.SushyError):
        return errors.BackendUnavailable(f"{where}: {exc}", reason="BMCError")
    return errors.BackendUnavailable(f"{where}: {type(exc).__name__}", reason="BMCError")


def _ipmi_error(exc: Exception, where: str) -> errors.CapfleetError:
    text = str(exc)
    if isinstance(exc, ipmi_errors.PyghmiException | OSError):
        if any(failure in text for failure in _IPMI_AUTH_FAILURES):
            return errors.BackendRejected(f"{where} refused the credentials", reason="AuthenticationFailed")
        if isinstance(exc, OSError) or any(t.lower() in text.lower() for t in _IPMI_TIMEOUTS):
            return errors.BackendUnavailable(f"{where} is unreachable", reason="BMCUnreachable")
        if isinstance(exc, ipmi_errors.InvalidParameterValue | ipmi_errors.UnsupportedFunctionality):
            return errors.BackendRejected(f"{where} rejected the request: {text}", reason="BMCRejected")
        return errors.BackendUnavailable(f"{where} failed: {text}", reason="BMCError")
    return errors.BackendUnavailable(f"{where}: {type(exc).__name__}", reason="BMCError")


_POWER: dict[Any, PowerState] = {
    sushy.PowerState.ON: "On",
    sushy.PowerState.POWERING_OFF: "On",
    sushy.PowerState.OFF: "Off",
    sushy.PowerState.POWERING_ON: "Off",
}
_DEVICES: dict[Any, BootDevice] = {sushy.BootSource.PXE: "pxe", sushy.BootSource.HDD: "disk"}


class RedfishBMC:
    """`BMC` over Redfish with sushy: basic auth (session login fails on some BMCs), TLS verified unless
    `verify` is False, against `credentials.ca_bundle` when given."""

    def __init__(self, address: Address, credentials: Credentials, *, verify: bool = True) -> None:
        self._address = address
        self._ca_file: str | None = None
        verify_arg: bool | str = verify
        if verify and credentials.ca_bundle:
            handle, self._ca_file = tempfile.mkstemp(prefix="capfleet-bmc-ca-", suffix=".pem")
            with os.fdopen(handle, "w") as out:
                out.write(credentials.ca_bundle)
            verify_arg = self._ca_file
        self._connector = sushy_connector.Connector(address.base_url, verify=verify_arg)
        self._auth = sushy_auth.BasicAuth(username=credentials.username, password=credentials.password)
        self._root: Any = None

    def _system(self) -> Any:
        if self._root is None:
            self._root = sushy.Sushy(
                f"{self._address.base_url}/redfish/v1/",
                auth=self._auth,
                connector=self._connector,
                server_side_retries=1,
                server_side_retries_delay=1,
                read_timeout=30,
                connect_timeout=10,
            )
        return self._root.get_system(self._address.system_path)

    async def _call(self, operation: str, work: Callable[[Any], T]) -> T:
        def run() -> T:
            with metrics.backend_call("redfish", operation):
                try:
                    return work(self._system())
                except Exception as exc:  # mapped in one place; the original is chained
                    raise wire_error(exc, self._address) from exc

        return await asyncio.to_thread(run)

    async def facts(self) -> SystemFacts:
        def read(system: Any) -> SystemFacts:
            enabled = system.boot.enabled
            return SystemFacts(
                power_state=_POWER.get(system.power_state, "Unknown"),
                boot_device=_DEVICES.get(system.boot.target, "other"),
                boot_override=str(enabled.value if hasattr(enabled, "value") else enabled or "Disabled"),
                uuid=system.uuid,
                serial=system.serial_number,
            )

        return await self._call("facts", read)

    async def power_on(self) -> None:
        await self._call("power_on", lambda system: system.reset_system(sushy.ResetType.ON))

    async def power_off(self, *, force: bool) -> None:
        reset = sushy.ResetType.FORCE_OFF if force else sushy.ResetType.GRACEFUL_SHUTDOWN
        await self._call("power_off", lambda system: system.reset_system(reset))

    async def set_boot_device(self, device: Literal["pxe", "disk"], *, once: bool) -> None:
        target = sushy.BootSource.PXE if device == "pxe" else sushy.BootSource.HDD
        enabled = sushy.BootSourceOverrideEnabled.ONCE if once else sushy.BootSourceOverrideEnabled.CONTINUOUS
        await self._call(
            "set_boot_device", lambda system: system.set_system_boot_options(target, enabled=enabled)
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._connector.close)
        if self._ca_file:
            with contextlib.suppress(OSError):
                os.unlink(self._ca_file)


def connect(address: str, credentials: Credentials, *, verify: bool, ipmi_cipher_suite: int = 17) -> BMC:
    """The BMC at `address` (validated first; raises InvalidSpec); no request is made yet."""
    parsed = parse_address(address)
    if isinstance(parsed, IpmiAddress):
        from baremetal_provision.backends.ipmi import IpmiBMC  # ipmi.py builds on this module

        return IpmiBMC(parsed, credentials, cipher_suite=3 if ipmi_cipher_suite == 3 else 17)
    return RedfishBMC(parsed, credentials, verify=verify)
