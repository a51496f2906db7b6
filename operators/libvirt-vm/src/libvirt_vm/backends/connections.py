"""Pooled SSH libvirt connections, one per Hypervisor, re-established after failures.

Opening a connection costs an SSH handshake and a libvirt login, so each Hypervisor keeps one, shared by
every reconcile (libvirt connections are thread-safe). The pool lives in the operator-wide memo, created
at startup. A connection that is no longer alive, or whose target (keys, address) changed, is replaced on
the next call. Every call runs in a worker thread; wire errors become capfleet errors here, in one place.
Error messages never contain the private key: only paramiko's and libvirt's own messages are kept.

A libvirt client waits for an answer for ever, and a worker thread cannot be cancelled: a hypervisor that
stops answering mid-call would hold the connection, the VM's lock and so its deletion, with no end. So
opening and every call are bounded (`timeout`); past it the connection is closed under the waiting call,
which makes that call fail and frees its thread, and the reconcile fails with a retry like any outage.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from capfleet import errors, lanes, lean_imports
from capfleet.sshlibvirt import SSHLibvirtConnection, SSHLibvirtError, SSHTarget

if TYPE_CHECKING:
    import libvirt
    import paramiko
else:
    libvirt = lean_imports.lazy("libvirt")
    paramiko = lean_imports.lazy("paramiko")

T = TypeVar("T")
LANE = lanes.Lane("libvirt", threads=8)
"""The threads libvirt and SSH calls run in, for all hypervisors: at most eight calls at once."""


def load_bindings() -> None:
    """Load libvirt and paramiko (lazy until a hypervisor is first reached) on the event loop's thread,
    before a worker thread needs them: modules first imported in a worker thread leave their allocations
    in that thread's malloc arena (first imported in a worker thread, libvirt-vm measured 117 MiB resident
    once idle in the hybrid suite, over its 115 MiB budget; loaded here, the next run passed; one run
    each)."""
    _ = libvirt.VIR_DOMAIN_RUNNING, paramiko.SSHClient


class Connection(Protocol):
    """What the pool needs of a connection: `SSHLibvirtConnection` satisfies it."""

    conn: Any

    def open(self) -> Any: ...

    def is_alive(self) -> bool: ...

    def close(self) -> None: ...


Opener = Callable[[SSHTarget], Connection]


def translate(exc: BaseException, where: str) -> errors.CapfleetError:
    """The capfleet error for a failure talking to hypervisor `where`."""
    if isinstance(exc, errors.CapfleetError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return errors.BackendRejected(
            f"{where}: host key does not match known_hosts; connection refused", reason="HostKeyMismatch"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return errors.BackendRejected(
            f"{where}: SSH authentication failed: {exc}", reason="AuthenticationFailed"
        )
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
        return errors.BackendRejected(f"{where}: host key unknown: {exc}", reason="HostKeyUnknown")
    if isinstance(exc, paramiko.SSHException | OSError | socket.timeout | EOFError | SSHLibvirtError):
        return errors.BackendUnavailable(f"{where}: unreachable: {exc}", reason="Unreachable")
    if isinstance(exc, libvirt.libvirtError):
        return errors.BackendUnavailable(f"{where}: libvirt: {exc}", reason="LibvirtError")
    return errors.BackendUnavailable(f"{where}: {type(exc).__name__}: {exc}", reason="Unreachable")


TIMEOUT = 60.0
"""Seconds an open or a call may take: many times what any call here needs on a loaded host (the largest
is a seed upload, kilobytes), yet short enough that a hung host fails a deletion visibly and soon."""


class Pool:
    """One live connection per hypervisor name."""

    def __init__(self, opener: Opener = SSHLibvirtConnection, timeout: float = TIMEOUT) -> None:
        self._opener = opener
        self.timeout = timeout
        self._connections: dict[str, tuple[SSHTarget, Connection]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _connection(self, name: str, target: SSHTarget) -> Connection:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            found = self._connections.get(name)
            if found is not None:
                known_target, connection = found
                if known_target == target and await LANE.run(connection.is_alive):
                    return connection
                del self._connections[name]
                await LANE.run(connection.close)
            load_bindings()
            connection = self._opener(target)
            try:
                await self._bounded(name, connection, "opening", connection.open)
            except BaseException as exc:
                raise translate(exc, name) from exc
            self._connections[name] = (target, connection)
            return connection

    async def run(self, name: str, target: SSHTarget, call: Callable[[Any], T]) -> T:
        """`call(virConnect)` in a worker thread on hypervisor `name`'s pooled connection."""
        connection = await self._connection(name, target)
        try:
            return await self._bounded(name, connection, "a call", lambda: call(connection.conn))
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise translate(exc, name) from exc

    async def _bounded(self, name: str, connection: Connection, what: str, work: Callable[[], T]) -> T:
        """`work()` in a worker thread, or BackendUnavailable once it has taken `timeout` seconds, the
        connection closed under it (and dropped from the pool)."""
        try:
            return await asyncio.wait_for(LANE.run(work), self.timeout)
        except TimeoutError:
            found = self._connections.get(name)
            if found is not None and found[1] is connection:
                del self._connections[name]
            await LANE.run(connection.close)
            message = f"{name}: no answer to {what} in {self.timeout:g} s; connection closed"
            raise errors.BackendUnavailable(message, reason="Unreachable") from None

    async def forget(self, name: str) -> None:
        """Close and drop the hypervisor's connection (it was deleted)."""
        found = self._connections.pop(name, None)
        if found is not None:
            await LANE.run(found[1].close)

    async def close(self) -> None:
        for name in list(self._connections):
            await self.forget(name)
