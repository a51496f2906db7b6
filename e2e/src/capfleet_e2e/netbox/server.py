"""Running the NetBox API test server: in a background thread of the test process, or from the command line.

`NetboxTestServer` listens on 127.0.0.1 only and starts in milliseconds; `down()` and `up()` keep its data
(background.py).

    python -m capfleet_e2e.netbox --port 8001 --seed seed.yaml [--version 4.6.0] [--token <40 hex>]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml
from aiohttp import web

from capfleet_e2e.netbox.app import make_app
from capfleet_e2e.netbox.background import BackgroundSite
from capfleet_e2e.netbox.config import DEFAULT_VERSION, ApiToken, ServerConfig
from capfleet_e2e.netbox.faults import Faults
from capfleet_e2e.netbox.store import Database


class NetboxTestServer(BackgroundSite):
    """A NetBox 4.x API stand-in on 127.0.0.1, served from its own thread and event loop."""

    thread_name = "netbox-test-server"

    def __init__(self, config: ServerConfig | None = None, port: int = 0):
        super().__init__(port)
        self.config = config or ServerConfig(tokens=[ApiToken.new_v1()])
        self.db = Database()
        self.faults = Faults()

    @property
    def token(self) -> str:
        """The first read-write token."""
        return next(t.credential for t in self.config.tokens if t.write_enabled)

    def make_app(self) -> web.Application:
        return make_app(self.config, self.db, self.faults, self.outage_from_loop)

    def start(self) -> NetboxTestServer:
        super().start()
        return self

    def __enter__(self) -> NetboxTestServer:
        return self.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m capfleet_e2e.netbox", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--version", default=DEFAULT_VERSION, help="NetBox version to behave as")
    parser.add_argument("--seed", type=Path, help="YAML file of objects to create at start")
    parser.add_argument("--token", action="append", default=[], help="read-write token (v1 or nbt_ v2)")
    parser.add_argument("--read-only-token", action="append", default=[])
    parser.add_argument("--admin-secret", help="secret for /__capfleet__/ (default: random, printed)")
    args = parser.parse_args(argv)
    tokens = [ApiToken(t) for t in args.token] + [
        ApiToken(t, write_enabled=False) for t in args.read_only_token
    ]
    config = ServerConfig(version=args.version, tokens=tokens or [ApiToken.new_v1()])
    if args.admin_secret:
        config.admin_secret = args.admin_secret
    server = NetboxTestServer(config, port=args.port).start()
    if args.seed:
        from capfleet_e2e.netbox.client import NetboxClient
        from capfleet_e2e.netbox.seed import apply_seed

        apply_seed(NetboxClient(server.url, server.token), yaml.safe_load(args.seed.read_text()) or {})
    info = {"url": server.url, "version": config.version, "tokens": [t.credential for t in config.tokens]}
    print(json.dumps({**info, "admin_secret": config.admin_secret}), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
