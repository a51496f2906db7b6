"""The boot HTTP server's answers, against kopf-like indexes and a fake API (no cluster): the per-MAC
iPXE script, the NoCloud seed under the instance's token, the guest's callbacks (what a hostile caller
can and cannot put in the marks) and the image cache against a real upstream HTTP server."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import kopf
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from baremetal_provision import imagecache, markers, serving
from baremetal_provision.settings import BaremetalSettings
from capfleet import cloudinit, reconciling
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet.resources import Resource

TOKEN_SECRET = "s" * 64


class FakeKube(Kube):
    """The user-data Secret, and the annotations the server writes (a `Kube`, as memo must hold one)."""

    def __init__(self) -> None:
        self.annotations: dict[str, str] = {}

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert (name, namespace) == ("bm-bootstrap", "ns")
        return {"data": {"value": base64.b64encode(b"#cloud-config\n").decode()}}

    async def patch(
        self, resource: Resource, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any] | None:
        self.annotations.update(patch["metadata"]["annotations"])
        return None


def instance(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{kinds.BAREMETAL_GROUP}/{kinds.VERSION}",
        "kind": "BaremetalInstance",
        "metadata": {"name": "bm", "namespace": "ns", "annotations": {markers.TOKEN_SECRET: TOKEN_SECRET}},
        "spec": {
            "bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bm-bmc"}},
            "bootMACAddress": "52:54:00:aa:bb:01",
            "os": {"kernelURL": "http://h/k", "initrdURL": "http://h/i"},
            "userDataSecretRef": {"name": "bm-bootstrap"},
            **spec,
        },
    }


@contextlib.asynccontextmanager
async def serving_of(
    body: dict[str, Any], images: imagecache.ImageCache | None = None
) -> AsyncIterator[tuple[TestClient[Any, Any], FakeKube, str]]:
    """The boot server answering for one instance (`body`), with its token."""
    entry = serving.served_of(body)
    assert entry is not None
    kube = FakeKube()
    by_mac = cast(kopf.Index[str, serving.Served], {entry.spec.boot_mac_address: [entry]})
    by_token = cast(kopf.Index[str, serving.Served], {entry.token: [entry]})
    memo = cast(kopf.Memo, {reconciling.KUBE_KEY: kube})
    settings = BaremetalSettings(boot_url="http://boot:8081")
    lookup = serving.Lookup(memo, by_mac, by_token, settings, images)
    async with TestClient(TestServer(serving.application(lookup))) as client:
        yield client, kube, entry.token


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestClient[Any, Any], FakeKube, str]]:
    given = instance(hostname="node-1", interfaces=[{"name": "eno1", "macAddress": "52:54:00:aa:bb:01"}])
    async with serving_of(given) as found:
        yield found


async def test_the_per_mac_script_boots_the_installer(
    served: tuple[TestClient[Any, Any], FakeKube, str],
) -> None:
    client, _, token = served
    reply = await client.get("/ipxe", params={"mac": "52-54-00-AA-BB-01"})
    assert reply.status == 200
    assert f"ds=nocloud-net;s=http://boot:8081/seed/{token}/" in await reply.text()
    unknown = await client.get("/ipxe", params={"mac": "52-54-00-AA-BB-02"})
    assert unknown.status == 404


async def test_the_seed_is_served_under_the_token(served: tuple[TestClient[Any, Any], FakeKube, str]) -> None:
    client, kube, token = served
    meta = yaml.safe_load(await (await client.get(f"/seed/{token}/meta-data")).text())
    assert meta["instance-id"] == cloudinit.instance_id("ns", "bm")
    assert meta["local-hostname"] == "node-1"
    network = yaml.safe_load(await (await client.get(f"/seed/{token}/network-config")).text())
    assert network["ethernets"]["eno1"]["match"] == {"macaddress": "52:54:00:aa:bb:01"}
    assert markers.SEED_FETCHED not in kube.annotations
    user_data = await client.get(f"/seed/{token}/user-data")
    assert await user_data.read() == b"#cloud-config\n"
    assert markers.SEED_FETCHED in kube.annotations
    assert (await client.get("/seed/not-the-token/meta-data")).status == 404


IMAGE_BYTES = bytes(range(256)) * 4096
DIGEST = hashlib.sha256(IMAGE_BYTES).hexdigest()


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


async def test_a_failure_report_is_kept_with_a_known_reason_and_without_the_token(
    served: tuple[TestClient[Any, Any], FakeKube, str],
) -> None:
    client, kube, token = served
    report = (
        f"downloading http://boot:8081/images/{token}/image failed: 404\x1b[31m\n"
        "result: failed\nseconds_total: 12.5\n"
    )
    reply = await client.post(
        f"/callback/{token}", params={"result": "failed", "reason": "DownloadFailed"}, data=report
    )
    assert reply.status == 204
    kept = kube.annotations[markers.FAILURE_REPORTED]
    assert kept == "DownloadFailed: downloading http://boot:8081/images/<token>/image failed: 404?[31m"
    assert token not in kept
    assert markers.CALLED_BACK not in kube.annotations


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
async def upstream(files: dict[str, bytes]) -> AsyncIterator[tuple[str, list[str]]]:
    """A real HTTP server with `files`; yields its URL and the paths it was asked for."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
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
        cache = imagecache.ImageCache(tmp_path / "cache", session)
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
