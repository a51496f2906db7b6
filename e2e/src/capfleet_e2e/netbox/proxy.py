"""A proxy in front of a real NetBox that can make it slow, failing or gone, and logs what clients asked.

Tests point the operators at the proxy, never at NetBox itself, and inject faults with the same rules as
ever (faults.py): a status for the next N matching requests (answered by the proxy, as a dying gunicorn or
a load balancer would, without reaching NetBox), a delay before forwarding, an outage (`down()`, `up()`,
`outage(seconds)`: connections refused). The request's Host header is passed on, so the URLs NetBox puts
in its answers (`url`, pagination's `next`) lead back through the proxy. It also serves the web UI's
static files, which NetBox leaves to the web server in front of it.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from capfleet_e2e.netbox.background import BackgroundSite
from capfleet_e2e.netbox.faults import Faults, faults_middleware

# Hop-by-hop headers (RFC 9110 §7.6.1), and the length, which aiohttp sets for the body it sends.
NOT_FORWARDED = frozenset(
    ("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade")
) | {"content-length"}
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=300)


def forwarded(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in NOT_FORWARDED)


class NetboxProxy(BackgroundSite):
    """Forwards everything to `upstream` (a NetBox base URL), applying the fault rules first."""

    thread_name = "netbox-proxy"

    def __init__(self, upstream: str, port: int = 0, static: Path | None = None):
        """`static`: the web UI's files, served under /static/ as the web server in front of NetBox would."""
        super().__init__(port)
        self.upstream = upstream.rstrip("/")
        self.static = static
        self.faults = Faults()
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> NetboxProxy:
        super().start()
        return self

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[faults_middleware(self.faults)], client_max_size=64 * 1024**2)
        if self.static is not None:
            app.router.add_static("/static/", self.static)
        app.router.add_route("*", "/{path:.*}", self.forward)
        app.on_cleanup.append(self._close_session)
        return app

    async def _close_session(self, _: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, request: web.Request) -> web.Response:
        if self._session is None:
            # No pooled connections: a reset NetBox or one restarted behind the proxy is met afresh.
            connector = aiohttp.TCPConnector(force_close=True)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=UPSTREAM_TIMEOUT, auto_decompress=False
            )
        async with self._session.request(
            request.method,
            self.upstream + request.rel_url.raw_path_qs,
            headers=forwarded(request.headers),
            data=await request.read() if request.can_read_body else None,
            allow_redirects=False,
        ) as reply:
            body = await reply.read()
            return web.Response(status=reply.status, headers=forwarded(reply.headers), body=body)
