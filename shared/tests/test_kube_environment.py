"""The API client reads the environment once: the proxy it names for the API server is used, `.netrc` is
not (the kubeconfig's credentials are the API server's), and no request waits on a thread to look either
up again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from capfleet import resources
from capfleet.kube import Kube

TOKEN = "generated-for-this-test"
Seen = list[tuple[str, str, str, str]]  # (server, request target, Authorization, Proxy-Authorization)
PROXY_AUTHORIZATION = "Basic c29tZW9uZTpnZW5lcmF0ZWQ="  # someone:generated


@pytest.fixture
async def server() -> AsyncIterator[Callable[[str, Seen], Awaitable[str]]]:
    """Starts loopback HTTP servers that answer every request with an empty Secret and note what came."""
    runners: list[web.AppRunner] = []

    async def start(name: str, seen: Seen) -> str:
        async def answer(request: web.Request) -> web.Response:
            # A request through a proxy names the whole URL; one sent directly, its path.
            headers = request.headers
            seen.append(
                (
                    name,
                    request.raw_path,
                    headers.get("Authorization", ""),
                    headers.get("Proxy-Authorization", ""),
                )
            )
            return web.json_response({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def kubeconfig(tmp_path: Path, host: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": host}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    return str(path)


def netrc_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host} login someone password generated\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))


async def test_netrc_is_not_read_and_no_request_waits_on_a_thread(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: Seen = []
    api = await server("api", seen)
    netrc_for(tmp_path, monkeypatch, "127.0.0.1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    loop = asyncio.get_running_loop()
    hops: list[object] = []
    original = loop.run_in_executor

    def counting(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(func)
        return original(executor, func, *args)

    async with Kube.connect("test", kubeconfig(tmp_path, api)) as kube:
        monkeypatch.setattr(loop, "run_in_executor", counting)
        assert await kube.get(resources.SECRETS, "s", "ns") is not None
        assert await kube.get(resources.SECRETS, "s", "ns") is not None
    assert seen == [("api", "/api/v1/namespaces/ns/secrets/s", f"Bearer {TOKEN}", "")] * 2
    assert hops == []


async def test_the_environment_s_proxy_is_used_unless_no_proxy_exempts_the_api_server(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: Seen = []
    api, proxy = await server("api", seen), await server("proxy", seen)
    monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://someone:generated@"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with Kube.connect("test", kubeconfig(tmp_path, api)) as kube:
        await kube.get(resources.SECRETS, "s", "ns")
    assert seen == [
        ("proxy", f"{api}/api/v1/namespaces/ns/secrets/s", f"Bearer {TOKEN}", PROXY_AUTHORIZATION)
    ]

    seen.clear()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with Kube.connect("test", kubeconfig(tmp_path, api)) as kube:
        await kube.get(resources.SECRETS, "s", "ns")
    assert seen == [("api", "/api/v1/namespaces/ns/secrets/s", f"Bearer {TOKEN}", "")]
