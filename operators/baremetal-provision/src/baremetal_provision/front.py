"""The boot server's network-facing half: a process without credentials that relays the routes servers
use to the operator, which listens on a UNIX socket only.

Everything on the provisioning network may be hostile, and the operator that answers it holds a Kubernetes
token that reaches BMC credentials. The front holds neither: its container gets no service-account token,
no Secret and no kubeconfig, so a flaw in handling what the network sends yields no more than the front's
own view, the same boot routes the network already has. It passes only those routes (other paths get 404
without reaching the operator), only GET, HEAD and POST, bounds request bodies, replaces any requester
header with the peer's address, and streams answers (images are GiBs) without decoding them.

`python -m baremetal_provision.front`, with `CAPFLEET_BOOT_LISTEN` (host:port, as the operator's) and
`CAPFLEET_BOOT_UPSTREAM` (the operator's `CAPFLEET_BOOT_SOCKET`); with `CAPFLEET_BOOT_TLS_LISTEN`,
`CAPFLEET_BOOT_TLS_CERT_FILE` and `CAPFLEET_BOOT_TLS_KEY_FILE` it serves the same routes over TLS too (the
deploy ramdisk's way in, see the operator's `CAPFLEET_BOOT_TLS_URL`), re-reading the files when they change
(cert-manager renews them in place).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from yarl import URL

from baremetal_provision.reports import BODY_MAX
from baremetal_provision.settings import listen_setting, split_listen
from capfleet import reconciling
from capfleet.reconciling import setting

log = logging.getLogger(__name__)

REQUESTER_HEADER = "X-Capfleet-Requester"
EXACT_ROUTES = frozenset({"/boot.ipxe", "/ipxe"})
ROUTE_PREFIXES = ("/seed/", "/key/", "/callback/", "/cleaned/", "/images/", "/files/", "/deploy/")
METHODS = frozenset({"GET", "HEAD", "POST"})
# What a guest may tell the operator beyond the body, and what of the answer it gets back.
REQUEST_HEADERS = ("Host", "Content-Type", "Range", "User-Agent", "Accept")
RESPONSE_HEADERS = (
    "Content-Type",
    "Content-Length",
    "Content-Encoding",
    "Content-Range",
    "Accept-Ranges",
    "Last-Modified",
    "ETag",
)
CHUNK = 1 << 20
CERTIFICATE_CHECK_SECONDS = 30.0
UPSTREAM = web.AppKey("upstream", aiohttp.ClientSession)


@dataclass(frozen=True)
class FrontSettings(reconciling.Settings):
    boot_listen: str = listen_setting()
    boot_upstream: str = setting("")
    """The operator's UNIX socket (its `CAPFLEET_BOOT_SOCKET`)."""
    boot_tls_listen: str | None = None
    boot_tls_cert_file: str | None = None
    boot_tls_key_file: str | None = None

    def __post_init__(self) -> None:
        tls = (self.boot_tls_listen, self.boot_tls_cert_file, self.boot_tls_key_file)
        if any(tls) and not all(tls):
            raise ValueError("CAPFLEET_BOOT_TLS_LISTEN, _CERT_FILE and _KEY_FILE go together")
        if self.boot_tls_listen:
            split_listen(self.boot_tls_listen)


class Certificate:
    """The front's TLS context, loaded again when its certificate or key file changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.files = (cert_file, key_file)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.loaded: tuple[float, float] | None = None
        self.reload()

    def reload(self) -> bool:
        """Load the files if they changed since the last load; whether they did."""
        stamps = (os.stat(self.files[0]).st_mtime, os.stat(self.files[1]).st_mtime)
        if stamps == self.loaded:
            return False
        self.context.load_cert_chain(*self.files)
        self.loaded = stamps
        return True

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(CERTIFICATE_CHECK_SECONDS)
            try:
                if await asyncio.to_thread(self.reload):
                    log.info("loaded the renewed TLS certificate %s", self.files[0])
            except (OSError, ssl.SSLError) as exc:
                log.warning("keeping the TLS certificate in use: %s", exc)


def routed(path: str) -> bool:
    """Whether `path` (decoded) is one of the operator's boot routes, without a step up the tree."""
    if "/../" in f"{path}/" or "\\" in path:
        return False
    return path in EXACT_ROUTES or path.startswith(ROUTE_PREFIXES)


async def relay(request: web.Request) -> web.StreamResponse:
    if request.method not in METHODS:
        raise web.HTTPMethodNotAllowed(request.method, sorted(METHODS))
    if not routed(request.path):
        raise web.HTTPNotFound()
    body = await request.content.read(BODY_MAX + 1)
    if len(body) > BODY_MAX:
        raise web.HTTPRequestEntityTooLarge(BODY_MAX, len(body))
    headers = {name: request.headers[name] for name in REQUEST_HEADERS if name in request.headers}
    headers[REQUESTER_HEADER] = request.remote or ""
    url = URL(f"http://operator{request.raw_path}", encoded=True)
    try:
        async with request.app[UPSTREAM].request(
            request.method, url, data=body or None, headers=headers, allow_redirects=False
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for name in RESPONSE_HEADERS:
                if name in answer.headers:
                    response.headers[name] = answer.headers[name]
            await response.prepare(request)
            async for chunk in answer.content.iter_chunked(CHUNK):
                await response.write(chunk)
            await response.write_eof()
            return response
    except (aiohttp.ClientConnectionError, FileNotFoundError) as exc:
        log.warning("the operator's boot socket does not answer: %s", exc)
        raise web.HTTPServiceUnavailable(text="the boot server is not ready") from exc


def application(upstream_socket: str) -> web.Application:
    app = web.Application(client_max_size=BODY_MAX)
    app.router.add_route("*", "/{path:.*}", relay)

    async def session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.UnixConnector(path=upstream_socket)
        # No total: an image takes minutes; a stalled operator is cut after sock_read.
        timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=300)
        client = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        async with client:
            app[UPSTREAM] = client
            yield

    app.cleanup_ctx.append(session)
    return app


async def serve(settings: FrontSettings) -> None:
    """Relay until SIGTERM or SIGINT; says so once it listens."""
    runner = web.AppRunner(application(settings.boot_upstream), access_log=None)
    await runner.setup()
    watching: asyncio.Task[None] | None = None
    if settings.boot_tls_listen and settings.boot_tls_cert_file and settings.boot_tls_key_file:
        certificate = Certificate(settings.boot_tls_cert_file, settings.boot_tls_key_file)
        host, port = split_listen(settings.boot_tls_listen)
        await web.TCPSite(runner, host, port, ssl_context=certificate.context).start()
        watching = asyncio.create_task(certificate.watch())
    host, port = split_listen(settings.boot_listen)
    await web.TCPSite(runner, host, port).start()
    tls = f" and {settings.boot_tls_listen} (TLS)" if settings.boot_tls_listen else ""
    log.info("relaying the boot routes on %s:%d%s to %s", host, port, tls, settings.boot_upstream)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        if watching is not None:
            watching.cancel()
        await runner.cleanup()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = FrontSettings.load(os.environ)
    if not settings.boot_upstream:
        raise SystemExit("CAPFLEET_BOOT_UPSTREAM must name the operator's boot socket")
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
