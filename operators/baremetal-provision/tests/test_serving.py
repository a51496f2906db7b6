"""The boot HTTP server's answers, against kopf-like indexes and a fake API (no cluster): the per-MAC
iPXE script and the NoCloud seed under the instance's token."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any, cast

import kopf
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from baremetal_provision import markers, serving
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


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestClient[Any, Any], FakeKube, str]]:
    entry = serving.served_of(
        instance(hostname="node-1", interfaces=[{"name": "eno1", "macAddress": "52:54:00:aa:bb:01"}])
    )
    assert entry is not None
    kube = FakeKube()
    by_mac = cast(kopf.Index[str, serving.Served], {entry.spec.boot_mac_address: [entry]})
    by_token = cast(kopf.Index[str, serving.Served], {entry.token: [entry]})
    memo = cast(kopf.Memo, {reconciling.KUBE_KEY: kube})
    lookup = serving.Lookup(memo, by_mac, by_token, "http://boot:8081")
    async with TestClient(TestServer(serving.application(lookup, None))) as client:
        yield client, kube, entry.token


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
