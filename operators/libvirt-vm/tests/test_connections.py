"""The connection pool against a fake connection: reuse, replacement after failure or a changed target,
a call that gets no answer cut at the time-out, and the mapping of SSH and libvirt failures to conditions'
reasons."""

from __future__ import annotations

import threading
from typing import Any

import libvirt
import paramiko
import pytest

from capfleet import errors
from capfleet.sshlibvirt import SSHTarget
from libvirt_vm.backends import connections

TARGET = SSHTarget(host="127.0.0.1", user="u", private_key="KEY", known_hosts="", port=2222)


class FakeConnection:
    """Satisfies `connections.Connection`; `fail` makes `open` raise it."""

    opened: list[FakeConnection] = []
    fail: BaseException | None = None

    def __init__(self, target: SSHTarget) -> None:
        self.target = target
        self.conn: Any = None
        self.alive = False
        self.closed = False

    def open(self) -> Any:
        if FakeConnection.fail is not None:
            raise FakeConnection.fail
        FakeConnection.opened.append(self)
        self.alive, self.conn = True, object()
        return self.conn

    def is_alive(self) -> bool:
        return self.alive

    def close(self) -> None:
        self.alive, self.closed = False, True


class HangingConnection(FakeConnection):
    """Its calls (`wait_for_close`) return only once it is closed, as libvirt's do when the host hangs."""

    def __init__(self, target: SSHTarget) -> None:
        super().__init__(target)
        self.released = threading.Event()

    def close(self) -> None:
        super().close()
        self.released.set()


@pytest.fixture
def pool() -> connections.Pool:
    FakeConnection.opened, FakeConnection.fail = [], None
    return connections.Pool(FakeConnection)


async def test_reused_while_alive_replaced_when_dead_or_changed(pool: connections.Pool) -> None:
    first = await pool.run("hv", TARGET, lambda conn: conn)
    assert await pool.run("hv", TARGET, lambda conn: conn) is first
    FakeConnection.opened[0].alive = False
    second = await pool.run("hv", TARGET, lambda conn: conn)
    assert second is not first
    assert FakeConnection.opened[0].closed
    changed = SSHTarget(host="127.0.0.1", user="u", private_key="KEY", known_hosts="x", port=2222)
    await pool.run("hv", changed, lambda conn: conn)
    assert len(FakeConnection.opened) == 3
    await pool.close()
    assert all(c.closed for c in FakeConnection.opened)


async def test_failures_become_conditions_reasons(pool: connections.Pool) -> None:
    key = paramiko.RSAKey.generate(1024)
    cases: list[tuple[BaseException, str]] = [
        (ConnectionRefusedError(111, "Connection refused"), "Unreachable"),
        (paramiko.AuthenticationException("no"), "AuthenticationFailed"),
        (paramiko.SSHException("Server '[127.0.0.1]:2222' not found in known_hosts"), "HostKeyUnknown"),
        (paramiko.BadHostKeyException("h", key, key), "HostKeyMismatch"),
    ]
    for failure, reason in cases:
        FakeConnection.fail = failure
        with pytest.raises(errors.CapfleetError) as raised:
            await pool.run("hv", TARGET, lambda conn: conn)
        assert raised.value.reason == reason
        assert "KEY" not in raised.value.message


async def test_libvirt_errors_in_calls_are_backend_errors(pool: connections.Pool) -> None:
    def broken(conn: Any) -> None:
        raise libvirt.libvirtError("internal error")

    with pytest.raises(errors.BackendUnavailable) as raised:
        await pool.run("hv", TARGET, broken)
    assert raised.value.reason == "LibvirtError"

    def missing(conn: Any) -> None:
        raise errors.DependencyMissing("no pool", reason="PoolMissing")

    with pytest.raises(errors.DependencyMissing):
        await pool.run("hv", TARGET, missing)


async def test_a_call_without_an_answer_is_cut_at_the_timeout_and_its_connection_replaced() -> None:
    FakeConnection.opened, FakeConnection.fail = [], None
    pool = connections.Pool(HangingConnection, timeout=0.2)
    returned = threading.Event()

    def wait_for_close(conn: Any) -> None:
        hanging = FakeConnection.opened[-1]
        assert isinstance(hanging, HangingConnection)
        hanging.released.wait(30)
        returned.set()

    with pytest.raises(errors.BackendUnavailable) as raised:
        await pool.run("hv", TARGET, wait_for_close)
    assert raised.value.reason == "Unreachable"
    assert "no answer to a call in 0.2 s" in raised.value.message
    assert FakeConnection.opened[0].closed
    assert returned.wait(5), "closing the connection ended the waiting call and freed its thread"
    assert await pool.run("hv", TARGET, lambda conn: conn) is FakeConnection.opened[1].conn
