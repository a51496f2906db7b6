"""pytest fixtures: a NetBox per test, the test server by default or a real one when configured.

- `netbox`: a fresh `NetboxTestServer` per test (NetBox 4.4.0 unless parametrized indirectly, e.g.
  `@pytest.mark.parametrize("netbox", ["4.1.0", "4.6.0"], indirect=True)`), or the real NetBox named by
  CAPFLEET_NETBOX_URL and CAPFLEET_NETBOX_TOKEN. Against a real NetBox the seeding client suffixes names
  and deletes what it created afterwards, `faults` is None (fault tests skip), and a test parametrized with
  a version whose API differs from the real one (MAC objects, v2 tokens, ETags) is skipped.
- `netbox_server_factory`: start extra test servers with any configuration; all stopped after the test.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet_e2e.netbox.client import NetboxClient
from capfleet_e2e.netbox.config import DEFAULT_VERSION, ApiToken, ServerConfig, parse_version
from capfleet_e2e.netbox.faults import Fault, LoggedRequest
from capfleet_e2e.netbox.seed import Seeded, apply_seed
from capfleet_e2e.netbox.server import NetboxTestServer

REAL_URL_ENV = "CAPFLEET_NETBOX_URL"
REAL_TOKEN_ENV = "CAPFLEET_NETBOX_TOKEN"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetboxFaults:
    """Fault injection and the request log of a test server (see faults.py)."""

    server: NetboxTestServer

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
    token: str
    version: str
    real: bool
    client: NetboxClient
    faults: NetboxFaults | None = None
    server: NetboxTestServer | None = None
    v2_token: str | None = None
    read_only_token: str | None = None

    def at_least(self, version: str) -> bool:
        return parse_version(self.version) >= parse_version(version)

    def seed(self, data: dict[str, Any] | Path) -> Seeded:
        """Create objects from a seed dict or YAML file (see seed.py), through the API."""
        if isinstance(data, Path):
            data = yaml.safe_load(data.read_text()) or {}
        assert isinstance(data, dict)
        return apply_seed(self.client, data)


def config_with_tokens(version: str = DEFAULT_VERSION, **settings: Any) -> ServerConfig:
    """A config with a read-write v1 token (first), a read-only v1 token and a read-write v2 token."""
    tokens = [ApiToken.new_v1(), ApiToken.new_v1(write_enabled=False), ApiToken.new_v2()]
    return ServerConfig(version=version, tokens=tokens, **settings)


def api_features(version: str) -> tuple[bool, bool, bool]:
    """What changes the API's shape: MAC objects (4.2), v2 tokens (4.5), ETags (4.6)."""
    config = ServerConfig(version=version)
    return config.mac_address_objects, config.v2_tokens, config.etags


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


def real_netbox(requested: str | None) -> Iterator[NetboxInstance]:
    url, token = os.environ[REAL_URL_ENV], os.environ[REAL_TOKEN_ENV]
    client = NetboxClient(url, token, suffix=f"_{secrets.token_hex(3)}")
    version = client.status()["netbox-version"]
    parse_version(version)
    if requested is not None and api_features(requested) != api_features(version):
        pytest.skip(f"the real NetBox is {version}; this test needs the API of NetBox {requested}")
    yield NetboxInstance(url=url, token=token, version=version, real=True, client=client)
    errors = client.cleanup()
    if errors:
        log.warning("could not clean up the real NetBox: %s", "; ".join(errors))


@pytest.fixture
def netbox(request: pytest.FixtureRequest) -> Iterator[NetboxInstance]:
    """A NetBox for this test: the test server (fresh), or the real one from CAPFLEET_NETBOX_URL/_TOKEN."""
    requested: str | None = getattr(request, "param", None)
    if os.environ.get(REAL_URL_ENV) and os.environ.get(REAL_TOKEN_ENV):
        yield from real_netbox(requested)
        return
    server = NetboxTestServer(config_with_tokens(requested or DEFAULT_VERSION)).start()
    try:
        yield instance_for(server)
    finally:
        server.stop()


@pytest.fixture
def netbox_server_factory() -> Iterator[Callable[..., NetboxInstance]]:
    """`start(version="4.4.0", **ServerConfig settings)` → a NetboxInstance on its own test server."""
    servers: list[NetboxTestServer] = []

    def start(version: str = DEFAULT_VERSION, **settings: Any) -> NetboxInstance:
        server = NetboxTestServer(config_with_tokens(version, **settings)).start()
        servers.append(server)
        return instance_for(server)

    yield start
    for server in servers:
        server.stop()
