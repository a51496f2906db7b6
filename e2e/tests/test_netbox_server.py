"""What capfleet relies on in NetBox's API (IPAM, auth, errors, ETags), checked against real NetBox.

Driven with pynetbox (as the operators drive NetBox) and with raw HTTP, against real NetBox 4.4.10, and
4.6.8 where the API changed (v2 tokens, ETags, custom-field validation).
"""

from __future__ import annotations

import ipaddress
import threading
from typing import Any

import pynetbox
import pytest

from capfleet_e2e.netbox.client import NetboxClient
from capfleet_e2e.netbox.fixtures import NetboxFaults, NetboxInstance

INSUFFICIENT = {"detail": "Insufficient resources are available to satisfy the request"}


def api(netbox: NetboxInstance, token: str | None = None) -> Any:
    return pynetbox.api(netbox.url, token=token or netbox.token)


def new_vrf(netbox: NetboxInstance, **extra: Any) -> dict[str, Any]:
    return netbox.client.create("ipam/vrfs", {"name": "capfleet-test", **extra})


def server_controls(netbox: NetboxInstance) -> NetboxFaults:
    return netbox.faults


def usable(netbox: NetboxInstance, prefix: str, **extra: Any) -> list[str]:
    """Allocate from a fresh prefix until NetBox says it is full; the addresses handed out."""
    vrf = new_vrf(netbox)
    created = netbox.client.create("ipam/prefixes", {"prefix": prefix, "vrf": vrf["id"], **extra})
    addresses: list[str] = []
    while True:
        response = netbox.client.request("POST", f"ipam/prefixes/{created['id']}/available-ips", {})
        if response.status == 409:
            assert response.body == INSUFFICIENT
            return addresses
        assert response.status == 201, response.body
        addresses.append(response.body["address"])


# --- authentication ------------------------------------------------------------------------------


def test_v1_token_works_with_pynetbox_and_reports_the_version(netbox: NetboxInstance) -> None:
    nb = api(netbox)
    status = nb.status()
    assert status["netbox-version"] == netbox.version
    assert nb.version == ".".join(netbox.version.split(".")[:2])


@pytest.mark.parametrize("netbox", ["4.6.8"], indirect=True)
def test_v2_bearer_token_works_with_pynetbox_from_4_5(netbox: NetboxInstance) -> None:
    assert netbox.v2_token is not None
    nb = api(netbox, netbox.v2_token)
    assert nb.status()["netbox-version"] == netbox.version
    assert nb.tenancy.tenants.create(name="t2", slug="t2").id


@pytest.mark.parametrize(
    ("netbox", "header", "message"),
    [
        ("4.4.10", None, "Authentication credentials were not provided."),
        ("4.4.10", "Token 0123456789abcdef0123456789abcdef01234567", "Invalid token"),
        ("4.4.10", "Bearer nbt_abcdefabcdef.0123456789abcdef0123456789abcdef01234567",
         "Authentication credentials were not provided."),
        ("4.6.8", "Token 0123456789abcdef0123456789abcdef01234567", "Invalid v1 token"),
        ("4.6.8", "Bearer nbt_abcdefabcdef.0123456789abcdef0123456789abcdef01234567", "Invalid v2 token"),
    ],
    indirect=["netbox"],
)  # fmt: skip
def test_bad_credentials_get_netbox_403s(netbox: NetboxInstance, header: str | None, message: str) -> None:
    headers = {"Authorization": header} if header else {}
    client = NetboxClient(netbox.url, netbox.token)
    request = client.request("GET", "status", headers=headers) if header else _anonymous(netbox.url, "status")
    assert (request.status, request.body) == (403, {"detail": message})


def _anonymous(url: str, path: str) -> Any:
    import urllib.error
    import urllib.request

    from multidict import CIMultiDict

    from capfleet_e2e.netbox.client import Response, _decode

    try:
        with urllib.request.urlopen(f"{url}/api/{path}/", timeout=5) as reply:
            return Response(reply.status, _decode(reply.read()), CIMultiDict(reply.headers.items()))
    except urllib.error.HTTPError as error:
        return Response(error.code, _decode(error.read()), CIMultiDict(error.headers.items()))


def test_a_read_only_token_reads_but_cannot_write(netbox: NetboxInstance) -> None:
    server_controls(netbox)
    assert netbox.read_only_token is not None
    reader = NetboxClient(netbox.url, netbox.read_only_token)
    assert reader.request("GET", "ipam/prefixes").status == 200
    denied = reader.request("POST", "tenancy/tenants", {"name": "x", "slug": "x"})
    assert (denied.status, denied.body) == (
        403,
        {"detail": "You do not have permission to perform this action."},
    )


