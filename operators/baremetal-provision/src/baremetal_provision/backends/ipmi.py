"""`BMC` over IPMI 2.0 (RMCP+) with pyghmi: power and the boot device, nothing else.

pyghmi is synchronous and keeps its sessions in process-wide tables; every call runs in a worker thread.
One session per `IpmiBMC` is kept (pyghmi keeps it alive) until `close()`, and dropped after any failure,
so the next call logs in afresh. pyghmi files a session being set up under the credentials as given and
removes it under their UTF-8 encoding, so credentials are passed encoded, and a finished session is also
removed from that table here: otherwise the next `IpmiBMC` for the same BMC (the next reconcile) is handed
the stale, logged-out session and fails (TypeError) or waits forever.
pyghmi proposes cipher suite 17 (SHA-256) and falls back to 3 (SHA-1) only on an error reply; BMCs that
answer 17 with suite 3 (virtualbmc 3.3) then fail the login. `cipher_suite=3` skips the proposal of 17.
Failures become capfleet errors in `wire_error` here (the IPMI half of `bmc.wire_error`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pyghmi import exceptions as ipmi_errors
from pyghmi.ipmi import command as ipmi_command
from pyghmi.ipmi.private import session as ipmi_session

from baremetal_provision.backends.base import LANE, BootDevice, Credentials, IpmiAddress, SystemFacts
from capfleet import errors, metrics

T = TypeVar("T")
CipherSuite = Literal[3, 17]
_DEVICES: dict[str, BootDevice] = {"network": "pxe", "hd": "disk"}
# pyghmi's messages for a refused login (RAKP status codes) and for a BMC that never answered.
_AUTH_FAILURES = ("Unauthorized name", "Incorrect password", "Invalid integrity check value")
_TIMEOUTS = ("timeout", "Session failed to initialize", "Unable to establish")


def wire_error(exc: Exception, address: IpmiAddress) -> errors.CapfleetError:
    """The capfleet error for a pyghmi (or socket) failure; messages never carry credentials."""
    where = f"BMC {address.url}"
    text = str(exc)
    if isinstance(exc, ipmi_errors.PyghmiException | OSError):
        if any(failure in text for failure in _AUTH_FAILURES):
            return errors.BackendRejected(f"{where} refused the credentials", reason="AuthenticationFailed")
        if isinstance(exc, OSError) or any(t.lower() in text.lower() for t in _TIMEOUTS):
            return errors.BackendUnavailable(f"{where} is unreachable", reason="BMCUnreachable")
        if isinstance(exc, ipmi_errors.InvalidParameterValue | ipmi_errors.UnsupportedFunctionality):
            return errors.BackendRejected(f"{where} rejected the request: {text}", reason="BMCRejected")
        return errors.BackendUnavailable(f"{where} failed: {text}", reason="BMCError")
    return errors.BackendUnavailable(f"{where}: {type(exc).__name__}", reason="BMCError")


class _Suite3Session(ipmi_session.Session):  # type: ignore[misc]
    """A pyghmi session that proposes cipher suite 3 (HMAC-SHA1, AES-CBC-128) from the start."""

    def _initsession(self) -> None:
        super()._initsession()
        self.attemptedhash = 1


class _Command(ipmi_command.Command):  # type: ignore[misc]
    """pyghmi's `Command` over a session of our choice (its constructor hard-codes `Session`)."""

    def __init__(self, session: Any) -> None:
        # The attributes `Command.__init__` sets for a remote, synchronous session (pyghmi 1.5/1.6).
        self.onlogon = None
        self.bmc = session.bmc
        self._sdrcachedir = None
        self._sdr = None
        self._oem = None
        self._oemknown = False
        self._netchannel = None
        self._ipv6support = None
        self.certverify = None
        self.kwargs: dict[str, Any] = {}
        self.ipmi_session = session


def _encoded(value: str) -> bytes:
    return value.encode("utf-8")


def _forget(session: Any) -> None:
    """Remove a finished session from pyghmi's process-wide table of sessions being set up, so that no
    later `Session(...)` for the same BMC and credentials is handed it instead of a new one."""
    table = ipmi_session.Session.initting_sessions
    for key, value in list(table.items()):
        if value is session:
            table.pop(key, None)


class IpmiBMC:
    """`BMC` for `ipmi://host[:port]`; `cipher_suite=3` for BMCs that cannot negotiate suite 17."""

    def __init__(
        self, address: IpmiAddress, credentials: Credentials, *, cipher_suite: CipherSuite = 17
    ) -> None:
        self._address = address
        self._credentials = credentials
        self._cipher_suite = cipher_suite
        self._lock = threading.Lock()
        self._session: Any = None

    def _command(self) -> Any:
        host, port = self._address.host, self._address.port
        # As bytes: pyghmi files a session being set up under the credentials as given and removes it
        # under their encoded form; with str it is never removed, and the next session for this BMC
        # (the next reconcile) is handed that stale, logged-out object and fails or waits forever.
        user, password = _encoded(self._credentials.username), _encoded(self._credentials.password)
        if self._cipher_suite == 3:
            return _Command(_Suite3Session(bmc=host, userid=user, password=password, port=port))
        return ipmi_command.Command(bmc=host, userid=user, password=password, port=port, keepalive=False)

    async def _call(self, operation: str, work: Callable[[Any], T]) -> T:
        def run() -> T:
            with self._lock, metrics.backend_call("ipmi", operation):
                try:
                    if self._session is None:
                        self._session = self._command()
                    return work(self._session)
                except Exception as exc:  # mapped in one place; the original is chained
                    self._drop()  # the next call logs in afresh
                    raise wire_error(exc, self._address) from exc

        return await LANE.run(run)

    def _drop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # a session that is not logged out ages out on the BMC
                session.ipmi_session.logout()
            _forget(session.ipmi_session)

    async def facts(self) -> SystemFacts:
        def read(command: Any) -> SystemFacts:
            power = command.get_power().get("powerstate")
            boot = command.get_bootdev()
            device = str(boot.get("bootdev", ""))
            override = "Disabled" if device in {"", "default"} else "Continuous"
            if override != "Disabled" and not boot.get("persistent", False):
                override = "Once"
            return SystemFacts(
                power_state="On" if power == "on" else "Off" if power == "off" else "Unknown",
                boot_device=_DEVICES.get(device, "other"),
                boot_override=override,
            )

        return await self._call("facts", read)

    async def power_on(self) -> None:
        await self._call("power_on", lambda command: command.set_power("on"))

    async def power_off(self, *, force: bool) -> None:
        await self._call("power_off", lambda command: command.set_power("off" if force else "shutdown"))

    async def set_boot_device(self, device: Literal["pxe", "disk"], *, once: bool) -> None:
        target = "network" if device == "pxe" else "hd"
        await self._call("set_boot_device", lambda command: command.set_bootdev(target, persist=not once))

    async def close(self) -> None:
        def logout() -> None:
            with self._lock:
                self._drop()

        await LANE.run(logout)
