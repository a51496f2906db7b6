"""pytest fixture for the end-to-end suites: `hybrid_site`, a management cluster ready for a hybrid cluster.

Imported by `capfleet_e2e.plugin`. It combines the session's real parts (control plane, CAPI's managers,
a test hypervisor, the PXE lab with two new servers, NetBox) into `capfleet_e2e.site.open_site`, with
every operator running as its own ServiceAccount bound to exactly its kustomize base's RBAC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.netbox.fixtures import NetboxInstance
from capfleet_e2e.serviceaccounts import RunOperatorAs, starter
from capfleet_e2e.site import HybridSite, open_site

HYBRID_CLUSTER_NAME = "hybrid"


@pytest.fixture
async def hybrid_site(
    kube: Kube,
    namespace: str,
    control_plane: ControlPlane,
    capi: CapiManagers,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    pxe_lab: PxeLab,
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    netboot_image: TestImage,
    netbox: NetboxInstance,
    run_operator_as: RunOperatorAs,
    tmp_path: Path,
) -> AsyncIterator[HybridSite]:
    """Everything a hybrid cluster `hybrid` needs in a fresh namespace; deleted (and checked gone) after."""
    async with open_site(
        kube=kube,
        namespace=namespace,
        control_plane=control_plane,
        hypervisor=hypervisors[0],
        vm_image=test_image,
        pxe_lab=pxe_lab,
        servers=baremetal_servers(2),
        netboot=netboot_image,
        netbox=netbox,
        start_operator=starter(run_operator_as, namespace),
        workdir=tmp_path,
        cluster_name=HYBRID_CLUSTER_NAME,
    ) as site:
        yield site
