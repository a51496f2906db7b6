"""Where the tests' OS images come from: an HTTP server on loopback, like an image store in a data centre.

Only baremetal-provision reaches it (its image cache downloads from it): the lab's servers, inside their
network namespace, have no route to it, as a provisioning network has none to an image store.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from aiohttp import web

from capfleet_e2e.processes import free_port


@contextlib.asynccontextmanager
async def image_server(files: Mapping[str, Path | bytes]) -> AsyncIterator[str]:
    """Serve `files` (URL path → file or bytes; anything else is 404) and yield the server's base URL."""

    async def handle(request: web.Request) -> web.StreamResponse:
        found = files.get(request.path)
        if found is None:
            raise web.HTTPNotFound()
        return web.FileResponse(found) if isinstance(found, Path) else web.Response(body=found)

    app = web.Application()
    app.router.add_get("/{path:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def sha256_of(path: Path) -> str:
    """The SHA-256 of the image at `path`, hashed once and kept beside it (`<name>.sha256`, as published
    images come with), and hashed again when the image is newer than it."""
    kept = path.with_name(path.name + ".sha256")
    if kept.is_file() and kept.stat().st_mtime >= path.stat().st_mtime:
        return kept.read_text().split()[0]
    digest = hashlib.sha256()
    with path.open("rb") as image:
        while chunk := image.read(1 << 22):
            digest.update(chunk)
    kept.write_text(f"{digest.hexdigest()}  {path.name}\n")
    return digest.hexdigest()
