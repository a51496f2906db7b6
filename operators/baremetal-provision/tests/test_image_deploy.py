"""Image deployment on the bare-metal lab, all real: a QEMU server behind the Redfish emulator network-boots
capfleet's deploy ramdisk from the operator's boot front, which fetches the node image once from an HTTP
server on loopback into its cache (the server has no route to it) and serves it (the seed, the callback
key and the callbacks over https://, with a certificate of the lab's own CA given on the ramdisk's command
line); the ramdisk writes it to the disk
its root device hints name, with the NoCloud seed beside it, and calls back; the operator power-cycles
the server onto its disk, where the node image's own cloud-init renders the meta-data and runs the
user-data. Deleting the instance cleans the disk (metadata, the default with an image): it no longer
boots. Then what goes wrong: a wrong checksum (two attempts), no disk matching the hints, an image that
is not there; each ends in RetryLimitExceeded with its reason, the server off and on disk; and an
instance deleted while its server boots the ramdisk is cleaned and goes.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from baremetal_helpers import (
    INSTANCES,
    condition,
    create_secrets,
    create_with,
    delete_and_wait,
    deploy_env,
    facts,
    operator_tokens,
)

from baremetal_provision import markers
from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer, Shape
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.imageserver import image_server, sha256_of
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.waiting import eventually
from capfleet_images.deployramdisk.build import DeployRamdisk
from capfleet_images.nodeimage.build import NodeImage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

ROOT_SERIAL = "CAPFLEET-ROOT"
# The node image is 2.3 GiB: a disk of 4 GiB holds it and the seed partition; 1.5 GiB of memory boot it.
NODE_SERVER = Shape(memory_mib=1536, disk_mib=4096, disk_serial=ROOT_SERIAL)
# Without hints the ramdisk takes the first disk of at least 4 GiB.
SMALL_SERVER = Shape(disk_mib=4608)
FIRST_BOOT = "capfleet-first-boot"
USER_DATA = f"""## template: jinja
#cloud-config
runcmd:
  - echo "{FIRST_BOOT} {{{{ ds.meta_data.provider_id }}}} $(hostname)" > /dev/ttyS0
