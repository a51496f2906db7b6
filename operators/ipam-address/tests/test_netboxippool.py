"""NetboxIPPool: addresses from NetBox through its atomic available-ips, on the real control plane.

Runs against real NetBox 4.4.10 (4.6.8 for v2 tokens), one empty database per test, behind the harness's
fault-injecting proxy.
"""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
from ipam_helpers import (
    ADDRESSES,
    CLAIMS,
    bound_address,
    claim_condition,
    create_claim,
    gone,
    pool_ref,
    ready,
)
from netbox_setup import (
    OWNER_FIELD,
    create_connection_secret,
    create_netbox_pool,
    create_prefixes,
    ensure_owner_field_and_tag,
    owned_ips,
)

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

NB = "NetboxIPPool"
INSTANCE = "mgmt-a"
ENV = {"CAPFLEET_INSTANCE_NAME": INSTANCE}


def owner(namespace: str, claim: str) -> str:
    return f"{INSTANCE}/{namespace}/{claim}@nb"


async def pool_ready(kube: Kube, namespace: str, name: str, reason: str) -> dict[str, object]:
    async def probe() -> dict[str, object] | None:
        condition = ready(await kube.get(kinds.NETBOX_IPPOOL.resource, name, namespace))
        return condition if condition and condition["reason"] == reason else None

    return await eventually(f"{name} Ready reason {reason}", probe, within=90)


