"""The scale lab's bare metal: baremetal-provision, unchanged and with its own settings, provisions servers
that do not exist. sushy-tools' fake driver is their BMC (Redfish over TLS with basic auth, as the real
lab's), and capfleet_e2e.baremetal.fakeramdisk plays iPXE and the deploy ramdisk over HTTP: boot script,
per-MAC script, callback key, seed, signed report. Each instance reaches Provisioned, its System ends on
its disk and powered on, and deleting the instances cleans each server through the same play (cleaning
is the default with an image) and powers it off."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from baremetal_helpers import INSTANCES, OPERATOR_ENV

from baremetal_provision import markers
from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.fakeramdisk import FakeRamdisk, boot_env, fake_systems
from capfleet_e2e.baremetal.redfish import RedfishEmulator
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.processes import free_port
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration
SERVERS = 3


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def system_state(bmc: RedfishEmulator, name: str) -> dict[str, Any]:
    request = urllib.request.Request(bmc.system_url(name))
    token = base64.b64encode(f"{bmc.username}:{bmc.password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, context=bmc.ssl_context(), timeout=10) as response:
        found: dict[str, Any] = json.load(response)
        return found


async def test_fake_servers_are_provisioned_and_cleaned_by_the_unchanged_operator(
    kube: Kube, namespace: str, run_operator: RunOperator, tmp_path: Path
) -> None:
    port = free_port()
    systems = fake_systems(SERVERS, "fake")
    async with FakeRamdisk(f"http://127.0.0.1:{port}") as fake:
        with RedfishEmulator(fake_systems=systems, notify_url=fake.url) as bmc:
            env = {**OPERATOR_ENV, **boot_env(port, tmp_path / "ramdisk")}
            run_operator("baremetal_provision", namespaces=[namespace], env=env)
            credentials = {"username": b64(bmc.username), "password": b64(bmc.password)}
            credentials["caBundle"] = b64(bmc.ca_cert.read_text())
            for name, data in (("bmc", credentials), ("bootstrap", {"value": b64("#cloud-config\n")})):
                body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
                await kube.create(resources.SECRETS, body, namespace)
            for system in systems:
                body = {
                    "apiVersion": INSTANCES.api_version,
                    "kind": "BaremetalInstance",
                    "metadata": {"name": system["name"]},
                    "spec": {
                        "bmc": {
                            "address": f"redfish+https://127.0.0.1:{bmc.port}/redfish/v1/Systems/{system['name']}",
                            "credentialsSecretRef": {"name": "bmc"},
                        },
                        "bootMACAddress": system["nics"][0]["mac"],
                        "online": True,
                        "userDataSecretRef": {"name": "bootstrap"},
                        "image": {
                            "url": "http://images.invalid/node.raw",
                            "checksum": "0" * 64,
                            "format": "raw",
                        },
                    },
                }
                await kube.create(INSTANCES, body, namespace)

            async def all_on_disk() -> list[dict[str, Any]] | None:
                found = await kube.list(INSTANCES, namespace)
                done = [
                    o
                    for o in found
                    if (o.get("status") or {}).get("phase") == "Provisioned"
                    and markers.DISK_BOOTED in o["metadata"].get("annotations", {})
                ]
                return found if len(done) == SERVERS else None

            try:
                found = await eventually(
                    "every fake server Provisioned and booted from disk", all_on_disk, 180, 1
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the fake ramdisk played {fake.played}") from exc
            for obj in found:
                annotations = obj["metadata"]["annotations"]
                assert markers.SEED_FETCHED in annotations
                assert markers.CALLBACK_KEY_FETCHED in annotations
                assert markers.CALLED_BACK in annotations
            for system in systems:
                # A fake BMC, like a real one, applies a power change some seconds after it is asked.
                async def on_disk(name: str = system["name"]) -> bool:
                    state = await asyncio.to_thread(system_state, bmc, name)
                    return (state["Boot"]["BootSourceOverrideTarget"], state["PowerState"]) == ("Hdd", "On")

                await eventually(f"{system['name']} on, booting from its disk", on_disk, 30, 1)
                assert fake.played[system["name"]].results == ["deployed"]
                assert fake.played[system["name"]].failure is None

            for system in systems:
                await kube.delete(INSTANCES, system["name"], namespace)

            async def all_gone() -> bool:
                return not await kube.list(INSTANCES, namespace)

            await eventually("every fake server cleaned and released", all_gone, 180, 1)
            for system in systems:
                assert fake.played[system["name"]].results == ["deployed", "cleaned"]
                state = await asyncio.to_thread(system_state, bmc, system["name"])
                assert state["PowerState"] == "Off"
