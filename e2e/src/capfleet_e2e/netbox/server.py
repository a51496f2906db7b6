"""Running the NetBox API test server: in a background thread of the test process, or from the command line.

`NetboxTestServer` listens on 127.0.0.1 only and starts in milliseconds. `down()` closes the listening
socket and every open connection, so clients see "connection refused" as with a NetBox that is gone;
`up()` listens again on the same port with the same data.

    python -m capfleet_e2e.netbox --port 8001 --seed seed.yaml [--version 4.6.0] [--token <40 hex>]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from capfleet_e2e.netbox.app import make_app
from capfleet_e2e.netbox.config import DEFAULT_VERSION, ApiToken, ServerConfig
from capfleet_e2e.netbox.faults import Faults
from capfleet_e2e.netbox.store import Database

HOST = "127.0.0.1"


def listening_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class NetboxTestServer:
    """A NetBox 4.x API stand-in on 127.0.0.1, served from its own thread and event loop."""

    def __init__(self, config: ServerConfig | None = None, port: int = 0):
        self.config = config or ServerConfig(tokens=[ApiToken.new_v1()])
        self.db = Database()
        self.faults = Faults()
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def token(self) -> str:
        """The first read-write token."""
        return next(t.credential for t in self.config.tokens if t.write_enabled)

    @property
    def is_up(self) -> bool:
        return self._site is not None

    def start(self) -> NetboxTestServer:
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="netbox-test-server", daemon=True
        )
        self._thread.start()
        ready.result(timeout=10)
        return self

    def _run(self, ready: Future[None]) -> None:
        asyncio.run(self._serve(ready))

    async def _serve(self, ready: Future[None]) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            app = make_app(self.config, self.db, self.faults, self._outage_from_loop)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await self._runner.setup()
            await self._listen()
        except BaseException as error:
            ready.set_exception(error)
            raise
        ready.set_result(None)
        await self._stopped.wait()
        await self._runner.cleanup()

    async def _listen(self) -> None:
        assert self._runner is not None
        sock = listening_socket(self.port)
        self.port = sock.getsockname()[1]
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()

    async def _close(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None
        server = self._runner.server if self._runner else None
        for connection in server.connections if server else []:
            connection.force_close()

    def _call(self, coroutine: Any) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    def down(self) -> None:
        """Stop listening and drop every connection: NetBox is unreachable until up()."""
        self._call(self._close())

    def up(self) -> None:
        """Listen again, on the same port."""
        if self._site is None:
            self._call(self._listen())

    def _outage_from_loop(self, seconds: float) -> None:
        assert self._loop is not None
        self._loop.create_task(self._close())
        self._loop.call_later(seconds, lambda: self._loop.create_task(self._listen()) if self._loop else None)

    def outage(self, seconds: float) -> None:
        """Go down now and come back by itself after `seconds` (without blocking the caller)."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._outage_from_loop, seconds)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> NetboxTestServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


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
