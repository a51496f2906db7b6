"""An aiohttp application on 127.0.0.1 served from a thread of the test process, that can vanish and return.

The fault-injecting proxy in front of a real NetBox (proxy.py) is one. `down()` closes the listening
socket and every open connection, so clients see "connection refused" as with a NetBox that is gone;
`up()` listens again on the same port.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from aiohttp import web

HOST = "127.0.0.1"


def listening_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class BackgroundSite:
    """Serves `make_app()` on 127.0.0.1:`port` (0: any free port) from its own thread and event loop."""

    thread_name = "background-site"

    def __init__(self, port: int = 0):
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.SockSite | None = None
        self._stopped: asyncio.Event | None = None

    def make_app(self) -> web.Application:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._site is not None

    def start(self) -> Any:
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=self.thread_name, daemon=True)
        self._thread.start()
        ready.result(timeout=10)
        return self

    def _run(self, ready: Future[None]) -> None:
        asyncio.run(self._serve(ready))

    async def _serve(self, ready: Future[None]) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            self._runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
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
        """Stop listening and drop every connection: unreachable until up()."""
        self._call(self._close())

    def up(self) -> None:
        """Listen again, on the same port."""
        if self._site is None:
            self._call(self._listen())

    def outage_from_loop(self, seconds: float) -> None:
        assert self._loop is not None
        self._loop.create_task(self._close())
        self._loop.call_later(seconds, lambda: self._loop.create_task(self._listen()) if self._loop else None)

    def outage(self, seconds: float) -> None:
        """Go down now and come back by itself after `seconds` (without blocking the caller)."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self.outage_from_loop, seconds)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
