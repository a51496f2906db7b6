"""pytest fixtures: a real NetBox per test, behind a proxy that injects faults.

- `netbox`: an empty real NetBox (4.4.10 unless parametrized indirectly, e.g.
  `@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)`), reached through a
  `NetboxProxy` of its own; `faults` makes it slow, failing or gone. Each release runs once per session
  (real.py); between tests its database is replaced by a fresh copy.
- `real_netboxes`: the session's running releases (`get(version)` starts one on first use).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet.netbox import Connection
from capfleet.netboxsetup import setup
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.netbox.client import NetboxClient
from capfleet_e2e.netbox.faults import Fault, LoggedRequest
from capfleet_e2e.netbox.proxy import NetboxProxy
from capfleet_e2e.netbox.real import RealNetbox, start_real_netbox
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE, RELEASES, ensure_release, parse_version
from capfleet_e2e.netbox.seed import Seeded, apply_seed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetboxFaults:
    """Fault injection and the request log of the proxy a test talks to (see faults.py)."""

    server: NetboxProxy

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
    client: NetboxClient = field(repr=False)
    faults: NetboxFaults = field(repr=False)
    v2_token: str | None = field(default=None, repr=False)
    read_only_token: str | None = field(default=None, repr=False)

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


def instance_behind(proxy: NetboxProxy, netbox: RealNetbox) -> NetboxInstance:
    tokens = netbox.tokens
    return NetboxInstance(
        url=proxy.url,
        token=tokens.read_write,
        version=netbox.version,
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
    """An empty NetBox for this test: a real release behind a proxy of its own."""
    version: str = getattr(request, "param", None) or DEFAULT_RELEASE
    if version not in RELEASES:
        raise ValueError(f"the harness runs NetBox {', '.join(RELEASES)}, not {version}")
    real = real_netboxes.get(version)
    real.reset()
    proxy = NetboxProxy(real.url, static=real.static).start()
    try:
        yield instance_behind(proxy, real)
    finally:
        proxy.stop()
