"""The boot HTTP server for instances with an image: the deploy ramdisk's script, its signed callbacks
(keys served once, the cleaner's of its own), its failure reports, and the image cache against a real
upstream HTTP server."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from boot_server_harness import TOKENS, FakeKube, instance, serving_of, serving_with

from baremetal_provision import egress, front, imagecache, markers, reports
from baremetal_provision.contexts import OpenedAttempts
from baremetal_provision.settings import BaremetalSettings

IMAGE_BYTES = bytes(range(256)) * 4096
DIGEST = hashlib.sha256(IMAGE_BYTES).hexdigest()
LOOPBACK = egress.networks_of(["127.0.0.0/8"])  # the test's upstream is on loopback


def image_instance(image: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = instance(image=image)
    del body["spec"]["os"]
    body["metadata"]["annotations"].update(annotations or {})
    return body


async def test_an_image_instance_gets_the_deploy_ramdisk_until_it_reported(tmp_path: Path) -> None:
    image = {"url": "https://images.example/node.raw", "checksum": DIGEST}
    async with serving_of(image_instance(image)) as (client, _, token):
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert "kernel http://boot:8081/deploy/vmlinuz " in script
        assert f"capfleet.callback=http://boot:8081/callback/{token}" in script.split()
        assert "capfleet.image=https://images.example/node.raw" in script.split()
    for marks in (
        {markers.FAILURE_REPORTED: "BadChecksum: x"},
        {markers.FAILED_ATTEMPTS: "3"},
        {markers.CALLED_BACK: "2026-01-01T00:00:00Z"},
    ):
        async with serving_of(image_instance(image, marks)) as (client, _, _):
            script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
            assert script.splitlines()[-1] == "exit", f"no network boot after {marks}"


async def test_the_ramdisk_signs_its_callback_with_a_key_served_once() -> None:
    """The per-attempt key goes to the first fetch only (a second is refused with a Warning Event); an
    image instance's callback without its signature, or with a wrong one, is refused and changes nothing;
    a custom installer's (which has no key) is taken as before."""
    image = {"url": "https://images.example/node.raw", "checksum": DIGEST}
    async with serving_of(image_instance(image)) as (client, kube, token):
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert f"capfleet.key=http://boot:8081/key/{token}" in script.split()
        first = await client.get(f"/key/{token}")
        key = await first.text()
        assert (first.status, len(key)) == (200, 64)
        assert key not in script, "the key is in no script or URL"
        assert (await client.get(f"/key/{token}")).status == 403
        [event] = kube.events
        assert (event["type"], event["reason"]) == ("Warning", "CallbackKeyRefetchRefused")
        assert key not in event["message"]
        body = b"deployed\nseconds_total: 40\n"
        query = {"result": "deployed"}
        assert (await client.post(f"/callback/{token}", params=query, data=body)).status == 403
        forged = {**query, "sig": reports.signature("00" * 32, "deployed", "", body)}
        assert (await client.post(f"/callback/{token}", params=forged, data=body)).status == 403
        tampered = {**query, "sig": reports.signature(key, "deployed", "", body)}
        assert (await client.post(f"/callback/{token}", params=tampered, data=body + b"x")).status == 403
        assert markers.CALLED_BACK not in kube.annotations
        assert (await client.post(f"/callback/{token}", params=tampered, data=body)).status == 204
        assert markers.CALLED_BACK in kube.annotations
    async with serving_of(instance()) as (client, kube, token):
        assert (await client.get(f"/key/{token}")).status == 404, "a custom installer gets no key"


