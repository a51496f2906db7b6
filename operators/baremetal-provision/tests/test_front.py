"""The boot front against a stand-in operator on a real UNIX socket: what it passes, what it stops before
the operator, and what it says about the requester. (The bare-metal suites run every guest through a real
front in front of the real operator, started with no environment but PATH.)"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from baremetal_provision import front
from baremetal_provision.reports import BODY_MAX
from capfleet_e2e.pki import CertificateAuthority
from capfleet_e2e.processes import free_port
from capfleet_e2e.waiting import eventually

IMAGE = bytes(range(256)) * (24 * 4096)  # 24 MiB, streamed in chunks


@dataclass
class Upstream:
    """What reached the stand-in operator."""

    seen: list[dict[str, Any]] = field(default_factory=list)

    async def answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen = {"method": request.method, "path": request.path_qs, "headers": dict(request.headers)}
        self.seen.append({**seen, "body": body})
        if request.path == "/images/image":
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            response.content_length = len(IMAGE)
            await response.prepare(request)
            for start in range(0, len(IMAGE), 1 << 20):
                await response.write(IMAGE[start : start + (1 << 20)])
            return response
        if request.path.startswith("/callback/"):
            return web.Response(status=204)
        return web.Response(text=f"#!ipxe\necho {request.path}\n", headers={"X-Internal": "kept back"})


@contextlib.asynccontextmanager
async def stand_in_operator(socket: Path) -> AsyncIterator[Upstream]:
    upstream = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", upstream.answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    try:
        yield upstream
    finally:
        await runner.cleanup()


@pytest.fixture
async def relayed(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], Upstream]]:
    socket = tmp_path / "boot.sock"
    relay = TestClient(TestServer(front.application(str(socket))))
    async with stand_in_operator(socket) as upstream, relay as client:
        yield client, upstream


async def test_boot_routes_reach_the_operator_with_the_peer_as_requester(
    relayed: tuple[TestClient[Any, Any], Upstream],
) -> None:
    client, upstream = relayed
    forged = {front.REQUESTER_HEADER: "172.30.1.50", "Authorization": "Bearer x", "Host": "boot.lab:8080"}
    answer = await client.get("/ipxe?mac=52-54-00-aa-bb-cc&uuid=x%20y", headers=forged)
    assert answer.status == 200
    assert await answer.text() == "#!ipxe\necho /ipxe\n"
    assert "X-Internal" not in answer.headers  # only the answer headers a guest needs
    [seen] = upstream.seen
    assert seen["path"] == "/ipxe?mac=52-54-00-aa-bb-cc&uuid=x%20y"
    assert seen["headers"][front.REQUESTER_HEADER] == "127.0.0.1"  # the peer, not what it claimed
    assert seen["headers"]["Host"] == "boot.lab:8080"  # the operator builds its URLs from it
    assert "Authorization" not in seen["headers"]
    report = b"deployed\nwrite_seconds: 36\n"
    answer = await client.post("/callback/t0ken?result=deployed", data=report)
    assert answer.status == 204
    assert upstream.seen[-1]["body"] == report
    assert upstream.seen[-1]["method"] == "POST"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/metrics", 404),
        ("GET", "/healthz", 404),
        ("GET", "/", 404),
        ("GET", "/files/../metrics", 404),
        ("GET", "/files/%2e%2e/metrics", 404),
        ("GET", "/seedling", 404),
        ("PUT", "/seed/t0ken/user-data", 405),
        ("DELETE", "/callback/t0ken", 405),
    ],
)
async def test_what_is_not_a_boot_route_never_reaches_the_operator(
    relayed: tuple[TestClient[Any, Any], Upstream], method: str, path: str, status: int
) -> None:
    client, upstream = relayed
    answer = await client.request(method, path)
    assert answer.status == status
    assert upstream.seen == []


async def test_an_oversized_body_is_refused_before_the_operator(
    relayed: tuple[TestClient[Any, Any], Upstream],
) -> None:
    client, upstream = relayed
    answer = await client.post("/callback/t0ken?result=failed", data=b"x" * (BODY_MAX + 1))
    assert answer.status == 413
    assert upstream.seen == []
    answer = await client.post("/callback/t0ken?result=failed", data=b"x" * BODY_MAX)
    assert answer.status == 204


async def test_an_image_streams_through_unchanged(relayed: tuple[TestClient[Any, Any], Upstream]) -> None:
    client, _ = relayed
    answer = await client.get("/images/image?token=t0ken")
    assert answer.status == 200
    assert answer.headers["Content-Length"] == str(len(IMAGE))
    digest = hashlib.sha256()
    async for chunk in answer.content.iter_chunked(1 << 16):
        digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(IMAGE).hexdigest()


async def test_without_the_operator_the_front_says_it_is_not_ready(tmp_path: Path) -> None:
    async with TestClient(TestServer(front.application(str(tmp_path / "absent.sock")))) as client:
        answer = await client.get("/boot.ipxe")
        assert answer.status == 503
        assert "not ready" in await answer.text()


def test_the_front_refuses_to_start_without_its_operator_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAPFLEET_BOOT_UPSTREAM", raising=False)
    with pytest.raises(SystemExit, match="CAPFLEET_BOOT_UPSTREAM"):
        front.main()


async def test_over_tls_too_and_a_renewed_certificate_is_taken_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(front, "CERTIFICATE_CHECK_SECONDS", 0.2)
    ca = CertificateAuthority.generate("boot-ca")
    cert_file, key_file, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)

    def issue() -> bytes:
        cert, key = ca.issue_serving("boot", ips=["127.0.0.1"])
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        return cert

    first = issue()
    plain, secure = free_port(), free_port()
    settings = front.FrontSettings(
        boot_listen=f"127.0.0.1:{plain}",
        boot_upstream=str(tmp_path / "boot.sock"),
        boot_tls_listen=f"127.0.0.1:{secure}",
        boot_tls_cert_file=str(cert_file),
        boot_tls_key_file=str(key_file),
    )
    trusted = ssl.create_default_context(cafile=str(ca_file))
    async with stand_in_operator(tmp_path / "boot.sock") as upstream:
        serving = asyncio.create_task(front.serve(settings))
        try:
            async with aiohttp.ClientSession() as client:

                async def answered() -> str | None:
                    with contextlib.suppress(aiohttp.ClientConnectionError):
                        async with client.get(f"https://127.0.0.1:{secure}/ipxe", ssl=trusted) as answer:
                            return await answer.text()
                    return None

                assert await eventually("the front's TLS listener", answered, 30) == "#!ipxe\necho /ipxe\n"
                assert upstream.seen[-1]["headers"][front.REQUESTER_HEADER] == "127.0.0.1"
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    await client.get(f"https://127.0.0.1:{secure}/ipxe", ssl=ssl.create_default_context())
                async with client.get(f"http://127.0.0.1:{plain}/boot.ipxe") as answer:
                    assert answer.status == 200
            served = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", secure))
            assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(first.decode())
            renewed = issue()
            os.utime(cert_file, (1, 1))  # a new stamp, even within the file system's resolution

            async def renewed_served() -> bool:
                served = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", secure))
                return ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(renewed.decode())

            await eventually("the renewed certificate to be served", renewed_served, 10)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
