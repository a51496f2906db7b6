"""A server's BMC: addresses checked before any call, the Redfish implementation of `base.BMC`, and
`connect`, which picks Redfish or IPMI (ipmi.py) by the address.

The provisioning logic deals only in `base.BMC` and capfleet's errors; sushy and pyghmi (synchronous) are
called off the event loop, each call timed in capfleet's backend-call histogram (backend `redfish` or
`ipmi`, operation, outcome), and `wire_error` is the one place where their exceptions become capfleet
errors (the IPMI half lives with its backend), so a wrong password reads `AuthenticationFailed`
everywhere and never a stack trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import sushy
from sushy import auth as sushy_auth
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_errors

from baremetal_provision.backends.base import (
    BMC,
    IPMI_PORT,
    LANE,
    SYSTEMS_PREFIX,
    Address,
    BootDevice,
    Credentials,
    IpmiAddress,
    PowerState,
    SystemFacts,
)
from capfleet import cafiles, errors, metrics

T = TypeVar("T")


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


def wire_error(exc: Exception, address: Address | IpmiAddress) -> errors.CapfleetError:
    """The capfleet error for a sushy (or requests) or pyghmi failure; messages never carry credentials."""
    if isinstance(address, IpmiAddress):
        from baremetal_provision.backends import ipmi  # loaded with the first IPMI BMC (`connect`)

        return ipmi.wire_error(exc, address)
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


_POWER: dict[Any, PowerState] = {
    sushy.PowerState.ON: "On",
    sushy.PowerState.POWERING_OFF: "On",
    sushy.PowerState.OFF: "Off",
    sushy.PowerState.POWERING_ON: "Off",
}
_DEVICES: dict[Any, BootDevice] = {sushy.BootSource.PXE: "pxe", sushy.BootSource.HDD: "disk"}


class RedfishBMC:
    """`base.BMC` over Redfish with sushy: basic auth (session login fails on some BMCs), TLS verified unless
    `verify` is False, against `credentials.ca_bundle` when given."""

    def __init__(self, address: Address, credentials: Credentials, *, verify: bool = True) -> None:
        self._address = address
        verify_arg: bool | str = verify
        if verify and credentials.ca_bundle:
            verify_arg = cafiles.ca_file(credentials.ca_bundle)
        self._connector = sushy_connector.Connector(address.base_url, verify=verify_arg)
        self._auth = sushy_auth.BasicAuth(username=credentials.username, password=credentials.password)
        self._root: Any = None
        self._system_resource: Any = None

    def _system(self, fresh: bool) -> Any:
        """The System, read once per connection and again only where its state is wanted (`fresh`): an
        action needs only its action targets, which do not change (sushy's `get_system` reads the System
        at every call, one GET before each action)."""
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
        if self._system_resource is None:
            self._system_resource = self._root.get_system(self._address.system_path)
        elif fresh:
            self._system_resource.refresh(force=True)
        return self._system_resource

    async def _call(self, operation: str, work: Callable[[Any], T], *, fresh: bool = False) -> T:
        def run() -> T:
            with metrics.backend_call("redfish", operation):
                try:
                    return work(self._system(fresh))
                except Exception as exc:  # mapped in one place; the original is chained
                    raise wire_error(exc, self._address) from exc

        return await LANE.run(run)

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

        return await self._call("facts", read, fresh=True)

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
        await LANE.run(self._connector.close)


def connect(address: str, credentials: Credentials, *, verify: bool, ipmi_cipher_suite: int = 17) -> BMC:
    """The BMC at `address` (validated first; raises InvalidSpec); no request is made yet."""
    parsed = parse_address(address)
    if isinstance(parsed, IpmiAddress):
        # pyghmi (and the cryptography it imports, ~15 MiB resident) only in a process that has an IPMI BMC.
        from baremetal_provision.backends import ipmi

        return ipmi.IpmiBMC(parsed, credentials, cipher_suite=3 if ipmi_cipher_suite == 3 else 17)
    return RedfishBMC(parsed, credentials, verify=verify)
