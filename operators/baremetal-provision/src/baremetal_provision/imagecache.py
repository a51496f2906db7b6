"""The operator's image cache: servers on a provisioning network with no route to an image's URL fetch it
from the operator, which downloads it once per checksum and keeps it (Ironic's `image_download_source =
http`).

Keyed by the image's SHA-256 (given, or the first word of the checksum URL's file), so two instances of
one image share a file and a new checksum in a template is a new file. The first request streams the
image through while writing and hashing it; only an image whose digest matches is kept, so the cache
never serves a corrupt or substituted image twice, and the deploy ramdisk still verifies every byte it
wrote (a mismatch then ends in its BadChecksum report). One download per digest at a time, in a task of
its own at the upstream's pace; every request for the image reads the file as it grows, at its own pace,
so a slow client delays only itself. An upstream error is passed on (404 stays 404), which the ramdisk
reports as DownloadFailed. The cache is bounded (`CAPFLEET_IMAGE_CACHE_MAX_GIB`, 16 by default, under
the Deployment's 20 GiB volume): an image larger than that is refused, and keeping one evicts the least
recently served images until it fits (an evicted image is fetched again when next asked for). Every URL
and redirect is checked first (`egress`): the cache never fetches from loopback, link-local or the
operator's own addresses, nor outside `CAPFLEET_IMAGE_SOURCE_CIDRS` when that is set, a host name where
the connection resolves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urljoin

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractResolver

from baremetal_provision import egress, ramdisk_args
from capfleet.api.baremetal import Image

log = logging.getLogger(__name__)
CHUNK = 1 << 20
CHECKSUM_BYTES_MAX = 4096
GIB = 1 << 30
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass
class _Download:
    """One image being fetched into the cache, which every request for it follows as it grows."""

    partial: Path
    length: int | None
    written: int = 0
    done: bool = False
    failed: BaseException | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def grew(self, written: int) -> None:
        async with self.changed:
            self.written = written
            self.changed.notify_all()

    async def finish(self, failed: BaseException | None = None) -> None:
        async with self.changed:
            self.done, self.failed = True, failed
            self.changed.notify_all()

    async def beyond(self, sent: int) -> None:
        """Wait until more than `sent` bytes are written, or the download ended."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.written > sent or self.done)


class ImageCache:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = 16 * GIB,
        sources: Sequence[egress.Network] = (),
        own: Iterable[str] | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """The cache in `directory`; its HTTP client connects only where `egress` allows (`resolver`
        answers its DNS questions, the system's by default)."""
        self.directory = directory
        self.max_bytes, self.sources = max_bytes, tuple(sources)
        self.own = frozenset(egress.own_addresses() if own is None else own)
        self.session = egress.session(self.sources, self.own, resolver)
        self._downloads: dict[str, asyncio.Future[_Download]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.session.close()

    @contextlib.asynccontextmanager
    async def _get(self, url: str) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET `url`, following redirects itself so that every hop is checked (`egress`) before it is
        fetched; 403 for a refused one."""
        for _ in range(egress.MAX_REDIRECTS + 1):
            refused = egress.url_refusal(url, self.sources, self.own)
            if refused is not None:
                log.warning("image cache: %s", refused)
                raise web.HTTPForbidden(text=refused)
            try:
                async with self.session.get(url, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status not in REDIRECTS or not location:
                        yield response
                        return
                    url = urljoin(str(response.url), location)
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, egress.RefusedAddress):
                    log.warning("image cache: %s", exc.os_error)
                    raise web.HTTPForbidden(text=str(exc.os_error)) from None
                raise
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
        """The kept image, or the image as its one download brings it in: each request reads the file
        being written at its own pace, so a slow client holds up nobody (not the download, not the
        other servers deploying the same image)."""
        digest = await self.digest(image)
        kept = self.directory / digest
        if kept.exists():
            os.utime(kept)  # served: the least recently served go first
            return web.FileResponse(kept)
        starting = self._downloads.get(digest)
        if starting is None:
            starting = self._start(image.url, digest)
        download = await asyncio.shield(starting)
        return await self._follow(request, download, kept)

    def _start(self, url: str, digest: str) -> asyncio.Future[_Download]:
        """The download of `digest`, in a task of its own (it outlives the request that started it);
        the future is its upstream's answer: the download once the upstream said 200, else the error."""
        started: asyncio.Future[_Download] = asyncio.get_running_loop().create_future()
        self._downloads[digest] = started
        task = asyncio.create_task(self._download(url, digest, started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return started

    async def _download(self, url: str, digest: str, started: asyncio.Future[_Download]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.directory / f".{digest}.{secrets.token_hex(4)}.partial"
        download: _Download | None = None
        try:
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
                hasher, written = hashlib.sha256(), 0
                with partial.open("wb") as out:
                    download = _Download(partial, upstream.content_length)
                    started.set_result(download)
                    async for chunk in upstream.content.iter_chunked(CHUNK):
                        written += len(chunk)
                        if written > self.max_bytes:
                            log.warning("image cache: %s", self._too_large(url))
                            raise ConnectionAbortedError(self._too_large(url))
                        hasher.update(chunk)
                        await asyncio.to_thread(_write, out, chunk)
                        await download.grew(written)
            self._keep(partial, digest, hasher.hexdigest())
            await download.finish()
        except BaseException as exc:
            partial.unlink(missing_ok=True)
            if download is None:
                started.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                started.exception()  # retrieved: a start no request awaits any more logs nothing
            else:
                await download.finish(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            if self._downloads.get(digest) is started:
                del self._downloads[digest]

    async def _follow(self, request: web.Request, download: _Download, kept: Path) -> web.StreamResponse:
        """Stream the download to `request` as it is written; a download that failed ends the response
        short (the ramdisk's check of length and digest then fails)."""
        try:
            source = download.partial.open("rb")
        except FileNotFoundError:  # ended before this request opened it: kept, or failed
            return await self._kept(kept)
        with source:
            response = web.StreamResponse()
            if download.length is not None:
                response.content_length = download.length
            await response.prepare(request)
            sent = 0
            while True:
                if sent < download.written:
                    chunk = await asyncio.to_thread(source.read, min(CHUNK, download.written - sent))
                    await response.write(chunk)
                    sent += len(chunk)
                elif download.done:
                    if download.failed is not None:
                        raise ConnectionAbortedError("the image's download failed")
                    break
                else:
                    await download.beyond(sent)
        await response.write_eof()
        return response

    async def _kept(self, kept: Path) -> web.FileResponse:
        if not await asyncio.to_thread(kept.exists):
            raise web.HTTPBadGateway(text="the image's download failed")
        return web.FileResponse(kept)

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
    out.flush()  # what `written` counts must be readable by the requests following the file


def open_cache(directory: str | None, max_gib: float = 16.0, sources: str = "") -> ImageCache | None:
    """The cache in `directory` with its HTTP client (TLS verified), or None when caching is off."""
    if not directory:
        return None
    networks = egress.networks_of(sources.split(","))
    return ImageCache(Path(directory), max_bytes=int(max_gib * GIB), sources=networks)