async def test_the_cleaner_signs_its_callback_with_a_key_of_its_own() -> None:
    image = {"url": "https://images.example/node.raw", "checksum": DIGEST}
    body = image_instance(image, {markers.CALLED_BACK: "2026-01-01T00:00:00Z"})
    body["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    kube, attempts = FakeKube(body), OpenedAttempts()
    called_back = attempts.callback("ns", "bm")
    async with serving_with(kube, body, attempts=attempts) as (client, token):
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert f"/cleaned/{token}" in script
        key = await (await client.get(f"/key/{token}")).text()
        assert key == TOKENS.callback_key(body["metadata"], cleaning=True)
        assert key != TOKENS.callback_key(body["metadata"]), "not the deployment's key"
        report = b"wiped\n"
        assert (
            await client.post(f"/cleaned/{token}", params={"result": "cleaned"}, data=report)
        ).status == 403
        assert markers.CLEANED not in kube.annotations
        assert not called_back.is_set()
        signed = {"result": "cleaned", "sig": reports.signature(key, "cleaned", "", report)}
        assert (await client.post(f"/cleaned/{token}", params=signed, data=report)).status == 204
        assert markers.CLEANED in kube.annotations
        assert called_back.is_set(), "the deletion waiting for the cleaner is told at once"


def cleaning_instance() -> dict[str, Any]:
    image = {"url": "https://images.example/node.raw", "checksum": DIGEST}
    body = image_instance(image, {markers.CALLED_BACK: "2026-01-01T00:00:00Z"})
    body["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    return body


async def test_a_cleaned_before_the_cleaner_booted_is_ignored_and_reported() -> None:
    """Someone on the provisioning network who knows the cleaning token and posts `cleaned` (or asks for
    the cleaning key) before the server's cleaner fetched its script is refused: the disk stays to be
    cleaned, and a Warning Event says who asked."""
    body = cleaning_instance()
    kube = FakeKube(body)
    async with serving_with(kube, body) as (client, token):
        assert (await client.post(f"/cleaned/{token}", params={"result": "cleaned"})).status == 403
        assert (await client.get(f"/key/{token}")).status == 403
        assert markers.CLEANED not in kube.annotations
        assert markers.CLEANING_KEY_FETCHED not in kube.annotations
        assert {(e["type"], e["reason"]) for e in kube.events} == {("Warning", "CleanedBeforeCleanerBooted")}
        assert "127.0.0.1" in kube.events[0]["message"]


async def test_the_cleaning_has_its_own_token_and_is_bound_to_the_cleaners_address() -> None:
    """The deployment's token (seen in its URLs) cannot report the server cleaned, and once the cleaner
    fetched its script from one address, another address gets neither the cleaning key nor `cleaned`."""
    body = cleaning_instance()
    kube = FakeKube(body)
    settings = BaremetalSettings(boot_url="http://boot:8081", boot_socket="/run/capfleet-boot/boot.sock")
    server, other = {front.REQUESTER_HEADER: "172.30.1.50"}, {front.REQUESTER_HEADER: "172.30.1.66"}
    deployment_token = TOKENS.of(body["metadata"])
    async with serving_with(kube, body, settings=settings) as (client, token):
        assert token != deployment_token
        assert (await client.post(f"/cleaned/{deployment_token}", headers=server)).status == 404
        mac = {"mac": "52:54:00:aa:bb:01"}
        assert (await client.get("/ipxe", params=mac, headers=server)).status == 200
        assert kube.annotations[markers.CLEANING_REQUESTER] == "172.30.1.50"
        assert (await client.get("/ipxe", params=mac, headers=other)).status == 403
        assert (await client.get(f"/key/{token}", headers=other)).status == 403
        assert (
            await client.post(f"/cleaned/{token}", params={"result": "cleaned"}, headers=other)
        ).status == 403
        assert markers.CLEANED not in kube.annotations
        assert {e["reason"] for e in kube.events} == {"BootRequestRefused"}
        key = await (await client.get(f"/key/{token}", headers=server)).text()
        report = b"wiped\n"
        signed = {"result": "cleaned", "sig": reports.signature(key, "cleaned", "", report)}
        assert (
            await client.post(f"/cleaned/{token}", params=signed, data=report, headers=server)
        ).status == 204
        assert markers.CLEANED in kube.annotations


async def test_an_unknown_reason_is_not_taken_and_a_bare_callback_is_a_success() -> None:
    async with serving_of(instance()) as (client, kube, token):
        await client.post(
            f"/callback/{token}", params={"result": "failed", "reason": "<script>"}, data="x" * 5000
        )
        kept = kube.annotations[markers.FAILURE_REPORTED]
        assert kept.startswith("DeployFailed: xxx")
        assert len(kept) < 400
    async with serving_of(instance()) as (client, kube, token):
        assert (await client.post(f"/callback/{token}")).status == 204
        assert markers.CALLED_BACK in kube.annotations
        assert (await client.post("/callback/not-the-token")).status == 404


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
    async with upstream(files) as (url, asked), aiohttp.ClientSession() as session:
        cache = imagecache.ImageCache(tmp_path / "cache", session, sources=LOOPBACK)
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
    async with upstream(files, redirects) as (url, asked), aiohttp.ClientSession() as session:
        unconfigured = imagecache.ImageCache(tmp_path / "a", session, own=())
        served = image_instance({"url": f"{url}/node.raw", "checksum": DIGEST})
        async with serving_of(served, unconfigured) as (client, _, token):
            reply = await client.get(f"/images/image?token={token}")
            assert reply.status == 403
            assert "CAPFLEET_IMAGE_SOURCE_CIDRS" in await reply.text()
        assert asked == [], "refused before any request"
        allowed = imagecache.ImageCache(tmp_path / "b", session, sources=LOOPBACK, own=())
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
    async with upstream(files) as (url, _), aiohttp.ClientSession() as session:
        room = len(IMAGE_BYTES) * 3 // 2  # one image fits, not two
        cache = imagecache.ImageCache(tmp_path / "c", session, max_bytes=room, sources=LOOPBACK)
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
