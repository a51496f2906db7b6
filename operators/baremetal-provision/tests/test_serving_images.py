"""The boot HTTP server for instances with an image: the deploy ramdisk's script, its signed callbacks
(keys served once, the cleaner's of its own), its failure reports, and the image cache against a real
upstream HTTP server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from boot_server_harness import TOKENS, FakeKube, image_instance, instance, serving_of, serving_with

from baremetal_provision import front, markers, reports
from baremetal_provision.contexts import OpenedAttempts
from baremetal_provision.settings import BaremetalSettings

DIGEST = hashlib.sha256(b"an image").hexdigest()


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
