"""capfleet's pytest plugin: the session-wide Kubernetes cluster every integration test talks to.

Registered through the `pytest11` entry point, so every test in the workspace can request its fixtures.
The cluster starts lazily, once per session, and only when a test asks for it: unit tests never start it.

Configuration is by environment variable only:

- CAPFLEET_TEST_KUBECONFIG=/path: use that kubeconfig's current context instead of a local control plane;
- CAPFLEET_CACHE: where the Kubernetes binaries and NetBox releases are cached (default ~/.cache/capfleet);
- CAPFLEET_NETBOX_SOURCES: a directory of NetBox release tarballs (netbox-<version>.tar.xz) to install
  from instead of GitHub (default ../shared/vendor/netbox beside the repository, where CI has them);
- CAPFLEET_ARTIFACTS: where component logs and the audit log go
  (default <repo>/_artifacts/<timestamp>-<pid>/).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.capibin import ensure_capi_binaries
from capfleet_e2e.controlplane import Cluster, ControlPlane, ExistingCluster
from capfleet_e2e.crds import capi_module_dir
from capfleet_e2e.kubebin import artifacts_dir, ensure_kube_binaries
from capfleet_e2e.netbox.preinstall import Preinstall
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE, RELEASES
from capfleet_e2e.release import TEST_VERSION, Release
from capfleet_e2e.release import build as build_release
from capfleet_images.nodeimage.build import ensure_node_image

EXISTING_KUBECONFIG_ENV = "CAPFLEET_TEST_KUBECONFIG"
PREINSTALL = pytest.StashKey[Preinstall]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs the real control plane (and possibly other real parts)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that use Cluster API's managers (fixture `capi`) after all others, and within each
    group the tests that use NetBox last.

    Once started, CAPI's webhooks and controllers act on the whole session's cluster (its CRDs convert by
    webhook, its admission webhooks check every CAPI object), and the other tests expect a cluster
    without CAPI. NetBox installs in the background meanwhile (netbox/preinstall.py): the later its first
    test, the more of a first install hides behind the others. The sort is stable: each group keeps its
    order.
    """
    items.sort(key=lambda item: ("capi" in getattr(item, "fixturenames", ()), bool(netbox_releases_of(item))))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fetch the binaries and CAPI module before the first test if any selected test needs a cluster.

    The first build takes many minutes; done here, it does not count against a test's timeout. NetBox's
    releases start installing first, in the background (netbox/preinstall.py). `--collect-only` builds
    nothing.
    """
    if session.config.option.collectonly:
        return
    releases = sorted({version for item in session.items for version in netbox_releases_of(item)})
    if releases and PREINSTALL not in session.config.stash:
        log_dir = artifacts_dir() / "netbox"
        log_dir.mkdir(parents=True, exist_ok=True)
        session.config.stash[PREINSTALL] = Preinstall(releases, log_dir).start()
    if any("control_plane" in getattr(item, "fixturenames", ()) for item in session.items):
        if not os.environ.get(EXISTING_KUBECONFIG_ENV):
            ensure_kube_binaries()
        capi_module_dir()
    if any("capi" in getattr(item, "fixturenames", ()) for item in session.items):
        ensure_capi_binaries()
    if any("node_image" in getattr(item, "fixturenames", ()) for item in session.items):
        ensure_node_image()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Before a test that uses NetBox, wait for its background install, outside the test's timeout
    (pytest-timeout starts its clock in an inner wrapper of this hook)."""
    preinstall = item.config.stash.get(PREINSTALL, None)
    if preinstall is not None and netbox_releases_of(item):
        preinstall.wait()
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    preinstall = session.config.stash.get(PREINSTALL, None)
    if preinstall is not None:
        preinstall.stop()


def netbox_releases_of(item: pytest.Item) -> list[str]:
    """The real NetBox releases a test will talk to (none if it uses no `netbox` fixture)."""
    if "netbox" not in getattr(item, "fixturenames", ()):
        return []
    callspec = getattr(item, "callspec", None)
    version = callspec.params.get("netbox") if callspec is not None else None
    version = version or DEFAULT_RELEASE
    return [version] if version in RELEASES else []


def start_cluster() -> Cluster:
    """An `ExistingCluster` if CAPFLEET_TEST_KUBECONFIG is set, else a freshly started `ControlPlane`."""
    existing = os.environ.get(EXISTING_KUBECONFIG_ENV)
    if existing:
        return ExistingCluster(Path(existing)).start()
    return ControlPlane().start()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Cluster]:
    """The session's cluster, with capfleet's and Cluster API's CRDs installed."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def capi(control_plane: Cluster) -> Iterator[CapiManagers]:
    """Cluster API's real managers (core, kubeadm bootstrap and control plane) on the session's cluster.

    Started on first request and kept for the session; from then on CAPI's controllers and webhooks act
    on every namespace, as in a real installation. Needs the local control plane (webhooks on loopback).
    """
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("Cluster API's managers run only against the local control plane")
    with CapiManagers(control_plane) as managers:
        yield managers


@pytest.fixture(scope="session")
def capfleet_release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """A release of capfleet (`make release`, version TEST_VERSION) made in this run, images and all: what
    the image tests read and the management cluster installs with clusterctl."""
    return build_release(TEST_VERSION, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def kubeconfig(control_plane: Cluster) -> Path:
    """Path of an admin kubeconfig for the session's cluster."""
    return control_plane.kubeconfig


from capfleet_e2e.baremetal.fixtures import (  # noqa: E402
    baremetal_servers,
    deploy_ramdisk,
    netboot_image,
    pxe_lab,
)
from capfleet_e2e.baremetal.ipmi import ipmi_bmcs  # noqa: E402
from capfleet_e2e.fixtures import kube, namespace, run_operator  # noqa: E402  (fixtures of this plugin)
from capfleet_e2e.hybrid_fixtures import hybrid_site  # noqa: E402
from capfleet_e2e.libvirt.fixtures import hypervisors, test_image  # noqa: E402
from capfleet_e2e.netbox.fixtures import netbox, real_netboxes  # noqa: E402
from capfleet_e2e.node_fixtures import node_image, node_lab, node_site  # noqa: E402
from capfleet_e2e.serviceaccounts import run_operator_as  # noqa: E402

__all__ = [
    "baremetal_servers",
    "capfleet_release",
    "capi",
    "control_plane",
    "deploy_ramdisk",
    "hybrid_site",
    "hypervisors",
    "ipmi_bmcs",
    "kube",
    "kubeconfig",
    "namespace",
    "netboot_image",
    "netbox",
    "node_image",
    "node_lab",
    "node_site",
    "pxe_lab",
    "real_netboxes",
    "run_operator",
    "run_operator_as",
    "test_image",
]
