"""Signing in to the console with an OpenID Connect ID token, as people of a company with an identity
provider do: a real API server that trusts a real OIDC issuer on loopback (structured authentication
configuration; capfleet_e2e.oidc) answers the console's TokenReview, and RBAC bound to the user's OIDC
group decides what they see and may do through the console's impersonation. Tokens that are expired,
meant for another audience or signed by another key are refused at sign-in.

The API server is one of this module's own: the session's has no OIDC issuer configured."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from console_helpers import console_client, create_vm, sees_and_creates_nothing, sign_in  # type: ignore[import-not-found]
from cryptography.hazmat.primitives.asymmetric import rsa

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet.securemetrics import token_review
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.oidc import DISCOVERY_PATH, KEYS_PATH, PREFIX, OidcIssuer
from capfleet_e2e.pki import write_private
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
NAMESPACE = "team-a"
TEAM_GROUP = "team-a-engineers"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcIssuer]:
    with OidcIssuer(tmp_path_factory.mktemp("oidc")) as running:
        yield running


@pytest.fixture(scope="module")
def oidc_cluster(issuer: OidcIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    config = write_private(
        tmp_path_factory.mktemp("authn") / "authentication.yaml", issuer.authentication_config().encode()
    )
    with ControlPlane(apiserver_args=[f"--authentication-config={config}"]) as cluster:
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl(
            "create", "rolebinding", "engineers-console", "-n", NAMESPACE,
            "--clusterrole=capfleet-console-user", f"--group={PREFIX}{TEAM_GROUP}",
        )  # fmt: skip
        yield cluster


@pytest.fixture
async def admin(oidc_cluster: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube.connect("capfleet-tests", str(oidc_cluster.kubeconfig)) as client:
        yield client


@pytest.fixture
async def console(oidc_cluster: ControlPlane, tmp_path: Path) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    async with console_client(oidc_cluster, NAMESPACE, tmp_path, teams=(f"{PREFIX}{TEAM_GROUP}",)) as client:
        yield client


async def authenticated_as(admin: Kube, token: str) -> str | None:
    status = (await admin.create(resources.TOKEN_REVIEWS, token_review(token))).get("status") or {}
    return str(status["user"]["username"]) if status.get("authenticated") else None


async def accepted(admin: Kube, token: str) -> str:
    """Who `token` is, once the API server accepts it: it fetches the issuer's discovery document and keys
    in the background after it starts."""
    return await eventually(
        "the API server to accept the issuer's tokens", lambda: authenticated_as(admin, token), 60, 0.5
    )


async def test_a_user_signs_in_with_an_oidc_id_token_and_acts_through_their_group(
    console: TestClient,  # type: ignore[type-arg]
    issuer: OidcIssuer,
    admin: Kube,
) -> None:
    alice = issuer.id_token("alice@example.com", [TEAM_GROUP])
    assert await accepted(admin, alice) == f"{PREFIX}alice@example.com"
    assert {DISCOVERY_PATH, KEYS_PATH} <= set(issuer.fetches)

    answer = await sign_in(console, alice)
    assert (answer.status, answer.headers["Location"]) == (303, "/vms")
    html = await (await console.get("/vms")).text()
    assert f"{PREFIX}alice@example.com" in html
    assert alice not in html
    form = await create_vm(console, NAMESPACE, "web-1")
    vm = await admin.get(kinds.LIBVIRT_VM.resource, "web-1", NAMESPACE)
    assert vm is not None
    # Alice has no RoleBinding of her own: only her OIDC group is bound, so the console passed it on
    # (it is one the console is configured to pass on, CAPFLEET_CONSOLE_GROUPS).
    assert vm["metadata"]["annotations"]["capfleet.dev/created-by"] == f"{PREFIX}alice@example.com"
    listed = await (await console.get(f"/vms?namespace={NAMESPACE}&scope=mine")).text()
    assert 'data-name="web-1"' in listed

    await console.post("/signout", data={"form_token": form["form_token"]}, allow_redirects=False)
    bob = issuer.id_token("bob@example.com", ["team-b-engineers"])
    assert (await sign_in(console, bob)).status == 303
    await sees_and_creates_nothing(console, admin, NAMESPACE, form)


async def test_expired_misdirected_and_forged_id_tokens_are_refused_at_sign_in(
    console: TestClient,  # type: ignore[type-arg]
    issuer: OidcIssuer,
    admin: Kube,
) -> None:
    good = issuer.id_token("carol@example.com", [TEAM_GROUP])
    assert await accepted(admin, good) == f"{PREFIX}carol@example.com"
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = {
        "expired": issuer.id_token("carol@example.com", [TEAM_GROUP], lifetime=-60),
        "another audience": issuer.id_token("carol@example.com", [TEAM_GROUP], audience="another-app"),
        "another key": issuer.id_token("carol@example.com", [TEAM_GROUP], key=forger),
    }
    for why, token in refused.items():
        assert await authenticated_as(admin, token) is None, why
        answer = await sign_in(console, token)
        assert answer.status == 401, why
        assert "did not accept" in await answer.text(), why
        assert (await console.get("/vms", allow_redirects=False)).status == 303, why