"""
MIB = 1 << 20


def status(obj: dict[str, Any] | None) -> dict[str, Any]:
    return (obj or {}).get("status") or {}


@pytest.fixture
def deployer(
    namespace: str, run_operator: RunOperator, pxe_lab: PxeLab, deploy_ramdisk: DeployRamdisk, tmp_path: Path
) -> OperatorProcess:
    """baremetal-provision serving the deploy ramdisk, caching images in tmp_path/cache."""
    (tmp_path / "files").mkdir()
    env = deploy_env(pxe_lab, deploy_ramdisk, tmp_path / "files", tmp_path / "cache")
    return run_operator("baremetal_provision", namespaces=[namespace], env=env)


# In `make test-full`: its first boot from disk under TCG took 504 to 880 s of CI's budget.
@pytest.mark.full
async def test_a_server_gets_the_node_image_boots_it_from_disk_and_is_wiped_on_deletion(
    kube: Kube,
    namespace: str,
    deployer: OperatorProcess,
    baremetal_servers: Callable[..., list[BareMetalServer]],
    node_image: NodeImage,
    tmp_path: Path,
) -> None:
    (server,) = baremetal_servers(1, NODE_SERVER)
    digest = sha256_of(node_image.raw)
    await create_secrets(kube, namespace, server, user_data=USER_DATA)
    async with image_server(
        {"/node.raw": node_image.raw, "/node.raw.sha256": f"{digest}  node.raw\n".encode()}
    ) as url:
        started = time.monotonic()
        image = {"url": f"{url}/node.raw", "checksum": f"{url}/node.raw.sha256", "format": "raw"}
        await create_with(
            kube,
            namespace,
            server,
            image=image,
            rootDeviceHints={"serialNumber": ROOT_SERIAL},
            hostname="metal-1",
        )

        async def deployed() -> dict[str, Any] | None:
            obj = await kube.get(INSTANCES, server.name, namespace)
            return (
                obj if markers.CALLED_BACK in (obj or {}).get("metadata", {}).get("annotations", {}) else None
            )

        await eventually("the ramdisk to call back", deployed, within=600)
        written = time.monotonic()

    async def booted_from_disk() -> str | None:
        found = re.search(rf"{FIRST_BOOT} (\S+) (\S+)", server.serial_output())
        return found.group(0) if found else None

    line = await eventually("cloud-init's first boot from the disk", booted_from_disk, within=600)
    first_boot = time.monotonic()
    assert line == f"{FIRST_BOOT} capfleet://metal/{namespace}/{server.name} metal-1"
    # The ramdisk fetched its seed and image and called back over https://, trusting the lab's boot CA.
    assert "the boot server's https:// URLs are checked against capfleet.ca" in server.serial_output()
    obj = await kube.get(INSTANCES, server.name, namespace)
    assert obj is not None
    assert status(obj)["phase"] == "Provisioned"
    assert status(obj)["provisioningAttempts"] == 1
    assert markers.DISK_BOOTED in obj["metadata"]["annotations"]
    assert (tmp_path / "cache" / digest).stat().st_size == node_image.raw.stat().st_size, "kept, verified"
    reported = re.search(rf"{server.name} called back: deployed (.*)", deployer.log())
    print(
        f"\nimage deployment: create → written and called back {written - started:.0f} s,"
        f" → cloud-init on the first boot from disk {first_boot - written:.0f} s;"
        f" ramdisk: {reported.group(1) if reported else 'no timings'}"
    )
    seen = await facts(server)
    assert (seen.power_state, seen.boot_device) == ("On", "disk")

    took = await delete_and_wait(kube, namespace, server.name, "the instance to be cleaned and deleted", 300)
    print(f"deletion with cleaning: {took:.0f} s")
    assert (await facts(server)).power_state == "Off"
    with server.disk_path.open("rb") as disk:
        head = disk.read(MIB)
        disk.seek(-16 * MIB, 2)
        tail = disk.read(16 * MIB)
    assert head[510:512] != b"\x55\xaa", "the partition table is wiped: the disk no longer boots"
    assert b"CIDATA" not in tail, "the seed partition (with the bootstrap data) is wiped"


FAILURES = {
    "checksum": ("BadChecksum", 2),
    "hints": ("NoMatchingDisk", 1),
    "missing": ("DownloadFailed", 1),
}


async def test_a_bad_checksum_no_matching_disk_and_a_missing_image_each_end_in_retry_limit_exceeded(
    kube: Kube,
    namespace: str,
    deployer: OperatorProcess,
    baremetal_servers: Callable[..., list[BareMetalServer]],
    tmp_path: Path,
) -> None:
    *made, abandoned = baremetal_servers(len(FAILURES) + 1, SMALL_SERVER)
    servers = dict(zip(FAILURES, made, strict=True))
    small = bytes(range(256)) * (4 * MIB // 256)
    digest = hashlib.sha256(small).hexdigest()
    async with image_server({"/small.raw": small}) as url:
        await create_secrets(kube, namespace, abandoned)
        await create_with(kube, namespace, abandoned, image={"url": f"{url}/small.raw", "checksum": digest})
        images = {
            "checksum": ({"url": f"{url}/small.raw", "checksum": "0" * 64}, {}),
            "hints": ({"url": f"{url}/small.raw", "checksum": digest}, {"serialNumber": "NO-SUCH-DISK"}),
            "missing": ({"url": f"{url}/missing.raw", "checksum": digest}, {}),
        }
        for case, server in servers.items():
            await create_secrets(kube, namespace, server)
            image, hints = images[case]
            extra = {"rootDeviceHints": hints} if hints else {}
            await create_with(
                kube, namespace, server, image=image, maxProvisioningAttempts=FAILURES[case][1], **extra
            )

        async def all_failed() -> dict[str, dict[str, Any]] | None:
            found = {case: await kube.get(INSTANCES, s.name, namespace) for case, s in servers.items()}
            done = all(status(obj).get("phase") == "Failed" for obj in found.values())
            return {case: obj for case, obj in found.items() if obj is not None} if done else None

        async def network_booted() -> bool:
            obj = await kube.get(INSTANCES, abandoned.name, namespace)
            return markers.NETWORK_BOOTED in ((obj or {}).get("metadata", {}).get("annotations") or {})

        await eventually("the abandoned server to be network-booted", network_booted, within=120)
        what = "deletion during deployment to clean and finish"
        await delete_and_wait(kube, namespace, abandoned.name, what, 300)
        assert (await facts(abandoned)).power_state == "Off"
        failed = await eventually("every deployment to fail its attempts", all_failed, within=600)
    tokens = await operator_tokens(kube)
    for case, (reason, attempts) in FAILURES.items():
        obj = failed[case]
        provisioned = condition(obj, "Provisioned") or {}
        assert provisioned.get("reason") == "RetryLimitExceeded", case
        assert status(obj)["lastFailure"].startswith(f"{reason}: "), (case, status(obj)["lastFailure"])
        assert status(obj)["provisioningAttempts"] == attempts, case
        seen = await facts(servers[case])
        assert (seen.power_state, seen.boot_device) == ("Off", "disk"), case
        meta = obj["metadata"]
        salt = meta["annotations"][markers.TOKEN_SALT]
        for attempt in range(attempts + 1):
            token = tokens.token(salt, namespace, meta["name"], attempt)
            assert token not in str(obj["status"]), "no attempt's token (the seed's key) is ever in status"
    assert not (tmp_path / "cache" / ("0" * 64)).exists(), "an image that does not match is never kept"
