"""The boot HTTP server's answers, against kopf-like indexes and a fake API (no cluster): the per-MAC
iPXE script, the NoCloud seed under the instance's token, the guest's callbacks (what a hostile caller
can and cannot put in the marks), and what it serves before kopf's index caught up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, cast

import kopf
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from baremetal_helpers import b64
from boot_server_harness import TOKENS, FakeKube, instance, serving_of, serving_with

from baremetal_provision import front, markers, serving
from baremetal_provision.contexts import ATTEMPTS_KEY, INSTANCES, TOKENS_KEY, OpenedAttempts
from baremetal_provision.served import Served, served_of
from baremetal_provision.settings import BaremetalSettings
from capfleet import cloudinit, events, reconciling, resources
from capfleet.kube import Kube
from capfleet_e2e.waiting import eventually


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


async def test_the_user_data_is_served_once_per_attempt_and_a_second_fetch_is_reported(
    served: tuple[TestClient[Any, Any], FakeKube, str],
) -> None:
    client, kube, token = served
    first, second = [await client.get(f"/seed/{token}/user-data") for _ in range(2)]
    assert (first.status, second.status) == (200, 403)
    assert await first.read() == b"#cloud-config\n"
    assert b"cloud-config" not in await second.read()
    (event,) = kube.events
    assert (event["type"], event["reason"]) == ("Warning", "SeedRefetchRefused")
    assert "127.0.0.1" in event["message"]
    assert token not in event["message"]
    # meta-data holds no secret: it stays readable for the rest of the attempt
    assert (await client.get(f"/seed/{token}/meta-data")).status == 200


@pytest.mark.parametrize(
    ("boot_socket", "named"),
    [("/run/capfleet-boot/boot.sock", "172.30.1.50"), (None, "127.0.0.1")],
    ids=["behind the front", "on TCP"],
)
async def test_a_refused_fetch_names_the_requester_the_front_saw_and_only_behind_it(
    boot_socket: str | None, named: str
) -> None:
    """Behind the front (a UNIX socket no one else reaches) its requester header names the guest; on TCP
    anyone could send the header, so the peer's address is named instead."""
    body = instance(hostname="node-1")
    kube = FakeKube(body)
    settings = BaremetalSettings(boot_url="http://boot:8081", boot_socket=boot_socket)
    async with serving_with(kube, body, settings=settings) as (client, token):
        relayed = {front.REQUESTER_HEADER: "172.30.1.50"}
        replies = [await client.get(f"/seed/{token}/user-data", headers=relayed) for _ in range(2)]
    assert [r.status for r in replies] == [200, 403]
    (event,) = kube.events
    assert f"from {named} was refused" in event["message"]


@pytest.mark.integration
async def test_of_fetches_at_once_only_one_gets_the_user_data(kube: Kube, namespace: str) -> None:
    """Against the real API server: the resourceVersion precondition lets exactly one of eight concurrent
    fetches through, and the refusals make one Warning Event."""
    bootstrap = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bm-bootstrap"}}
    await kube.create(resources.SECRETS, {**bootstrap, "data": {"value": b64("#cloud-config\n")}}, namespace)
    body = instance()
    body["metadata"]["namespace"] = namespace
    created = await kube.create(INSTANCES, body, namespace)
    async with serving_with(kube, created) as (client, token):
        replies = await asyncio.gather(*(client.get(f"/seed/{token}/user-data") for _ in range(8)))
    assert sorted(reply.status for reply in replies) == [200] + [403] * 7
    found = await kube.get(INSTANCES, "bm", namespace)
    assert found is not None
    assert markers.SEED_FETCHED in found["metadata"]["annotations"]

    async def refused() -> list[dict[str, Any]] | None:
        warned = [
            e for e in await kube.list(resources.EVENTS, namespace) if e["reason"] == "SeedRefetchRefused"
        ]
        return warned or None

    assert len(await eventually("the refusal's Warning Event", refused, within=10)) == 1


async def test_nothing_is_served_before_the_operator_opens_the_boot_window() -> None:
    body = instance()
    del body["metadata"]["annotations"][markers.BOOT_WINDOW]
    async with serving_of(body) as (client, kube, token):
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert script.splitlines()[-1] == "exit"
        assert token not in script
        assert (await client.get(f"/seed/{token}/meta-data")).status == 404
        assert (await client.get(f"/seed/{token}/user-data")).status == 404
        assert (await client.post(f"/callback/{token}")).status == 404
        assert kube.annotations == body["metadata"]["annotations"]


async def test_a_window_the_index_has_not_seen_yet_is_read_from_the_api_server() -> None:
    """The operator opened the window and powered the server on; the index's copy is a moment behind."""
    body = instance()
    opened = body["metadata"]["annotations"].pop(markers.BOOT_WINDOW)
    kube = FakeKube(body)
    kube.annotations[markers.BOOT_WINDOW] = opened
    async with serving_with(kube, body) as (client, token):
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert script.splitlines()[-1] == "boot"
        assert token in script


async def test_an_instance_the_index_knows_only_by_its_mac_is_read_from_the_api_server() -> None:
    """The operator wrote the token and opened the window; the index has seen neither yet."""
    body = instance()
    annotations = body["metadata"].pop("annotations")
    kube = FakeKube(body)
    kube.annotations.update(annotations)
    async with serving_with(kube, body) as (client, token):
        assert token == ""
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert script.splitlines()[-1] == "boot"
        kube.annotations.clear()
        script = await (await client.get("/ipxe", params={"mac": "52:54:00:aa:bb:01"})).text()
        assert script.splitlines()[-1] == "exit"


