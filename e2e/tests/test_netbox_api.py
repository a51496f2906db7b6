"""REST conventions of the NetBox API test server: bulk writes, list options, 4.6 features, outages.

Like the other NetBox suites, tests that need nothing of the test server's own run against a real NetBox
too when CAPFLEET_NETBOX_URL and CAPFLEET_NETBOX_TOKEN are set.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pynetbox
import pytest

from capfleet_e2e.netbox.client import authorization
from capfleet_e2e.netbox.fixtures import NetboxInstance


def vrf_with_ips(netbox: NetboxInstance, count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    vrf = netbox.client.create("ipam/vrfs", {"name": "api"})
    body = [
        {"address": f"10.70.0.{n}/24", "vrf": vrf["id"], "description": f"ip {n}"}
        for n in range(1, count + 1)
    ]
    return vrf, netbox.client.call("POST", "ipam/ip-addresses", body)


def test_bulk_update_and_bulk_delete_with_pynetbox(netbox: NetboxInstance) -> None:
    vrf, ips = vrf_with_ips(netbox, 4)
    nb = pynetbox.api(netbox.url, token=netbox.token)
    updated = nb.ipam.ip_addresses.update([{"id": ip["id"], "status": "deprecated"} for ip in ips[:2]])
    assert [ip.status.value for ip in updated] == ["deprecated", "deprecated"]
    assert nb.ipam.ip_addresses.count(vrf_id=vrf["id"], status="deprecated") == 2
    assert nb.ipam.ip_addresses.delete([ip["id"] for ip in ips[:3]])
    assert [ip.address for ip in nb.ipam.ip_addresses.filter(vrf_id=vrf["id"])] == ["10.70.0.4/24"]


def test_a_list_create_is_all_or_nothing_with_errors_by_position(netbox: NetboxInstance) -> None:
    vrf = netbox.client.create("ipam/vrfs", {"name": "api"})
    body = [
        {"address": "10.71.0.1/24", "vrf": vrf["id"]},
        {"address": "10.71.0.2/24", "vrf": vrf["id"], "status": "x"},
    ]
    response = netbox.client.request("POST", "ipam/ip-addresses", body)
    assert response.status == 400
    assert response.body == [{}, {"status": ["x is not a valid choice."]}]
    assert netbox.client.list_all("ipam/ip-addresses", vrf_id=vrf["id"]) == []


def test_search_fields_and_prefix_and_range_filters(netbox: NetboxInstance) -> None:
    vrf, _ = vrf_with_ips(netbox, 3)
    found = netbox.client.get("ipam/ip-addresses", vrf_id=vrf["id"], q="ip 2", fields="id,address")
    assert [set(ip) for ip in found["results"]] == [{"id", "address"}]
    prefix = netbox.client.create("ipam/prefixes", {"prefix": "10.70.0.0/24", "vrf": vrf["id"]})
    assert [
        p["id"] for p in netbox.client.list_all("ipam/prefixes", prefix="10.70.0.0/24", vrf_id=vrf["id"])
    ] == [prefix["id"]]
    iprange = netbox.client.create(
        "ipam/ip-ranges",
        {"start_address": "10.70.0.100/24", "end_address": "10.70.0.110/24", "vrf": vrf["id"]},
    )
    by_start = netbox.client.list_all("ipam/ip-ranges", start_address="10.70.0.100", vrf_id=vrf["id"])
    assert [r["id"] for r in by_start] == [iprange["id"]]


def test_gets_without_the_trailing_slash_are_redirected(netbox: NetboxInstance) -> None:
    request = urllib.request.Request(
        f"{netbox.url}/api/status", headers={"Authorization": authorization(netbox.token)}
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.url.endswith("/api/status/")
        assert reply.headers["API-Version"]


@pytest.mark.parametrize("netbox", ["4.6.8"], indirect=True)
def test_cursor_pagination_and_tag_edits_on_4_6(netbox: NetboxInstance) -> None:
    vrf, ips = vrf_with_ips(netbox, 7)
    nb = pynetbox.api(netbox.url, token=netbox.token, pagination="cursor")
    page = netbox.client.get("ipam/ip-addresses", vrf_id=vrf["id"], start=0, limit=3)
    assert page["count"] is None
    assert "start=" in page["next"]
    assert len(list(nb.ipam.ip_addresses.filter(vrf_id=vrf["id"], limit=3))) == 7
    red, blue = (netbox.client.create("extras/tags", {"name": n, "slug": n}) for n in ("red", "blue"))
    path = f"ipam/ip-addresses/{ips[0]['id']}"
    netbox.client.call("PATCH", path, {"add_tags": [red["id"], blue["id"]]})
    after = netbox.client.call("PATCH", path, {"remove_tags": [{"slug": red["slug"]}]})
    assert [t["slug"] for t in after["tags"]] == [blue["slug"]]


def test_an_outage_ends_by_itself(netbox: NetboxInstance) -> None:
    nb = pynetbox.api(netbox.url, token=netbox.token)
    assert nb.status()
    netbox.faults.outage(0.3)
    deadline = time.monotonic() + 5
    refused = 0
    while time.monotonic() < deadline:
        try:
            nb.status()
        except OSError:
            refused += 1
            time.sleep(0.05)
            continue
        if refused:
            break
        time.sleep(0.02)
    assert refused > 0
    assert nb.status()["netbox-version"] == netbox.version
