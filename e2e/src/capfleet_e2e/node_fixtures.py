"""pytest fixtures for suites with real Kubernetes nodes: the node image, the lab's node hypervisors, and
`node_site`, a management cluster ready for a cluster of VMs.

Imported by `capfleet_e2e.plugin`; nothing starts (or is built) unless a test asks. The node image is
built before the first test when any selected test needs it (plugin.py), so its build never counts
against a test's timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from capfleet.kube import Kube
from capfleet_e2e.baremetal.lab import PxeLab
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.labimage import lab_qcow2
from capfleet_e2e.nodesite import NodeLab, NodeSite, open_node_site
from capfleet_e2e.serviceaccounts import RunOperatorAs, starter
from capfleet_images.nodeimage.build import NodeImage, ensure_node_image


@pytest.fixture(scope="session")
def node_image() -> NodeImage:
    """capfleet's node image (built once per machine, then cached)."""
    return ensure_node_image()


@pytest.fixture(scope="session")
def node_lab(pxe_lab: PxeLab, node_image: NodeImage) -> Iterator[NodeLab]:
    """Two hypervisors (failure domains fd-1, fd-2) whose VMs live on the PXE lab's bridge."""
    lab = NodeLab(pxe_lab.network, lab_qcow2(node_image)).start()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture
async def node_site(
    kube: Kube,
    namespace: str,
    control_plane: ControlPlane,
    capi: CapiManagers,
    node_lab: NodeLab,
    run_operator_as: RunOperatorAs,
    tmp_path: Path,
) -> AsyncIterator[NodeSite]:
    """A cluster `nodes` of real nodes can be applied in a fresh namespace; deleted (and checked) after."""
    del capi  # only needed running
    async with open_node_site(
        kube=kube,
        namespace=namespace,
        control_plane=control_plane,
        lab=node_lab,
        start_operator=starter(run_operator_as, namespace),
        workdir=tmp_path,
    ) as site:
        yield site