async def test_a_token_the_index_has_not_seen_is_served_if_this_process_opened_its_attempt() -> None:
    body = instance()
    attempts = OpenedAttempts()
    async with serving_with(FakeKube(body), body, attempts=attempts, indexed=False) as (client, token):
        assert (await client.get(f"/seed/{token}/meta-data")).status == 404
        attempts.opened(token, "ns", "bm")
        assert (await client.get(f"/seed/{token}/meta-data")).status == 200
        assert (await client.get("/seed/not-a-token/meta-data")).status == 404


async def test_the_seed_and_callback_die_with_their_attempt() -> None:
    body = instance()
    async with serving_of(body) as (client, _, token):
        assert (await client.get(f"/seed/{token}/meta-data")).status == 200
    body["metadata"]["annotations"][markers.FAILED_ATTEMPTS] = "1"
    async with serving_of(body) as (client, kube, next_token):
        assert next_token != token
        assert (await client.get(f"/seed/{token}/user-data")).status == 404
        assert (await client.post(f"/callback/{token}")).status == 404
        assert markers.SEED_FETCHED not in kube.annotations
        assert (await client.get(f"/seed/{next_token}/user-data")).status == 200
    body["metadata"]["annotations"][markers.CALLED_BACK] = "2026-01-01T00:00:00Z"
    async with serving_of(body) as (client, _, token):
        assert (await client.get(f"/seed/{token}/user-data")).status == 404, "no seed after the callback"


class LiveIndex(Mapping[str, list[Served]]):
    """kopf's index of the one instance as FakeKube holds it now (as kopf's watch keeps it current)."""

    def __init__(self, kube: FakeKube, key: Callable[[Served], str]) -> None:
        self.kube, self.key = kube, key

    def _entry(self) -> Served | None:
        meta = {**self.kube.instance["metadata"], "annotations": dict(self.kube.annotations)}
        return served_of({**self.kube.instance, "metadata": meta}, TOKENS)

    def __getitem__(self, key: str) -> list[Served]:
        entry = self._entry()
        if entry is None or self.key(entry) != key:
            raise KeyError(key)
        return [entry]

    def __iter__(self) -> Iterator[str]:
        entry = self._entry()
        return iter([self.key(entry)] if entry is not None else [])

    def __len__(self) -> int:
        return len(list(iter(self)))


async def test_an_attempt_is_served_only_to_the_address_that_fetched_its_script() -> None:
    """Behind the front: the first address to fetch the per-MAC script binds the attempt; another address
    gets neither script nor seed nor callback through, each refusal a Warning Event naming both, and the
    bound address is served as before."""
    body = instance()
    kube = FakeKube(body)
    memo = cast(
        kopf.Memo,
        {
            reconciling.KUBE_KEY: kube,
            reconciling.EVENTS_KEY: events.Recorder(kube),
            ATTEMPTS_KEY: OpenedAttempts(),
            TOKENS_KEY: TOKENS,
        },
    )
    settings = BaremetalSettings(boot_url="http://boot:8081", boot_socket="/run/capfleet-boot/boot.sock")
    by_mac = cast(kopf.Index[str, Served], LiveIndex(kube, lambda e: e.spec.boot_mac_address))
    by_token = cast(kopf.Index[str, Served], LiveIndex(kube, lambda e: e.token))
    lookup = serving.Lookup(memo, by_mac, by_token, settings)
    server, other = {front.REQUESTER_HEADER: "172.30.1.50"}, {front.REQUESTER_HEADER: "172.30.1.66"}
    token = TOKENS.of({**body["metadata"], "annotations": kube.annotations})
    assert token is not None
    async with TestClient(TestServer(serving.application(lookup))) as client:
        mac = {"mac": "52-54-00-aa-bb-01"}
        assert (await client.get(f"/seed/{token}/meta-data", headers=other)).status == 200, "not bound yet"
        script = await client.get("/ipxe", params=mac, headers=server)
        assert script.status == 200
        assert kube.annotations[markers.BOOT_REQUESTER] == "172.30.1.50"
        stolen = await client.get("/ipxe", params=mac, headers=other)
        assert stolen.status == 403
        assert token not in await stolen.text()
        for path in (f"/seed/{token}/meta-data", f"/seed/{token}/user-data"):
            assert (await client.get(path, headers=other)).status == 403
        assert (await client.post(f"/callback/{token}?result=deployed", headers=other)).status == 403
        assert markers.SEED_FETCHED not in kube.annotations
        assert markers.CALLED_BACK not in kube.annotations
        (event,) = kube.events  # one Event for the refusals in a row
        assert (event["type"], event["reason"]) == ("Warning", "BootRequestRefused")
        assert "172.30.1.66" in event["message"]
        assert "bound to 172.30.1.50" in event["message"]
        assert token not in event["message"]
        assert (await client.get("/ipxe", params=mac, headers=server)).status == 200
        user_data = await client.get(f"/seed/{token}/user-data", headers=server)
        assert await user_data.read() == b"#cloud-config\n"
        assert (await client.post(f"/callback/{token}", headers=server)).status == 204
        assert markers.CALLED_BACK in kube.annotations


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
