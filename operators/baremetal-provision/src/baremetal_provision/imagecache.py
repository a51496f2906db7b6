"""The operator's image cache: servers on a provisioning network with no route to an image's URL fetch it
from the operator, which downloads it once per checksum and keeps it (Ironic's `image_download_source =
http`).

Keyed by the image's SHA-256 (given, or the first word of the checksum URL's file), so two instances of
one image share a file and a new checksum in a template is a new file. The first request streams the
image through while writing and hashing it; only an image whose digest matches is kept, so the cache
never serves a corrupt or substituted image twice, and the deploy ramdisk still verifies every byte it
wrote (a mismatch then ends in its BadChecksum report). One download per digest at a time; others wait
for it and are served the kept file. An upstream error is passed on (404 stays 404), which the ramdisk
reports as DownloadFailed. Files are not evicted: the directory holds the images in use and their
predecessors; delete old ones by hand.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
from pathlib import Path
from typing import IO

import aiohttp
from aiohttp import web

from baremetal_provision import ramdisk_args
from capfleet.api.baremetal import Image

log = logging.getLogger(__name__)
CHUNK = 1 << 20
CHECKSUM_BYTES_MAX = 4096


class ImageCache:
    def __init__(self, directory: Path, session: aiohttp.ClientSession) -> None:
        self.directory = directory
        self.session = session
        self._locks: dict[str, asyncio.Lock] = {}

    async def digest(self, image: Image) -> str:
        """The image's SHA-256: given, or read from the checksum URL; 502 when it cannot be had."""
        if ramdisk_args.SHA256.match(image.checksum):
            return image.checksum.lower()
        async with self.session.get(image.checksum) as response:
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
                return web.FileResponse(kept)
            return await self._stream_through(request, image.url, digest)

    async def _stream_through(self, request: web.Request, url: str, digest: str) -> web.StreamResponse:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.directory / f".{digest}.{secrets.token_hex(4)}.partial"
        async with self.session.get(url) as upstream:
            if upstream.status != 200:
                message = f"the image URL answered {upstream.status}"
                raise (
                    web.HTTPNotFound(text=message)
                    if upstream.status == 404
                    else web.HTTPBadGateway(text=message)
                )
            response = web.StreamResponse()
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            hasher = hashlib.sha256()
            with partial.open("wb") as out:
                try:
                    async for chunk in upstream.content.iter_chunked(CHUNK):
                        hasher.update(chunk)
                        await asyncio.to_thread(_write, out, chunk)
                        await response.write(chunk)
                except BaseException:
                    partial.unlink(missing_ok=True)
                    raise
        self._keep(partial, digest, hasher.hexdigest())
        await response.write_eof()
        return response

    def _keep(self, partial: Path, digest: str, actual: str) -> None:
        if actual == digest:
            os.replace(partial, self.directory / digest)
            log.info("image %s cached", digest)
        else:
            partial.unlink(missing_ok=True)
            log.warning("image expected to be %s is %s: served once, not cached", digest, actual)


def _write(out: IO[bytes], chunk: bytes) -> None:
    out.write(chunk)


def open_cache(directory: str | None) -> ImageCache | None:
    """The cache in `directory` with its HTTP client (TLS verified), or None when caching is off."""
    if not directory:
        return None
    return ImageCache(Path(directory), aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=300)))
