"""Setting up NetBox and a NetboxIPPool for the ipam-address tests: everything is created through NetBox's
REST API, inside a VRF of the test's own."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.netbox.fixtures import NetboxInstance

OWNER_FIELD = "capfleet_owner"


@dataclass(frozen=True)
class NetboxPrefixes:
    vrf_id: int
    small: int  # a /30: two usable addresses
    large: int  # a /28


def ensure_owner_field_and_tag(netbox: NetboxInstance) -> None:
    """The owner field and the tag, made as users make them: `capfleet netbox-setup`."""
    netbox.run_setup()


def create_prefixes(netbox: NetboxInstance, second_octet: int) -> NetboxPrefixes:
    client = netbox.client
    vrf = client.create("ipam/vrfs/", {"name": f"capfleet-test-{second_octet}"})
    small = client.create("ipam/prefixes/", {"prefix": f"10.{second_octet}.0.0/30", "vrf": vrf["id"]})
    large = client.create("ipam/prefixes/", {"prefix": f"10.{second_octet}.1.0/28", "vrf": vrf["id"]})
    return NetboxPrefixes(vrf["id"], small["id"], large["id"])


async def create_connection_secret(
    kube: Kube, namespace: str, netbox: NetboxInstance, token: str | None = None
) -> None:
    data = {"url": netbox.url, "token": token or netbox.token}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "netbox"},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
    await kube.create(resources.SECRETS, secret, namespace)


async def create_netbox_pool(
    kube: Kube, namespace: str, name: str, prefix_ids: list[int], **spec: Any
) -> None:
    body = {
        "apiVersion": kinds.NETBOX_IPPOOL.resource.api_version,
        "kind": "NetboxIPPool",
        "metadata": {"name": name},
        "spec": {
            "connectionSecretRef": {"name": "netbox"},
            "prefixes": [{"id": i} for i in prefix_ids],
            **spec,
        },
    }
    await kube.create(kinds.NETBOX_IPPOOL.resource, body, namespace)


def owned_ips(netbox: NetboxInstance, vrf_id: int) -> dict[str, dict[str, Any]]:
    """NetBox IPs in the test's VRF that carry an owner, by owner value."""
    found = netbox.client.list_all("ipam/ip-addresses/", vrf_id=vrf_id)
    return {
        ip["custom_fields"][OWNER_FIELD]: ip
        for ip in found
        if (ip.get("custom_fields") or {}).get(OWNER_FIELD)
    }
