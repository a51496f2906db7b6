"""Shared steps of the baremetal-provision integration tests: Secrets, instances, the BMC's view.

The BMC is read through the operator's own Redfish backend, verified by the lab's CA, so the tests see
what a real BMC reports and not what the operator wrote in status.
"""

from __future__ import annotations

import base64
import shutil
import time
from pathlib import Path
from typing import Any

from baremetal_provision import markers, tokenkey
from baremetal_provision.backends import base, bmc
from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.waiting import eventually
from capfleet_images.deployramdisk.build import DeployRamdisk

INSTANCES = kinds.BAREMETAL_INSTANCE.resource
OPERATOR_ENV = {"CAPFLEET_BMC_SHUTDOWN_SECONDS": "3", "CAPFLEET_BMC_POWER_WAIT_SECONDS": "20"}
USER_DATA = "#cloud-config\nruncmd: [echo installed-by-capfleet]\n"


def instance_body(annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A BaremetalInstance `bm` in `ns` booting a custom installer, as the API server would hand it over."""
    return {
        "apiVersion": f"{kinds.BAREMETAL_GROUP}/{kinds.VERSION}",
        "kind": "BaremetalInstance",
        "metadata": {"name": "bm", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": {
            "bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bm-bmc"}},
            "bootMACAddress": "52:54:00:aa:bb:01",
            "os": {"kernelURL": "http://h/k", "initrdURL": "http://h/i"},
            "userDataSecretRef": {"name": "bm-bootstrap"},
            **spec,
        },
    }


async def operator_tokens(kube: Kube, namespace: str = "default") -> markers.Tokens:
    """What the operator derives tokens from, as a test that plays the server must: its token key Secret
    (in `default`, the namespace the harness runs operators as if in)."""
    secret = await kube.get(resources.SECRETS, tokenkey.SECRET_NAME, namespace)
    assert secret is not None, "the operator made its token key at startup"
    return markers.Tokens(tokenkey.key_of(secret))


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def operator_env(pxe_lab: PxeLab, files: Path, tls: bool = False) -> dict[str, str]:
    """The operator's environment: its boot HTTP server on a UNIX socket, behind a boot front that the
    lab's guests reach, as in the Deployment (with `tls`, the deploy ramdisk reaches it over https://)."""
    return {
        **OPERATOR_ENV,
        **pxe_lab.network.serve_boot_front(tls).operator_env(),
        "CAPFLEET_BOOT_URL": pxe_lab.network.http_url().rstrip("/"),
        "CAPFLEET_BOOT_FILES_DIR": str(files),
    }


def deploy_env(pxe_lab: PxeLab, ramdisk: DeployRamdisk, files: Path, cache: Path) -> dict[str, str]:
    """The operator's environment for image deployments: it serves the deploy ramdisk and caches images,
    and the ramdisk fetches its seed and image and calls back over https://, trusting the lab's CA."""
    return {
        **operator_env(pxe_lab, files, tls=True),
        "CAPFLEET_DEPLOY_RAMDISK_DIR": str(ramdisk.directory),
        "CAPFLEET_IMAGE_CACHE_DIR": str(cache),
        "CAPFLEET_IMAGE_SOURCE_CIDRS": "127.0.0.0/8",  # the lab's image servers are on loopback
    }


def boot_files(image: TestImage, directory: Path) -> Path:
    """A directory the operator serves under /files/: the netboot kernel and initrd."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in (("kernel", image.kernel), ("initrd", image.initrd)):
        shutil.copyfile(source, directory / name)  # aiohttp serves no symlinks out of its directory
    return directory


async def create_secrets(
    kube: Kube,
    namespace: str,
    server: BareMetalServer,
    password: str | None = None,
    ipmi: VirtualBmc | None = None,
    user_data: str = USER_DATA,
) -> None:
    """The BMC credentials Secret (the Redfish emulator's, or `ipmi`'s) and the bootstrap data Secret."""
    if ipmi is not None:
        credentials = {"username": b64(ipmi.username), "password": b64(password or ipmi.password)}
    else:
        credentials = {
            "username": b64(server.username),
            "password": b64(password or server.password),
            "caBundle": b64(server.ca_cert.read_text()),
        }
    for name, data in (
        (f"{server.name}-bmc", credentials),
        (f"{server.name}-bootstrap", {"value": b64(user_data)}),
    ):
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
        await kube.create(resources.SECRETS, body, namespace)


async def create_with(kube: Kube, namespace: str, server: BareMetalServer, **spec: Any) -> str:
    """A BaremetalInstance for `server` (its BMC, boot MAC and bootstrap Secret) with `spec` on top."""
    body = {
        "apiVersion": f"{kinds.BAREMETAL_GROUP}/{kinds.VERSION}",
        "kind": "BaremetalInstance",
        "metadata": {"name": server.name},
        "spec": {
            "bmc": {"address": server.bmc_address, "credentialsSecretRef": {"name": f"{server.name}-bmc"}},
            "bootMACAddress": server.mac,
            "userDataSecretRef": {"name": f"{server.name}-bootstrap"},
            **spec,
        },
    }
    await kube.create(INSTANCES, body, namespace)
    return server.name


async def create_instance(
    kube: Kube, namespace: str, server: BareMetalServer, image: TestImage, boot_url: str, **spec: Any
) -> str:
    """A BaremetalInstance that network-boots the lab's installer (`spec.os`) unless `spec` says otherwise."""
    installer = {
        "kernelURL": f"{boot_url}/files/kernel",
        "initrdURL": f"{boot_url}/files/initrd",
        "kernelArgs": image.cmdline.split(),
    }
    return await create_with(kube, namespace, server, **{"os": installer, **spec})


async def delete_and_wait(kube: Kube, namespace: str, name: str, what: str, within: float) -> float:
    """Delete instance `name` and wait until it is gone (its finalizer done); returns the seconds taken."""
    started = time.monotonic()
    await kube.delete(INSTANCES, name, namespace)

    async def gone() -> bool:
        return await kube.get(INSTANCES, name, namespace) is None

    await eventually(what, gone, within=within)
    return time.monotonic() - started


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in found if c["type"] == type_), None)


def ipmi_spec(vbmc: VirtualBmc, server: BareMetalServer) -> dict[str, Any]:
    """`spec.bmc` for a server behind virtualbmc."""
    return {"address": vbmc.address, "credentialsSecretRef": {"name": f"{server.name}-bmc"}}


async def facts(server: BareMetalServer, ipmi: VirtualBmc | None = None) -> base.SystemFacts:
    """What the server's BMC (its Redfish emulator, or `ipmi`) reports now."""
    if ipmi is not None:
        target = bmc.connect(
            ipmi.address, base.Credentials(ipmi.username, ipmi.password), verify=True, ipmi_cipher_suite=3
        )
    else:
        credentials = base.Credentials(server.username, server.password, server.ca_cert.read_text())
        target = bmc.connect(server.bmc_address, credentials, verify=True)
    try:
        return await target.facts()
    finally:
        await target.close()
