"""pytest fixtures: a real NetBox per test, behind a proxy that injects faults.

- `netbox`: an empty real NetBox (4.4.10 unless parametrized indirectly, e.g.
  `@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)`), reached through a
  `NetboxProxy` of its own; `faults` makes it slow, failing or gone. Each release runs once per session
  (real.py); between tests its database is replaced by a fresh copy. A version the harness does not
  install (releases.RELEASES) is served by the API emulator instead (server.py): NetBox 4.1, whose
  MAC-address field capfleet still supports, and 4.5 for the emulator's own tests.
- `netbox_server_factory`: start extra emulated servers with any configuration; all stopped after the test.
- `real_netboxes`: the session's running releases (`get(version)` starts one on first use).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml

from capfleet.netbox import Connection
from capfleet.netboxsetup import setup
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.netbox.client import NetboxClient
from capfleet_e2e.netbox.config import ApiToken, ServerConfig, parse_version
from capfleet_e2e.netbox.faults import Fault, Faults, LoggedRequest
from capfleet_e2e.netbox.proxy import NetboxProxy
from capfleet_e2e.netbox.real import RealNetbox, start_real_netbox
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE, RELEASES, ensure_release
from capfleet_e2e.netbox.seed import Seeded, apply_seed
from capfleet_e2e.netbox.server import NetboxTestServer

log = logging.getLogger(__name__)


class FaultySite(Protocol):
    """What fault injection needs of the site a test talks to: the proxy, or the emulator."""

    faults: Faults

    def down(self) -> None: ...

    def up(self) -> None: ...

    def outage(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class NetboxFaults:
    """Fault injection and the request log of the proxy or emulator a test talks to (see faults.py)."""

    server: FaultySite

    def fail(
        self,
        status: int = 503,
        *,
        method: str | None = None,
        path: str = "/api/",
        count: int | None = 1,
        body: Any = None,
    ) -> Fault:
        """Answer the next `count` matching requests (None: all, until clear()) with `status`."""
        fault = Fault(path_prefix=path, method=method, status=status, remaining=count)
        if body is not None:
            fault.body = body
        return self.server.faults.add(fault)

    def delay(
        self, seconds: float, *, method: str | None = None, path: str = "/api/", count: int | None = None
    ) -> Fault:
        """Hold matching requests for `seconds` before answering them."""
        return self.server.faults.add(Fault(path_prefix=path, method=method, delay=seconds, remaining=count))

    def clear(self) -> None:
        self.server.faults.clear()

    def requests(self, method: str | None = None, path: str = "") -> list[LoggedRequest]:
        return self.server.faults.requests(method, path)

    def count(self, method: str | None = None, path: str = "") -> int:
        return self.server.faults.count(method, path)

    def by_endpoint(self) -> dict[str, int]:
        return self.server.faults.by_endpoint()

    def reset_log(self) -> None:
        self.server.faults.reset_log()

    def down(self) -> None:
        """Refuse connections until up()."""
        self.server.down()

    def up(self) -> None:
        self.server.up()

    def outage(self, seconds: float) -> None:
        """Go down now, come back after `seconds`, without blocking."""
        self.server.outage(seconds)


@dataclass
class NetboxInstance:
    """The NetBox a test talks to."""

    url: str
    token: str = field(repr=False)
    version: str
    real: bool
    client: NetboxClient = field(repr=False)
    faults: NetboxFaults = field(repr=False)
    v2_token: str | None = field(default=None, repr=False)
    read_only_token: str | None = field(default=None, repr=False)
    server: NetboxTestServer | None = None  # the emulator, when it is one

    def at_least(self, version: str) -> bool:
        return parse_version(self.version) >= parse_version(version)

    def run_setup(self, *, check_only: bool = False) -> str:
        """`capfleet netbox-setup` on this NetBox, as a user runs it; its output (AssertionError unless 0).

        It runs on a thread of its own, so async tests may call it too."""
        out = io.StringIO()
        connection = Connection(url=self.url, token=self.token)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
            code = thread.submit(asyncio.run, setup(connection, check_only=check_only, out=out)).result()
        assert code == 0, f"netbox-setup exited {code}: {out.getvalue()}"
        return out.getvalue()

    def seed(self, data: dict[str, Any] | Path) -> Seeded:
        """Create objects from a seed dict or YAML file (see seed.py), through the API."""
        if isinstance(data, Path):
            data = yaml.safe_load(data.read_text()) or {}
        assert isinstance(data, dict)
        return apply_seed(self.client, data)


def config_with_tokens(version: str, **settings: Any) -> ServerConfig:
    """A config with a read-write v1 token (first), a read-only v1 token and a read-write v2 token."""
    tokens = [ApiToken.new_v1(), ApiToken.new_v1(write_enabled=False), ApiToken.new_v2()]
    return ServerConfig(version=version, tokens=tokens, **settings)


def instance_for(server: NetboxTestServer) -> NetboxInstance:
    tokens = server.config.tokens
    return NetboxInstance(
        url=server.url,
        token=server.token,
        version=server.config.version,
        real=False,
        client=NetboxClient(server.url, server.token),
        faults=NetboxFaults(server),
        server=server,
        v2_token=next((t.credential for t in tokens if t.is_v2 and t.write_enabled), None),
        read_only_token=next((t.credential for t in tokens if not t.write_enabled), None),
    )


def instance_behind(proxy: NetboxProxy, netbox: RealNetbox) -> NetboxInstance:
    tokens = netbox.tokens
    return NetboxInstance(
        url=proxy.url,
        token=tokens.read_write,
        version=netbox.version,
        real=True,
        client=NetboxClient(proxy.url, tokens.read_write),
        faults=NetboxFaults(proxy),
        v2_token=tokens.v2 if netbox.v2_tokens else None,
        read_only_token=tokens.read_only,
    )


class RealNetboxes:
    """The session's real NetBox releases, each installed (once per machine) and started on first use."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.running: dict[str, RealNetbox] = {}

    def prepare(self, versions: list[str]) -> None:
        """Install the releases not yet installed side by side: each migration keeps one core busy."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(versions) or 1) as pool:
            for done in [pool.submit(ensure_release, version, self.log_dir) for version in versions]:
                done.result()

    def get(self, version: str) -> RealNetbox:
        if version not in self.running:
            self.running[version] = start_real_netbox(ensure_release(version, self.log_dir), self.log_dir)
        return self.running[version]

    def stop(self) -> None:
        for netbox in self.running.values():
            netbox.stop()
        self.running.clear()


@pytest.fixture(scope="session")
def real_netboxes() -> Iterator[RealNetboxes]:
    log_dir = artifacts_dir() / "netbox"
    log_dir.mkdir(parents=True, exist_ok=True)
    netboxes = RealNetboxes(log_dir)
    try:
        yield netboxes
    finally:
        netboxes.stop()


@pytest.fixture
def netbox(request: pytest.FixtureRequest, real_netboxes: RealNetboxes) -> Iterator[NetboxInstance]:
    """An empty NetBox for this test: a real release behind its own proxy, or the emulator (see above)."""
    version: str = getattr(request, "param", None) or DEFAULT_RELEASE
    if version not in RELEASES:
        server = NetboxTestServer(config_with_tokens(version)).start()
        try:
            yield instance_for(server)
        finally:
            server.stop()
        return
    real = real_netboxes.get(version)
    real.reset()
    proxy = NetboxProxy(real.url).start()
    try:
        yield instance_behind(proxy, real)
    finally:
        proxy.stop()


@pytest.fixture
def netbox_server_factory() -> Iterator[Callable[..., NetboxInstance]]:
    """`start(version="4.5.0", **ServerConfig settings)` → a NetboxInstance on its own emulated server."""
    servers: list[NetboxTestServer] = []

    def start(version: str = "4.5.0", **settings: Any) -> NetboxInstance:
        server = NetboxTestServer(config_with_tokens(version, **settings)).start()
        servers.append(server)
        return instance_for(server)

    yield start
    for server in servers:
        server.stop()
