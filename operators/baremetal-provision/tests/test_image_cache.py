"""The image cache against a real upstream HTTP server, through the boot server: one verified download
per checksum, the addresses it may fetch from (checked where the connection resolves them), its bound and
eviction, and requests that each follow the download at their own pace."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer
from boot_server_harness import image_instance, serving_of

from baremetal_provision import egress, imagecache

IMAGE_BYTES = bytes(range(256)) * 4096
DIGEST = hashlib.sha256(IMAGE_BYTES).hexdigest()
LOOPBACK = egress.networks_of(["127.0.0.0/8"])  # the test's upstream is on loopback


@contextlib.asynccontextmanager
async def open_cache(directory: Path, **options: Any) -> AsyncIterator[imagecache.ImageCache]:
    cache = imagecache.ImageCache(directory, **options)
    try:
        yield cache
    finally:
        await cache.close()


@contextlib.asynccontextmanager
async def upstream(
    files: dict[str, bytes], redirects: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, list[str]]]:
    """A real HTTP server with `files` (and `redirects`: path -> Location); yields its URL and the paths
    it was asked for."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
        if request.path in (redirects or {}):
            raise web.HTTPFound((redirects or {})[request.path])
        data = files.get(request.path)
        return web.Response(body=data) if data is not None else web.Response(status=404)

    app = web.Application()
    app.router.add_get("/{path:.*}", handle)
    async with TestServer(app) as server:
        yield str(server.make_url("")).rstrip("/"), asked


async def test_the_image_cache_downloads_once_per_checksum_and_keeps_only_verified_images(
    tmp_path: Path,
) -> None:
    files = {
        "/node.raw": IMAGE_BYTES,
        "/node.sha256": f"{DIGEST}  node.raw\n".encode(),
        "/bad.raw": b"tampered",
    }
    async with upstream(files) as (url, asked), open_cache(tmp_path / "cache", sources=LOOPBACK) as cache:
        good = image_instance({"url": f"{url}/node.raw", "checksum": f"{url}/node.sha256"})
        async with serving_of(good, cache) as (client, _, token):
            assert (await (await client.get(f"/images/sha256?token={token}")).text()).strip() == DIGEST
            for _ in range(2):
                reply = await client.get(f"/images/image?token={token}")
                assert (reply.status, await reply.read()) == (200, IMAGE_BYTES)
            assert asked.count("/node.raw") == 1, "the second fetch is served from the cache"
            assert (tmp_path / "cache" / DIGEST).read_bytes() == IMAGE_BYTES
            assert (await client.get("/images/image?token=not-the-token")).status == 404
        bad = image_instance({"url": f"{url}/bad.raw", "checksum": "0" * 64})
        async with serving_of(bad, cache) as (client, _, token):
            reply = await client.get(f"/images/image?token={token}")
            assert await reply.read() == b"tampered", "served through, so the ramdisk reports BadChecksum"
            assert not (tmp_path / "cache" / ("0" * 64)).exists()
            assert [p.name for p in (tmp_path / "cache").iterdir()] == [DIGEST], "no partial file left"
        missing = image_instance({"url": f"{url}/missing.raw", "checksum": "1" * 64})
        async with serving_of(missing, cache) as (client, _, token):
            assert (await client.get(f"/images/image?token={token}")).status == 404


async def test_the_image_cache_fetches_nothing_from_loopback_link_local_or_a_refused_redirect(
    tmp_path: Path,
) -> None:
    """A cluster author names the URL: without CAPFLEET_IMAGE_SOURCE_CIDRS the cache fetches nothing from
    loopback (the API server's ports, the pod's other containers); allowed, it still checks every
    redirect, so an allowed server cannot send it to a link-local metadata address."""
    other = b"another image" * 1000
    files = {"/node.raw": IMAGE_BYTES, "/other.raw": other}
    redirects = {"/away.raw": "http://169.254.169.254/latest/meta-data/", "/moved.raw": "/node.raw"}
    async with (
        upstream(files, redirects) as (url, asked),
        open_cache(tmp_path / "a", own=()) as unconfigured,
        open_cache(tmp_path / "b", sources=LOOPBACK, own=()) as allowed,
    ):
        served = image_instance({"url": f"{url}/node.raw", "checksum": DIGEST})
        async with serving_of(served, unconfigured) as (client, _, token):
            reply = await client.get(f"/images/image?token={token}")
            assert reply.status == 403
            assert "CAPFLEET_IMAGE_SOURCE_CIDRS" in await reply.text()
        assert asked == [], "refused before any request"
        away = image_instance({"url": f"{url}/away.raw", "checksum": DIGEST})
        async with serving_of(away, allowed) as (client, _, token):
            assert (await client.get(f"/images/image?token={token}")).status == 403
        assert asked == ["/away.raw"], "the redirect to a link-local address is not followed"
        moved = image_instance({"url": f"{url}/moved.raw", "checksum": DIGEST})
        async with serving_of(moved, allowed) as (client, _, token):
            reply = await client.get(f"/images/image?token={token}")
            assert (reply.status, await reply.read()) == (200, IMAGE_BYTES), "an allowed redirect is followed"


