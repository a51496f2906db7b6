"""The API client gives up on an API server that accepts a request and never answers, with the error
callers already handle as "retry later", instead of hanging a handler (and a deletion) for ever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from kubernetes_asyncio import client

from capfleet import resources
from capfleet.kube import Kube, KubeError


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A TCP server on loopback that reads requests and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(65536)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"
        for writer in held:
            writer.close()


async def test_a_silent_api_server_is_an_error_after_the_timeout(silent_server: str) -> None:
    configuration = client.Configuration(host=silent_server)
    async with client.ApiClient(configuration=configuration) as api:
        kube = Kube(api, "test", timeout=aiohttp.ClientTimeout(total=0.5))
        started = time.monotonic()
        with pytest.raises(KubeError) as raised:
            await kube.get(resources.SECRETS, "s", "ns")
    assert time.monotonic() - started < 5
    assert (raised.value.status, raised.value.reason) == (0, "Unavailable")
    assert "GET /api/v1/namespaces/ns/secrets/s" in raised.value.message


async def test_a_timeout_says_when_every_connection_was_in_use(silent_server: str) -> None:
    configuration = client.Configuration(host=silent_server)
    configuration.connection_pool_maxsize = 2
    async with client.ApiClient(configuration=configuration) as api:
        patient = Kube(api, "test", timeout=aiohttp.ClientTimeout(total=30))
        hogs = [asyncio.create_task(patient.get(resources.SECRETS, f"s{i}", "ns")) for i in range(2)]
        await asyncio.sleep(0.2)
        queued = Kube(api, "test", timeout=aiohttp.ClientTimeout(total=0.5))
        with pytest.raises(KubeError) as raised:
            await queued.get(resources.SECRETS, "s", "ns")
        for hog in hogs:
            hog.cancel()
        await asyncio.gather(*hogs, return_exceptions=True)
    assert raised.value.message.endswith("(2 of 2 connections in use)")
