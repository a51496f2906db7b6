"""The operator's image cache: servers on a provisioning network with no route to an image's URL fetch it
from the operator, which downloads it once per checksum and keeps it (Ironic's `image_download_source =
http`).

Keyed by the image's SHA-256 (given, or the first word of the checksum URL's file), so two instances of
one image share a file and a new checksum in a template is a new file. The first request streams the
image through while writing and hashing it; only an image whose digest matches is kept, so the cache
never serves a corrupt or substituted image twice, and the deploy ramdisk still verifies every byte it
wrote (a mismatch then ends in its BadChecksum report). One download per digest at a time; others wait
for it and are served the kept file. An upstream error is passed on (404 stays 404), which the ramdisk
reports as DownloadFailed. The cache is bounded (`CAPFLEET_IMAGE_CACHE_MAX_GIB`, 16 by default, under
the Deployment's 20 GiB volume): an image larger than that is refused, and keeping one evicts the least
recently served images until it fits (an evicted image is fetched again when next asked for). Every URL
and redirect is checked first (`egress`): the cache never fetches from loopback, link-local or the
operator's own addresses, nor outside `CAPFLEET_IMAGE_SOURCE_CIDRS` when that is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import urljoin

import aiohttp
from aiohttp import web

from baremetal_provision import egress, ramdisk_args
from capfleet.api.baremetal import Image

log = logging.getLogger(__name__)
CHUNK = 1 << 20
CHECKSUM_BYTES_MAX = 4096
GIB = 1 << 30
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class ImageCache:
    def __init__(
        self,
        directory: Path,
        session: aiohttp.ClientSession,
        *,
        max_bytes: int = 16 * GIB,
        sources: Sequence[egress.Network] = (),
        own: Iterable[str] | None = None,
    ) -> None:
        self.directory = directory
        self.session = session
        self.max_bytes, self.sources = max_bytes, tuple(sources)
        self.own = frozenset(egress.own_addresses() if own is None else own)
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def _get(self, url: str) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET `url`, following redirects itself so that every hop is checked (`egress`) before it is
        fetched; 403 for a refused one."""
        for _ in range(egress.MAX_REDIRECTS + 1):
            refused = await egress.check(url, self.sources, self.own)
            if refused is not None:
                log.warning("image cache: %s", refused)
                raise web.HTTPForbidden(text=refused)
            async with self.session.get(url, allow_redirects=False) as response:
                location = response.headers.get("Location")
                if response.status not in REDIRECTS or not location:
                    yield response
                    return
                url = urljoin(str(response.url), location)
        raise web.HTTPBadGateway(text=f"more than {egress.MAX_REDIRECTS} redirects")

    async def digest(self, image: Image) -> str:
        """The image's SHA-256: given, or read from the checksum URL; 502 when it cannot be had."""
        if ramdisk_args.SHA256.match(image.checksum):
            return image.checksum.lower()
        async with self._get(image.checksum) as response:
            if response.status != 200:
                raise web.HTTPBadGateway(text=f"the checksum URL answered {response.status}")
            words = (await response.content.read(CHECKSUM_BYTES_MAX)).decode(errors="replace").split()
        if not words or not ramdisk_args.SHA256.match(words[0]):
            raise web.HTTPBadGateway(text="the checksum URL holds no SHA-256 digest")
        return words[0].lower()

    async def checksum(self, image: Image) -> web.Response:
        return web.Response(text=await self.digest(image) + "\n", content_type="text/plain")

    async def image(self, request: web.Request, image: Image) -> web.StreamResponse:
        digest = await self.digest(image)
        kept = self.directory / digest
        async with self._locks.setdefault(digest, asyncio.Lock()):
            if kept.exists():
                os.utime(kept)  # served: the least recently served go first
                return web.FileResponse(kept)
            return await self._stream_through(request, image.url, digest)

    async def _stream_through(self, request: web.Request, url: str, digest: str) -> web.StreamResponse:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.directory / f".{digest}.{secrets.token_hex(4)}.partial"
        async with self._get(url) as upstream:
            if upstream.status != 200:
                message = f"the image URL answered {upstream.status}"
                raise (
                    web.HTTPNotFound(text=message)
                    if upstream.status == 404
                    else web.HTTPBadGateway(text=message)
                )
            if (upstream.content_length or 0) > self.max_bytes:
                raise web.HTTPBadGateway(text=self._too_large(url))
            response = web.StreamResponse()
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            hasher, written = hashlib.sha256(), 0
            with partial.open("wb") as out:
                try:
                    async for chunk in upstream.content.iter_chunked(CHUNK):
                        written += len(chunk)
                        if written > self.max_bytes:
                            log.warning("image cache: %s", self._too_large(url))
                            raise ConnectionAbortedError(self._too_large(url))
                        hasher.update(chunk)
                        await asyncio.to_thread(_write, out, chunk)
                        await response.write(chunk)
                except BaseException:
                    partial.unlink(missing_ok=True)
                    raise
        self._keep(partial, digest, hasher.hexdigest())
        await response.write_eof()
        return response

    def _too_large(self, url: str) -> str:
        return f"image {url} is larger than the cache's {self.max_bytes} bytes (CAPFLEET_IMAGE_CACHE_MAX_GIB)"

    def _make_room(self, size: int, keeping: str) -> None:
        """Evict the least recently served images until `size` more bytes fit under the bound."""
        kept = [p for p in self.directory.iterdir() if not p.name.startswith(".") and p.name != keeping]
        kept.sort(key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in kept)
        while kept and total + size > self.max_bytes:
            oldest = kept.pop(0)
            total -= oldest.stat().st_size
            oldest.unlink(missing_ok=True)
            log.info("image %s evicted from the cache", oldest.name)

    def _keep(self, partial: Path, digest: str, actual: str) -> None:
        if actual == digest:
            self._make_room(partial.stat().st_size, digest)
            os.replace(partial, self.directory / digest)
            log.info("image %s cached", digest)
        else:
            partial.unlink(missing_ok=True)
            log.warning("image expected to be %s is %s: served once, not cached", digest, actual)


def _write(out: IO[bytes], chunk: bytes) -> None:
    out.write(chunk)


def open_cache(directory: str | None, max_gib: float = 16.0, sources: str = "") -> ImageCache | None:
    """The cache in `directory` with its HTTP client (TLS verified), or None when caching is off."""
    if not directory:
        return None
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=300))
    networks = egress.networks_of(sources.split(","))
    return ImageCache(Path(directory), session, max_bytes=int(max_gib * GIB), sources=networks)