async def test_allocates_in_order_tags_owners_and_releases(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    ensure_owner_field_and_tag(netbox)
    prefixes = create_prefixes(netbox, 60)
    await create_connection_secret(kube, namespace, netbox)
    await create_netbox_pool(kube, namespace, "nb", [prefixes.small, prefixes.large], tenant=None)
    operator = run_operator("ipam_address", namespaces=[namespace], env=ENV)
    await pool_ready(kube, namespace, "nb", "Ready")

    for name in ("c1", "c2", "c3"):
        await create_claim(kube, namespace, name, pool_ref("nb", NB))
    bound = {name: await bound_address(kube, namespace, name) for name in ("c1", "c2", "c3")}
    assert sorted(bound.values())[:2] == ["10.60.0.1", "10.60.0.2"], "the first prefix is used first"
    assert sorted(bound.values())[2] == "10.60.1.1", "a full prefix (409) moves on to the next one"

    ips = owned_ips(netbox, prefixes.vrf_id)
    assert set(ips) == {owner(namespace, name) for name in bound}
    second = next(name for name, address in bound.items() if address == "10.60.1.1")
    ip = ips[owner(namespace, second)]
    assert ip["address"] == "10.60.1.1/28"
    assert [t["slug"] for t in ip["tags"]] == ["capfleet"]
    assert ip["description"] == f"capfleet: IPAddressClaim {namespace}/{second}"
    address = await kube.get(ADDRESSES, second, namespace)
    assert address is not None
    assert address["spec"]["prefix"] == 28

    await kube.delete(CLAIMS, "c1", namespace)
    await gone(kube, CLAIMS, "c1", namespace)
    assert owner(namespace, "c1") not in owned_ips(netbox, prefixes.vrf_id), "release deletes the NetBox IP"
    log = operator.log()
    assert "Secret" in log or "secret" in log or "claim" in log, "the operator logged (verbosely) at all"
    for secret in (netbox.token, base64.b64encode(netbox.token.encode()).decode()):
        assert secret not in log, "the NetBox token reached the operator's log"


@pytest.mark.parametrize("allocated", ["now", "before instance names"])
async def test_same_address_after_crash_lost_status_and_hand_deletion(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance, allocated: str
) -> None:
    ensure_owner_field_and_tag(netbox)
    prefixes = create_prefixes(netbox, 61)
    # Another management cluster's claim of the same namespace and name: never taken.
    netbox.client.create(
        "ipam/ip-addresses/",
        {
            "address": "10.61.1.5/28",
            "vrf": prefixes.vrf_id,
            "custom_fields": {OWNER_FIELD: f"other/{namespace}/k1@nb"},
        },
    )
    # As if the operator crashed after writing to NetBox and before writing the IPAddress (the claim
    # marked with the instance name first), or allocated before instance names were recorded:
    current = allocated == "now"
    netbox.client.create(
        "ipam/ip-addresses/",
        {
            "address": "10.61.1.9/28",
            "vrf": prefixes.vrf_id,
            "custom_fields": {OWNER_FIELD: owner(namespace, "k1") if current else f"{namespace}/k1@nb"},
        },
    )
    await create_connection_secret(kube, namespace, netbox)
    await create_netbox_pool(kube, namespace, "nb", [prefixes.large])
    mark = {"ipam-address.capfleet.dev/netbox-allocation": INSTANCE} if current else {}
    await create_claim(kube, namespace, "k1", pool_ref("nb", NB), annotations=mark)
    run_operator("ipam_address", namespaces=[namespace], env=ENV)
    assert await bound_address(kube, namespace, "k1") == "10.61.1.9"

    await kube.patch_status(CLAIMS, "k1", {"addressRef": None, "conditions": []}, namespace)
    assert await bound_address(kube, namespace, "k1") == "10.61.1.9"

    before = await kube.get(ADDRESSES, "k1", namespace)
    assert before is not None
    await kube.delete(ADDRESSES, "k1", namespace)

    async def recreated() -> str | None:
        found = await kube.get(ADDRESSES, "k1", namespace)
        return (
            None
            if found is None or found["metadata"]["uid"] == before["metadata"]["uid"]
            else found["spec"]["address"]
        )

    assert await eventually("the IPAddress to come back", recreated) == "10.61.1.9"
    assert len(owned_ips(netbox, prefixes.vrf_id)) == 2, "no second NetBox IP for the same claim"


async def test_exhaustion_then_recovery_and_keep_policy(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    ensure_owner_field_and_tag(netbox)
    prefixes = create_prefixes(netbox, 62)
    await create_connection_secret(kube, namespace, netbox)
    await create_netbox_pool(kube, namespace, "nb", [prefixes.small], releasePolicy="Keep")
    run_operator("ipam_address", namespaces=[namespace], env=ENV)
    for name in ("e1", "e2", "e3"):
        await create_claim(kube, namespace, name, pool_ref("nb", NB))

    async def two_bound_one_exhausted() -> tuple[list[str], str] | None:
        claims = {name: await kube.get(CLAIMS, name, namespace) for name in ("e1", "e2", "e3")}
        reasons = {name: (ready(claim) or {}).get("reason") for name, claim in claims.items()}
        waiting = [name for name, reason in reasons.items() if reason == "PoolExhausted"]
        served = [name for name, reason in reasons.items() if reason == "Allocated"]
        return (served, waiting[0]) if len(served) == 2 and len(waiting) == 1 else None

    served, waiting = await eventually("two claims served and one exhausted", two_bound_one_exhausted)

    grown = {"spec": {"prefixes": [{"id": prefixes.small}, {"id": prefixes.large}]}}
    await kube.patch(kinds.NETBOX_IPPOOL.resource, "nb", grown, namespace)
    assert await bound_address(kube, namespace, waiting, within=60) == "10.62.1.1", "the grown pool serves it"

    await kube.delete(CLAIMS, served[0], namespace)
    await gone(kube, CLAIMS, served[0], namespace)
    assert owner(namespace, served[0]) in owned_ips(netbox, prefixes.vrf_id), (
        "releasePolicy Keep leaves the NetBox IP"
    )


async def test_netbox_errors_become_conditions_without_a_retry_storm(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    ensure_owner_field_and_tag(netbox)
    prefixes = create_prefixes(netbox, 63)
    await create_connection_secret(kube, namespace, netbox)
    await create_netbox_pool(kube, namespace, "nb", [prefixes.large])
    run_operator("ipam_address", namespaces=[namespace], env=ENV)
    await pool_ready(kube, namespace, "nb", "Ready")

    netbox.faults.fail(503, path="/api/ipam/", count=None)
    await create_claim(kube, namespace, "f1", pool_ref("nb", NB))
    failed = await claim_condition(kube, namespace, "f1", "AllocationFailed")
    assert "NetBox answered 503" in str(failed["message"])
    netbox.faults.reset_log()
    started = time.monotonic()
    await asyncio.sleep(10)  # a measurement window: how many requests does a failing claim cause?
    per_second = netbox.faults.count(path="/api/") / (time.monotonic() - started)
    assert per_second < 1.0, f"{per_second:.1f} requests/s to a failing NetBox is a retry storm"
    netbox.faults.clear()
    assert await bound_address(kube, namespace, "f1", within=90) == "10.63.1.1"

    netbox.faults.delay(30, path="/api/ipam/ip-addresses/", count=1)
    await create_claim(kube, namespace, "slow", pool_ref("nb", NB))
    slow = await claim_condition(kube, namespace, "slow", "AllocationFailed", within=60)
    assert "did not answer in time" in str(slow["message"])
    assert await bound_address(kube, namespace, "slow", within=90) == "10.63.1.2"


async def test_bad_token_and_missing_custom_field_are_clear_conditions(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    prefixes = create_prefixes(netbox, 64)
    await create_connection_secret(kube, namespace, netbox, token="0123456789abcdef0123456789abcdef01234567")
    await create_netbox_pool(kube, namespace, "nb", [prefixes.large])
    run_operator("ipam_address", namespaces=[namespace], env=ENV)
    refused = await pool_ready(kube, namespace, "nb", "AuthenticationFailed")
    assert "NetBox refused the token (403)" in str(refused["message"])
    assert "0123456789abcdef" not in str(refused["message"])
    await create_claim(kube, namespace, "t1", pool_ref("nb", NB))
    waiting = await claim_condition(kube, namespace, "t1", "PoolNotReady")
    assert "NetBox refused the token" in str(waiting["message"])
    # Nothing of t1's was ever written to NetBox, so deleting it does not wait on a NetBox that refuses us.
    await kube.delete(CLAIMS, "t1", namespace)
    await gone(kube, CLAIMS, "t1", namespace)

    if not netbox.client.list_all("extras/custom-fields/", name=OWNER_FIELD):
        await kube.delete(kinds.NETBOX_IPPOOL.resource, "nb", namespace)
        await gone(kube, kinds.NETBOX_IPPOOL.resource, "nb", namespace)
        secret_patch = {"stringData": {"token": netbox.token}}
        await kube.patch(resources.SECRETS, "netbox", secret_patch, namespace)
        await create_netbox_pool(kube, namespace, "nb", [prefixes.large])
        missing = await pool_ready(kube, namespace, "nb", "CustomFieldMissing")
        assert f"no custom field {OWNER_FIELD}: run capfleet netbox-setup" in str(missing["message"])


@pytest.mark.parametrize("netbox", ["4.6.8"], indirect=True)
async def test_v2_token_prefix_by_cidr_and_vrf_then_ip_range(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    # The Secret carries only the v2 token: the pool is Ready only if it is sent as `Bearer nbt_…`.
    assert netbox.v2_token is not None
    assert netbox.v2_token.startswith("nbt_")
    ensure_owner_field_and_tag(netbox)
    vrf = netbox.client.create("ipam/vrfs/", {"name": "tenant-a"})
    netbox.client.create("ipam/prefixes/", {"prefix": "10.65.0.0/31", "vrf": vrf["id"]})
    netbox.client.create(
        "ipam/ip-ranges/",
        {"start_address": "10.65.9.20/24", "end_address": "10.65.9.21/24", "vrf": vrf["id"]},
    )
    await create_connection_secret(kube, namespace, netbox, token=netbox.v2_token)
    body = {
        "apiVersion": kinds.NETBOX_IPPOOL.resource.api_version,
        "kind": NB,
        "metadata": {"name": "nb"},
        "spec": {
            "connectionSecretRef": {"name": "netbox"},
            "prefixes": [{"cidr": "10.65.0.0/31", "vrf": "tenant-a"}],
            "ipRanges": [{"startAddress": "10.65.9.20", "endAddress": "10.65.9.21", "vrf": "tenant-a"}],
        },
    }
    await kube.create(kinds.NETBOX_IPPOOL.resource, body, namespace)
    run_operator("ipam_address", namespaces=[namespace], env=ENV)
    await pool_ready(kube, namespace, "nb", "Ready")
    for name in ("v1", "v2", "v3"):
        await create_claim(kube, namespace, name, pool_ref("nb", NB))
    bound = sorted([await bound_address(kube, namespace, name) for name in ("v1", "v2", "v3")])
    assert bound == ["10.65.0.0", "10.65.0.1", "10.65.9.20"], "a /31 gives both addresses, then the range"
