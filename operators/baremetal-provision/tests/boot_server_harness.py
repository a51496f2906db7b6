"""The boot HTTP server of baremetal-provision answering for one instance, through a fake API that
holds it (with the API server's resourceVersion precondition) and kopf-like indexes that have seen it
or not yet: what the serving tests drive."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import kopf
from aiohttp.test_utils import TestClient, TestServer
from baremetal_helpers import instance_body

from baremetal_provision import imagecache, markers, serving
from baremetal_provision.contexts import ATTEMPTS_KEY, INSTANCES, TOKENS_KEY, OpenedAttempts
from baremetal_provision.served import Served, served_of
from baremetal_provision.settings import BaremetalSettings
from capfleet import events, reconciling
from capfleet.kube import Conflict, Kube, Obj
from capfleet.resources import Resource

TOKENS = markers.Tokens(b"k" * 32)
"""The operator's token key in these tests (what the operator would have read from its Secret)."""


class FakeKube(Kube):
    """The instance and its user-data Secret; the annotations the server writes, with the API server's
    resourceVersion precondition; the Events it posts (a `Kube`, as memo must hold one)."""

    def __init__(self, instance: dict[str, Any]) -> None:
        self.instance = instance
        self.annotations: dict[str, str] = dict(instance["metadata"].get("annotations") or {})
        self.version = 1
        self.events: list[dict[str, Any]] = []
        self.field_manager = "test"

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if resource == INSTANCES:
            meta = {**self.instance["metadata"], "annotations": dict(self.annotations)}
            return {**self.instance, "metadata": {**meta, "resourceVersion": str(self.version)}}
        assert (name, namespace) == ("bm-bootstrap", "ns")
        return {"data": {"value": base64.b64encode(b"#cloud-config\n").decode()}}

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        strategic: bool = False,
    ) -> dict[str, Any] | None:
        if patch["metadata"].get("resourceVersion", str(self.version)) != str(self.version):
            raise Conflict(409, "Conflict", "the object has been modified")
        self.annotations.update(patch["metadata"]["annotations"])
        self.version += 1
        return None

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> Obj:
        self.events.append(body)
        return body


def instance(**spec: Any) -> dict[str, Any]:
    window = {markers.TOKEN_SALT: "s" * 32, markers.BOOT_WINDOW: "2026-01-01T00:00:00Z"}
    return instance_body(window, **spec)


def image_instance(image: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """An instance deploying `image` with the deploy ramdisk, its attempt open."""
    body = instance(image=image)
    del body["spec"]["os"]
    body["metadata"]["annotations"].update(annotations or {})
    return body


@contextlib.asynccontextmanager
async def serving_of(
    body: dict[str, Any], images: imagecache.ImageCache | None = None
) -> AsyncIterator[tuple[TestClient[Any, Any], FakeKube, str]]:
    """The boot server answering for one instance (`body`), with its token."""
    kube = FakeKube(body)
    async with serving_with(kube, body, images) as (client, token):
        yield client, kube, token


@contextlib.asynccontextmanager
async def serving_with(
    kube: Kube,
    body: dict[str, Any],
    images: imagecache.ImageCache | None = None,
    settings: BaremetalSettings | None = None,
    attempts: OpenedAttempts | None = None,
    indexed: bool = True,
) -> AsyncIterator[tuple[TestClient[Any, Any], str]]:
    """The boot server answering for one instance (`body`) through `kube`, with its token; unless
    `indexed`, its indexes have not seen it yet."""
    entry = served_of(body, TOKENS)
    assert entry is not None
    entries = {entry.spec.boot_mac_address: [entry]} if indexed else {}
    by_mac = cast(kopf.Index[str, Served], entries)
    by_token = cast(kopf.Index[str, Served], {entry.token: [entry]} if indexed else {})
    memo = cast(
        kopf.Memo,
        {
            reconciling.KUBE_KEY: kube,
            reconciling.EVENTS_KEY: events.Recorder(kube),
            ATTEMPTS_KEY: attempts or OpenedAttempts(),
            TOKENS_KEY: TOKENS,
        },
    )
    settings = settings or BaremetalSettings(boot_url="http://boot:8081")
    lookup = serving.Lookup(memo, by_mac, by_token, settings, images)
    async with TestClient(TestServer(serving.application(lookup))) as client:
        yield client, entry.token
