"""The console over HTTP against the real API server, as its own ServiceAccount (impersonation only):
sign-in by TokenReview, the session cookie's flags, form tokens, security headers, and a VM created for
one user (with its creator and its Secret owned by it) while another user without RBAC creates nothing.
No operator runs: these check what the console writes and refuses; the browser suite checks the rest."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from console_helpers import console_client, create_vm, sees_and_creates_nothing, sign_in  # type: ignore[import-not-found]

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet.securemetrics import token_review
from capfleet_console import vmform
from capfleet_console.app import VMS_PER_PAGE
from capfleet_e2e.console import console_user
from capfleet_e2e.controlplane import Cluster

pytestmark = pytest.mark.integration


@pytest.fixture
async def console(control_plane: Cluster, namespace: str, tmp_path: Path) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    async with console_client(control_plane, namespace, tmp_path) as client:
        yield client


async def test_sign_in_sessions_and_what_a_page_sends(
    console: TestClient,  # type: ignore[type-arg]
    control_plane: Cluster,
    namespace: str,
) -> None:
    page = await console.get("/vms", allow_redirects=False)
    assert (page.status, page.headers["Location"]) == (303, "/signin")

    refused = await sign_in(console, "not-a-token")
    assert refused.status == 401
    assert "did not accept" in await refused.text()

    token = console_user(control_plane, namespace, "alice", bound=True)
    answer = await sign_in(console, token)
    assert (answer.status, answer.headers["Location"]) == (303, "/vms")
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie

    page = await console.get("/vms")
    html = await page.text()
    assert f"system:serviceaccount:{namespace}:alice" in html
    assert token not in html
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["Cache-Control"] == "no-store"

    forged = await console.post("/vms", data={"name": "x", "form_token": "forged"}, allow_redirects=False)
    assert forged.status == 403


async def test_a_vm_made_for_one_user_and_nothing_for_a_user_without_rbac(
    console: TestClient,  # type: ignore[type-arg]
    control_plane: Cluster,
    kube: Kube,
    namespace: str,
) -> None:
    await sign_in(console, console_user(control_plane, namespace, "alice", bound=True))
    form = await create_vm(console, namespace, "web-1")
    vm = await kube.get(kinds.LIBVIRT_VM.resource, "web-1", namespace)
    assert vm is not None
    assert (
        vm["metadata"]["annotations"]["capfleet.dev/created-by"] == f"system:serviceaccount:{namespace}:alice"
    )
    assert vm["spec"]["interfaces"][0]["userMode"] is True
    secret = await kube.get(resources.SECRETS, "web-1-user-data", namespace)
    assert secret is not None
    assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [vm["metadata"]["uid"]]
    listed = await (await console.get(f"/vms?namespace={namespace}")).text()
    assert 'data-name="web-1"' in listed
    assert "AAAAC3NzaC1lZDI1NTE5" not in listed

    bad = await console.post(f"/vms?namespace={namespace}", data={**form, "name": "Bad_Name"})
    assert bad.status == 422
    assert "lower-case letters" in await bad.text()

    await console.post("/signout", data={"form_token": form["form_token"]}, allow_redirects=False)
    await sign_in(console, console_user(control_plane, namespace, "bob", bound=False))
    await sees_and_creates_nothing(console, kube, namespace, form)


async def test_the_vm_list_pages_and_my_vms_are_selected_by_the_api_server(
    console: TestClient,  # type: ignore[type-arg]
    control_plane: Cluster,
    kube: Kube,
    namespace: str,
) -> None:
    """A page holds VMS_PER_PAGE VMs and links the next; "My VMs" are those labelled with the user's creator
    label, whichever page they would fall on among all."""
    total = VMS_PER_PAGE + 5
    token = console_user(control_plane, namespace, "alice", bound=True)
    assert (await sign_in(console, token)).status == 303
    alice = (await kube.create(resources.TOKEN_REVIEWS, token_review(token)))["status"]["user"]["username"]
    for index in range(total):
        creator = alice if index == total - 1 else "bob"  # the last in name order is alice's
        wanted = vmform.VMRequest(f"vm-{index:03d}", 1, 1, 1, "base", "#cloud-config\n")
        body = vmform.libvirt_vm(wanted, namespace, creator, {"userMode": True})
        await kube.create(kinds.LIBVIRT_VM.resource, body, namespace)

    first = await (await console.get(f"/vms?namespace={namespace}&scope=all")).text()
    assert first.count("<tr class=") == VMS_PER_PAGE
    link = re.search(r'id="next-page" href="([^"]+)"', first)
    assert link is not None
    second = await (await console.get(link.group(1).replace("&amp;", "&"))).text()
    assert second.count("<tr class=") == total - VMS_PER_PAGE
    assert 'id="next-page"' not in second
    mine = await (await console.get(f"/vms?namespace={namespace}&scope=mine")).text()
    assert re.findall(r'data-name="([^"]+)"', mine) == [f"vm-{total - 1:03d}"]