async def test_the_image_cache_is_bounded_and_evicts_the_least_recently_served(tmp_path: Path) -> None:
    second = bytes(reversed(IMAGE_BYTES))
    digests = {"/a.raw": DIGEST, "/b.raw": hashlib.sha256(second).hexdigest()}
    huge = IMAGE_BYTES * 2
    files = {"/a.raw": IMAGE_BYTES, "/b.raw": second, "/huge.raw": huge}
    room = len(IMAGE_BYTES) * 3 // 2  # one image fits, not two
    async with (
        upstream(files) as (url, _),
        open_cache(tmp_path / "c", max_bytes=room, sources=LOOPBACK) as cache,
    ):
        for path in ("/a.raw", "/b.raw"):
            body = image_instance({"url": f"{url}{path}", "checksum": digests[path]})
            async with serving_of(body, cache) as (client, _, token):
                reply = await client.get(f"/images/image?token={token}")
                assert (reply.status, len(await reply.read())) == (200, len(files[path]))
        assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [digests["/b.raw"]], "a was evicted"
        big = image_instance({"url": f"{url}/huge.raw", "checksum": hashlib.sha256(huge).hexdigest()})
        async with serving_of(big, cache) as (client, _, token):
            reply = await client.get(f"/images/image?token={token}")
            assert reply.status == 502
            assert "CAPFLEET_IMAGE_CACHE_MAX_GIB" in await reply.text()
        assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [digests["/b.raw"]]


def test_image_sources_exclude_loopback_link_local_and_own_addresses_unless_listed() -> None:
    none: tuple[egress.Network, ...] = ()
    assert egress.refusal("https://images.example/a.raw", ["203.0.113.7"], none, ()) is None
    for address in ("127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1"):
        assert egress.refusal("http://h/a", [address], none, ()) is not None, address
    assert egress.refusal("http://h/a", ["10.1.2.3"], none, ["10.1.2.3"]) is not None  # the pod itself
    assert egress.refusal("file:///etc/passwd", ["127.0.0.1"], LOOPBACK, ()) is not None
    assert egress.refusal("http://h/a", [], none, ()) is not None
    lab = egress.networks_of(["10.0.0.0/8", "127.0.0.0/8"])
    assert egress.refusal("http://h/a", ["127.0.0.1"], lab, ()) is None
    assert egress.refusal("http://h/a", ["203.0.113.7"], lab, ()) is not None, "listed networks only"
    assert egress.refusal("http://h/a", ["10.0.0.1", "203.0.113.7"], lab, ()) is not None, "every address"


async def test_a_slow_client_holds_up_neither_the_download_nor_another_server(tmp_path: Path) -> None:
    """One server's deploy ramdisk stops reading its image: the download goes on at the upstream's pace,
    the image is kept, and another server deploying the same image gets all of it meanwhile."""
    large = bytes(range(256)) * (96 << 12)  # 96 MiB: far more than the sockets' buffers hold
    digest = hashlib.sha256(large).hexdigest()
    async with (
        upstream({"/large.raw": large}) as (url, asked),
        open_cache(tmp_path / "d", sources=LOOPBACK) as cache,
    ):
        body = image_instance({"url": f"{url}/large.raw", "checksum": digest})
        async with serving_of(body, cache) as (client, _, token):
            stalled = await client.get(f"/images/image?token={token}")  # headers only; never read
            assert stalled.status == 200
            other = await asyncio.wait_for(client.get(f"/images/image?token={token}"), 60)
            received = await asyncio.wait_for(other.read(), 60)
            assert hashlib.sha256(received).hexdigest() == digest
            assert (tmp_path / "d" / digest).stat().st_size == len(large), "kept while one client stalls"
            assert asked == ["/large.raw"], "one download for both"
            stalled.close()


class Answers(AbstractResolver):
    """A DNS that answers `host` with `address` (and counts the questions)."""

    def __init__(self, host: str, address: str) -> None:
        self.host, self.address, self.asked = host, address, 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked += 1
        assert host == self.host
        found: ResolveResult = {
            "hostname": host,
            "host": self.address,
            "port": port,
            "family": socket.AF_INET,
            "proto": 0,
            "flags": socket.AI_NUMERICHOST,
        }
        return [found]

    async def close(self) -> None:
        pass


async def test_a_host_name_is_checked_as_the_connection_resolves_it(tmp_path: Path) -> None:
    """The addresses checked are the ones connected to: a name that resolves to loopback when the cache
    connects is refused, whatever it resolved to a moment before (DNS rebinding); allowed, the cache
    connects to the very answer it checked (a second, separate lookup of this made-up name would find
    nothing)."""
    async with upstream({"/node.raw": IMAGE_BYTES}) as (url, asked):
        port = url.rsplit(":", 1)[1]
        named = image_instance({"url": f"http://images.capfleet.invalid:{port}/node.raw", "checksum": DIGEST})
        dns = Answers("images.capfleet.invalid", "127.0.0.1")
        async with (
            open_cache(tmp_path / "e", own=(), resolver=dns) as cache,
            serving_of(named, cache) as (
                client,
                _,
                token,
            ),
        ):
            reply = await client.get(f"/images/image?token={token}")
            assert reply.status == 403
            assert "images.capfleet.invalid (127.0.0.1)" in await reply.text()
        assert asked == [], "refused before any byte was sent"
        assert dns.asked == 1, "one lookup: the connection's"
        allowed = Answers("images.capfleet.invalid", "127.0.0.1")
        async with (
            open_cache(tmp_path / "f", sources=LOOPBACK, own=(), resolver=allowed) as cache,
            serving_of(named, cache) as (client, _, token),
        ):
            reply = await client.get(f"/images/image?token={token}")
            assert (reply.status, await reply.read()) == (200, IMAGE_BYTES)
        assert allowed.asked == 1


def test_only_an_address_in_the_url_is_refused_before_connecting() -> None:
    assert egress.url_refusal("http://127.0.0.1/a", (), ()) is not None
    assert egress.url_refusal("ftp://images.example/a", (), ()) is not None
    assert egress.url_refusal("http://images.example/a", (), ()) is None, "checked when resolved"
    assert egress.url_refusal("http://127.0.0.1/a", LOOPBACK, ()) is None
