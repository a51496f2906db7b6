"""What the console's HTTP suites share: the console in-process as its own ServiceAccount (impersonation
only) against a given API server, signing in, and reading a page's form token."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_console.acting import KubeconfigCredentials
from capfleet_console.app import build
from capfleet_console.settings import ConsoleSettings
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.serviceaccounts import (
    NAMESPACE,
    apply_operator_rbac,
    service_account_kubeconfig,
    service_account_name,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ3wzYd0GnDnEc6Y6VxVtM1iYgV4bB3f0tTxVN1Z7u9 alice@laptop"


@contextlib.asynccontextmanager
async def console_client(
    cluster: Cluster, namespace: str, workdir: Path, teams: tuple[str, ...] = ()
) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    """The console on `cluster` with its own RBAC and token, its default namespace `namespace`; `teams`
    are groups it passes on besides `system:authenticated`, granted as a deployer does: in its settings
    and in a ClusterRole that lets it impersonate exactly them."""
    apply_operator_rbac(cluster.kubectl, "console")
    if teams:
        grant_team_impersonation(cluster, teams)
    kubeconfig = service_account_kubeconfig(cluster, "console", workdir / "console.kubeconfig")
    groups = ",".join(("system:authenticated", *teams))
    settings = ConsoleSettings(
        images="base", interface="user", namespace=namespace, secure_cookies=False, groups=groups
    )
    credentials = await KubeconfigCredentials.load(str(kubeconfig), in_cluster=False)
    async with Kube.connect("capfleet-console", str(kubeconfig)) as reviewer:
        client = TestClient(TestServer(build(settings, reviewer, credentials)))
        await client.start_server()
        try:
            yield client
        finally:
            await client.close()


def grant_team_impersonation(cluster: Cluster, teams: tuple[str, ...]) -> None:
    name = "capfleet-console-teams"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["groups"],
                "verbs": ["impersonate"],
                "resourceNames": list(teams),
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": service_account_name("console"), "namespace": NAMESPACE}
        ],
    }
    items = {"apiVersion": "v1", "kind": "List", "items": [role, binding]}
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(items))


async def sign_in(client: TestClient, token: str) -> aiohttp.ClientResponse:  # type: ignore[type-arg]
    return await client.post("/signin", data={"token": token}, allow_redirects=False)


def form_token(html: str) -> str:
    found = re.search(r'name="form_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


async def create_vm(client: TestClient, namespace: str, name: str) -> dict[str, str]:  # type: ignore[type-arg]
    """Fill in and send the Create VM form as the signed-in user; returns the form as sent."""
    html = await (await client.get("/vms")).text()
    form = {
        "form_token": form_token(html),
        "name": name,
        "vcpus": "1",
        "memory_gib": "1",
        "disk_gib": "2",
        "image": "base",
        "ssh_key": KEY,
    }
    made = await client.post(f"/vms?namespace={namespace}", data=form, allow_redirects=False)
    assert made.status == 303, await made.text()
    return form


async def sees_and_creates_nothing(
    client: TestClient,  # type: ignore[type-arg]
    admin: Kube,
    namespace: str,
    form: dict[str, str],
) -> None:
    """The signed-in user, without RBAC in `namespace`, is told Forbidden, sees none of its VMs and cannot
    create one with `form` (another user's, resent): neither the VM nor its Secret exists afterwards."""
    html = await (await client.get(f"/vms?namespace={namespace}&scope=all")).text()
    assert "Forbidden" in html
    assert f'data-name="{form["name"]}"' not in html
    sneaky = await client.post(
        f"/vms?namespace={namespace}", data={**form, "name": "sneaky", "form_token": form_token(html)}
    )
    assert "Forbidden" in await sneaky.text()
    assert await admin.get(kinds.LIBVIRT_VM.resource, "sneaky", namespace) is None
    assert await admin.get(resources.SECRETS, "sneaky-user-data", namespace) is None
