"""Two management clusters claiming from one NetBox never get the same device.

Two netbox-device processes with different instance names (as two management clusters would run them),
each watching its own namespace, race 16 claims for 10 free devices: with the read-back protocol of
NetBox before 4.6 and with If-Match from 4.6.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
from netbox_device_helpers import (
    DEVICES,
    OPERATOR_ENV,
    create_connection_secret,
    create_device_claim,
    owned_devices,
    reasons,
    seed_inventory,
)

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

PER_CLUSTER = 8
SETTLE = {"CAPFLEET_NETBOX_SETTLE_SECONDS": "1.0"}
"""The production read-back delay, not the suite's 0.2 s: the pre-4.6 claim is safe while no claimant takes
longer than it between its read and its write, and sixteen claims at once on a NetBox of two cores took
longer than 0.2 s (one device claimed by both clusters, once)."""


@pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)
async def test_two_instances_race_without_a_double_claim(
    kube: Kube, namespace: str, run_operator: RunOperator, netbox: NetboxInstance
) -> None:
    other = f"{namespace[:50]}-b{secrets.token_hex(2)}"
    await kube.create(
        resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    try:
        seed_inventory(netbox, 10)
        clusters = {namespace: "mgmt-a", other: "mgmt-b"}
        for ns, instance in clusters.items():
            await create_connection_secret(kube, ns, netbox)
            run_operator(
                "netbox_device",
                namespaces=[ns],
                env={**OPERATOR_ENV, **SETTLE, "CAPFLEET_INSTANCE_NAME": instance},
            )
        await asyncio.gather(
            *(
                create_device_claim(kube, netbox, ns, f"m{i:02d}")
                for ns in clusters
                for i in range(PER_CLUSTER)
            )
        )

        seen: dict[str, dict[str, str | None]] = {}

        async def settled() -> dict[str, dict[str, str | None]] | None:
            found = {ns: await reasons(kube, DEVICES, ns) for ns in clusters}
            flat = [reason for by_name in found.values() for reason in by_name.values()]
            seen.update(found)
            return found if flat.count("Claimed") == 10 and flat.count("NoFreeDevice") == 6 else None

        found = await eventually(
            "10 claimed and 6 waiting across both clusters",
            settled,
            within=120,
            seen=lambda: (seen, {owner: device["id"] for owner, device in owned_devices(netbox).items()}),
        )
        claimed_ids = []
        for ns, by_name in found.items():
            for obj in await kube.list(DEVICES, ns):
                if by_name[obj["metadata"]["name"]] == "Claimed":
                    claimed_ids.append(obj["status"]["deviceID"])
        assert len(set(claimed_ids)) == 10, "a device was claimed by both management clusters"
        owners = owned_devices(netbox)
        assert len(owners) == 10
        assert {device["id"] for device in owners.values()} == set(claimed_ids)
        assert {owner.split("/", 1)[0] for owner in owners} == {"mgmt-a", "mgmt-b"}, "both clusters won some"
    finally:
        await kube.delete(resources.NAMESPACES, other)