# --- available-ips -------------------------------------------------------------------------------


def test_available_ips_allocation_is_atomic_under_concurrent_posts(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    prefix = netbox.client.create("ipam/prefixes", {"prefix": "10.20.0.0/27", "vrf": vrf["id"]})
    results: list[str] = []
    failures: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def claim(n: int) -> None:
        client = NetboxClient(netbox.url, netbox.token)
        start.wait()
        body = {"description": f"claim {n}", "status": "reserved"}
        response = client.request("POST", f"ipam/prefixes/{prefix['id']}/available-ips", body)
        with lock:
            if response.status == 201:
                results.append(response.body["address"])
            else:
                failures.append(response.status)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 30
    assert len(set(results)) == 30
    assert failures == [409] * 20
    assert all(address.endswith("/27") for address in results)
    again = netbox.client.request("POST", f"ipam/prefixes/{prefix['id']}/available-ips", {})
    assert (again.status, again.body) == (409, INSUFFICIENT)


def test_pynetbox_allocates_a_list_all_or_nothing(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    prefix = api(netbox).ipam.prefixes.create(prefix="10.21.0.0/29", vrf=vrf["id"])
    ips = prefix.available_ips.create([{"dns_name": "a.example"}, {"dns_name": "b.example"}])
    assert [str(ip) for ip in ips] == ["10.21.0.1/29", "10.21.0.2/29"]
    assert ips[0].vrf.id == vrf["id"]
    with pytest.raises(pynetbox.core.query.AllocationError):
        prefix.available_ips.create([{} for _ in range(5)])
    assert [a["address"] for a in prefix.available_ips.list()] == [f"10.21.0.{n}/29" for n in (3, 4, 5, 6)]


@pytest.mark.parametrize(
    ("prefix", "extra", "expected"),
    [
        ("10.30.0.0/29", {}, [f"10.30.0.{n}/29" for n in range(1, 7)]),
        ("10.30.0.8/29", {"is_pool": True}, [f"10.30.0.{n}/29" for n in range(8, 16)]),
        ("10.30.0.16/31", {}, ["10.30.0.16/31", "10.30.0.17/31"]),
        ("10.30.0.18/32", {}, ["10.30.0.18/32"]),
        ("2001:db8::/126", {}, ["2001:db8::1/126", "2001:db8::2/126", "2001:db8::3/126"]),
        ("2001:db8::4/126", {"is_pool": True}, [f"2001:db8::{n}/126" for n in range(4, 8)]),
        ("2001:db8::8/127", {}, ["2001:db8::8/127", "2001:db8::9/127"]),
    ],
)
def test_usable_bounds_follow_netbox(
    netbox: NetboxInstance, prefix: str, extra: dict[str, Any], expected: list[str]
) -> None:
    assert usable(netbox, prefix, **extra) == expected


def test_available_ips_skip_taken_addresses_in_the_same_vrf_only(netbox: NetboxInstance) -> None:
    vrf, other = new_vrf(netbox), netbox.client.create("ipam/vrfs", {"name": "other"})
    prefix = netbox.client.create("ipam/prefixes", {"prefix": "10.31.0.0/29", "vrf": vrf["id"]})
    netbox.client.create("ipam/ip-addresses", {"address": "10.31.0.1/32", "vrf": vrf["id"]})
    netbox.client.create("ipam/ip-addresses", {"address": "10.31.0.2/29", "vrf": other["id"]})
    free = netbox.client.get(f"ipam/prefixes/{prefix['id']}/available-ips", limit=2)
    assert [a["address"] for a in free] == ["10.31.0.2/29", "10.31.0.3/29"]
    assert free[0]["vrf"]["id"] == vrf["id"]
    assert free[0]["family"] == 4


def test_ip_range_allocation_is_inclusive_and_takes_the_range_mask(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    body = {"start_address": "10.32.0.10/24", "end_address": "10.32.0.12/24", "vrf": vrf["id"]}
    iprange = netbox.client.create("ipam/ip-ranges", body)
    assert iprange["size"] == 3
    assert iprange["display"] == "10.32.0.10-12/24"
    path = f"ipam/ip-ranges/{iprange['id']}/available-ips"
    created = netbox.client.call("POST", path, [{"status": "reserved"}] * 3)
    assert [ip["address"] for ip in created] == ["10.32.0.10/24", "10.32.0.11/24", "10.32.0.12/24"]
    assert created[0]["status"] == {"value": "reserved", "label": "Reserved"}
    assert netbox.client.request("POST", path, {}).status == 409


def test_allocation_takes_the_parent_vrf_and_any_ip_fields(netbox: NetboxInstance) -> None:
    vrf, other = new_vrf(netbox), netbox.client.create("ipam/vrfs", {"name": "other"})
    tenant = netbox.client.create("tenancy/tenants", {"name": "ten", "slug": "ten"})
    tag = netbox.client.create("extras/tags", {"name": "tag", "slug": "tag"})
    prefix = netbox.client.create("ipam/prefixes", {"prefix": "10.33.0.0/28", "vrf": vrf["id"]})
    body = {
        "vrf": other["id"],
        "tenant": tenant["id"],
        "tags": [tag["id"]],
        "dns_name": "Node1.Example",
        "description": "d",
    }
    ip = netbox.client.call("POST", f"ipam/prefixes/{prefix['id']}/available-ips", body)
    assert ip["vrf"]["id"] == vrf["id"]
    assert ip["tenant"]["slug"] == tenant["slug"]
    assert [t["slug"] for t in ip["tags"]] == [tag["slug"]]
    assert ip["dns_name"] == "node1.example"


# --- plain IP writes -----------------------------------------------------------------------------


def test_duplicate_ips_are_refused_per_vrf_regardless_of_mask(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    netbox.client.create("ipam/ip-addresses", {"address": "10.40.0.5/24", "vrf": vrf["id"]})
    again = netbox.client.request("POST", "ipam/ip-addresses", {"address": "10.40.0.5/32", "vrf": vrf["id"]})
    assert again.status == 400
    assert again.body == {"address": [f"Duplicate IP address found in VRF {vrf['name']}: 10.40.0.5/24"]}
    loose = new_vrf(netbox, enforce_unique=False)
    netbox.client.create("ipam/ip-addresses", {"address": "10.40.0.5/24", "vrf": loose["id"]})
    assert (
        netbox.client.request(
            "POST", "ipam/ip-addresses", {"address": "10.40.0.5/24", "vrf": loose["id"]}
        ).status
        == 201
    )


def test_duplicates_in_the_global_table(netbox: NetboxInstance) -> None:
    server_controls(netbox)
    netbox.client.create("ipam/ip-addresses", {"address": "10.41.0.5/24"})
    again = netbox.client.request("POST", "ipam/ip-addresses", {"address": "10.41.0.5/24"})
    assert again.body == {"address": ["Duplicate IP address found in global table: 10.41.0.5/24"]}


def test_invalid_values_and_missing_objects_answer_like_drf(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    bad = netbox.client.request(
        "POST", "ipam/ip-addresses", {"address": "10.42.0.1/24", "vrf": vrf["id"], "status": "bogus"}
    )
    assert (bad.status, bad.body) == (400, {"status": ["bogus is not a valid choice."]})
    missing = netbox.client.request("POST", "ipam/ip-addresses", {"address": "10.42.0.2/24", "vrf": 999999})
    assert missing.status == 400
    assert set(missing.body) == {"vrf"}
    # An address NetBox cannot parse is its own 500 (KeyError 'data'), not a 400: capfleet sends only
    # addresses its API types have validated.
    invalid = netbox.client.request("POST", "ipam/ip-addresses", {"address": "nope", "vrf": vrf["id"]})
    assert invalid.status == 500
    assert missing.body["vrf"] == ["Related object not found using the provided numeric ID: 999999"]
    gone = netbox.client.request("GET", "ipam/ip-addresses/999999")
    assert (gone.status, gone.body) == (404, {"detail": "No IPAddress matches the given query."})


# --- filters -------------------------------------------------------------------------------------


def test_custom_field_filters_are_exact_or_loose_as_defined(netbox: NetboxInstance) -> None:
    client = netbox.client
    owner, note = "capfleet_owner", "capfleet_note"
    client.create(
        "extras/custom-fields",
        {"name": owner, "type": "text", "object_types": ["ipam.ipaddress"], "filter_logic": "exact"},
    )
    client.create("extras/custom-fields", {"name": note, "type": "text", "object_types": ["ipam.ipaddress"]})
    vrf = new_vrf(netbox)
    for n, value in enumerate(["ns/a", "ns/ab", "NS/A"], start=1):
        client.create(
            "ipam/ip-addresses",
            {"address": f"10.50.0.{n}/24", "vrf": vrf["id"], "custom_fields": {owner: value, note: value}},
        )

    def addresses(**params: Any) -> list[str]:
        return [ip["address"] for ip in client.list_all("ipam/ip-addresses", vrf_id=vrf["id"], **params)]

    assert addresses(**{f"cf_{owner}": "ns/a"}) == ["10.50.0.1/24"]
    assert addresses(**{f"cf_{note}": "ns/a"}) == ["10.50.0.1/24", "10.50.0.2/24", "10.50.0.3/24"]
    assert addresses(**{f"cf_{owner}": ["ns/a", "ns/ab"]}) == ["10.50.0.1/24", "10.50.0.2/24"]
    ip = client.list_all("ipam/ip-addresses", vrf_id=vrf["id"], address="10.50.0.1")[0]
    assert ip["custom_fields"][owner] == "ns/a"
    nb_ip = api(netbox).ipam.ip_addresses.get(ip["id"])
    assert nb_ip.custom_fields[owner] == "ns/a"


@pytest.mark.parametrize(
    ("netbox", "status", "body"),
    [
        ("4.4.10", 201, None),  # ignored
        (
            "4.6.8",
            400,
            {"custom_fields": {"nope": "Custom field 'nope' does not exist for this object type."}},
        ),
    ],
    indirect=["netbox"],
)
def test_unknown_custom_fields_per_version(netbox: NetboxInstance, status: int, body: Any) -> None:
    response = netbox.client.request(
        "POST", "ipam/ip-addresses", {"address": "10.51.0.1/24", "custom_fields": {"nope": 1}}
    )
    assert response.status == status
    if body is not None:
        assert response.body == body
    else:
        assert response.body["custom_fields"] == {}


def test_filters_and_or_null_and_invalid_choices(netbox: NetboxInstance) -> None:
    client = netbox.client
    vrf = new_vrf(netbox)
    tags = [client.create("extras/tags", {"name": n, "slug": n}) for n in ("red", "blue")]
    ips = [
        client.create(
            "ipam/ip-addresses", {"address": "10.52.0.1/24", "vrf": vrf["id"], "tags": [tags[0]["id"]]}
        ),
        client.create(
            "ipam/ip-addresses",
            {
                "address": "10.52.0.2/24",
                "vrf": vrf["id"],
                "tags": [t["id"] for t in tags],
                "status": "reserved",
            },
        ),
        client.create("ipam/ip-addresses", {"address": "10.52.0.3/24", "vrf": vrf["id"]}),
    ]

    def ids(**params: Any) -> list[int]:
        return [ip["id"] for ip in client.list_all("ipam/ip-addresses", vrf_id=vrf["id"], **params)]

    assert ids(id=[ips[0]["id"], ips[2]["id"]]) == [ips[0]["id"], ips[2]["id"]]
    assert ids(tag=[tags[0]["slug"], tags[1]["slug"]]) == [ips[1]["id"]]
    assert ids(tag=tags[0]["slug"], status="active") == [ips[0]["id"]]
    assert ids(address="10.52.0.2") == [ips[1]["id"]]
    assert ids(address="10.52.0.2/25") == []
    assert ids(parent="10.52.0.0/30") == [ips[0]["id"], ips[1]["id"], ips[2]["id"]]
    assert ids(no_such_filter="x") == [ip["id"] for ip in ips]
    assert ids(status__n="active") == [ips[1]["id"]]
    bad = client.request("GET", "ipam/ip-addresses", params={"tag": "no-such-tag-anywhere"})
    assert (bad.status, bad.body) == (
        400,
        {"tag": ["Select a valid choice. no-such-tag-anywhere is not one of the available choices."]},
    )
    global_ips = client.list_all("ipam/ip-addresses", vrf_id="null", address="10.52.0.1")
    assert all(ip["vrf"] is None for ip in global_ips)


def test_pagination_follows_next_with_the_same_filters(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    netbox.client.call(
        "POST",
        "ipam/ip-addresses",
        [{"address": f"10.53.{n // 250}.{n % 250 + 1}/16", "vrf": vrf["id"]} for n in range(120)],
    )
    first = netbox.client.get("ipam/ip-addresses", vrf_id=vrf["id"])
    assert first["count"] == 120
    assert len(first["results"]) == 50
    assert first["previous"] is None
    assert first["next"].startswith(f"{netbox.url}/api/ipam/ip-addresses/?")
    assert f"vrf_id={vrf['id']}" in first["next"]
    assert "offset=50" in first["next"]
    assert "limit=50" in first["next"]
    second = netbox.client.get(first["next"])
    assert second["previous"] is not None
    assert next(ip["address"] for ip in second["results"]) == "10.53.0.51/16"
    assert len(netbox.client.list_all("ipam/ip-addresses", vrf_id=vrf["id"])) == 120
    assert len(netbox.client.get("ipam/ip-addresses", vrf_id=vrf["id"], limit=0)["results"]) == 120
    assert len(list(api(netbox).ipam.ip_addresses.filter(vrf_id=vrf["id"]))) == 120
    brief = netbox.client.get("ipam/ip-addresses", vrf_id=vrf["id"], brief=1, limit=1)["results"][0]
    assert set(brief) == {"id", "url", "display", "family", "address", "description"}


# --- ETags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("netbox", ["4.6.8"], indirect=True)
def test_if_match_is_compare_and_set_on_4_6(netbox: NetboxInstance) -> None:
    tenant = netbox.client.create("tenancy/tenants", {"name": "e", "slug": "e"})
    read = netbox.client.request("GET", f"tenancy/tenants/{tenant['id']}")
    etag = read.headers["ETag"]
    assert etag.startswith('W/"')
    first = netbox.client.request(
        "PATCH", f"tenancy/tenants/{tenant['id']}", {"description": "a"}, headers={"If-Match": etag}
    )
    assert first.status == 200
    assert first.headers["ETag"] != etag
    stale = netbox.client.request(
        "PATCH", f"tenancy/tenants/{tenant['id']}", {"description": "b"}, headers={"If-Match": etag}
    )
    assert (stale.status, stale.body) == (412, {"detail": "Precondition failed."})
    assert stale.headers["ETag"] == first.headers["ETag"]
    assert netbox.client.get(f"tenancy/tenants/{tenant['id']}")["description"] == "a"
    star = netbox.client.request(
        "PATCH", f"tenancy/tenants/{tenant['id']}", {"description": "c"}, headers={"If-Match": "*"}
    )
    assert star.status == 200


def test_if_match_is_ignored_before_4_6(netbox: NetboxInstance) -> None:
    tenant = netbox.client.create("tenancy/tenants", {"name": "e", "slug": "e"})
    read = netbox.client.request("GET", f"tenancy/tenants/{tenant['id']}")
    assert "ETag" not in read.headers
    stale = netbox.client.request(
        "PATCH", f"tenancy/tenants/{tenant['id']}", {"description": "b"}, headers={"If-Match": 'W/"old"'}
    )
    assert stale.status == 200


# --- faults --------------------------------------------------------------------------------------


def test_injected_errors_delays_and_the_request_log(netbox: NetboxInstance) -> None:
    faults = server_controls(netbox)
    faults.fail(503, method="GET", path="/api/ipam/", count=2)
    statuses = [netbox.client.request("GET", "ipam/prefixes").status for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert netbox.client.request("GET", "tenancy/tenants").status == 200
    assert faults.count("GET", "/api/ipam/prefixes/") == 3
    assert faults.by_endpoint()["GET /api/ipam/prefixes/"] == 3
    faults.delay(0.3, path="/api/tenancy/", count=1)
    import time

    started = time.monotonic()
    assert netbox.client.request("GET", "tenancy/tenants").status == 200
    assert time.monotonic() - started >= 0.3
    faults.fail(500, count=None)
    assert netbox.client.request("GET", "status").status == 500
    faults.clear()
    assert netbox.client.request("GET", "status").status == 200


def test_down_refuses_connections_and_up_restores_the_same_data(netbox: NetboxInstance) -> None:
    faults = server_controls(netbox)
    tenant = netbox.client.create("tenancy/tenants", {"name": "d", "slug": "d"})
    nb = api(netbox)
    assert nb.tenancy.tenants.get(tenant["id"]).name == "d"
    faults.down()
    with pytest.raises(OSError, match="Connection refused"):  # requests.ConnectionError
        nb.tenancy.tenants.get(tenant["id"])
    faults.up()
    assert nb.tenancy.tenants.get(tenant["id"]).name == "d"


def test_addresses_are_normalised_like_netaddr(netbox: NetboxInstance) -> None:
    vrf = new_vrf(netbox)
    ip = netbox.client.create("ipam/ip-addresses", {"address": "2001:DB8:0:0::5", "vrf": vrf["id"]})
    assert ip["address"] == "2001:db8::5/128"
    assert ip["family"] == {"value": 6, "label": "IPv6"}
    host_bits = netbox.client.request("POST", "ipam/prefixes", {"prefix": "10.54.0.77/24", "vrf": vrf["id"]})
    assert (host_bits.status, host_bits.body) == (
        400, {"prefix": ["10.54.0.77/24 is not a valid prefix. Did you mean 10.54.0.0/24?"]}
    )  # fmt: skip
    assert ipaddress.ip_interface(ip["address"]).ip == ipaddress.ip_address("2001:db8::5")
