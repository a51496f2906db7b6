"""The test control plane is real and complete: right version, CRDs served, audit log, controllers working.

Everything else in the integration suites builds on these properties, so they are checked on their own.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import yaml

from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.crds import capfleet_crds

pytestmark = pytest.mark.integration

T = TypeVar("T")
# The labels CAPI v1.11's kustomizations put on these CRDs: core's own CRDs get only the provider label,
# the kubeadm bootstrap and control-plane providers' CRDs also the contract labels.
PROVIDER = "cluster.x-k8s.io/provider"
CONTRACT_LABELS = {"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}
CAPI_CRDS = {
    "clusters.cluster.x-k8s.io": {PROVIDER: "cluster-api"},
    "machines.cluster.x-k8s.io": {PROVIDER: "cluster-api"},
    "ipaddressclaims.ipam.cluster.x-k8s.io": {PROVIDER: "cluster-api"},
    "ipaddresses.ipam.cluster.x-k8s.io": {PROVIDER: "cluster-api"},
    "kubeadmconfigs.bootstrap.cluster.x-k8s.io": {PROVIDER: "bootstrap-kubeadm", **CONTRACT_LABELS},
    "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io": {
        PROVIDER: "control-plane-kubeadm",
        **CONTRACT_LABELS,
    },
}
CAPFLEET_CRDS = [c["metadata"]["name"] for c in capfleet_crds()]


def eventually(probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll `probe` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while (result := probe()) is None:
        assert time.monotonic() < deadline, f"condition not met within {timeout}s"
        time.sleep(0.1)
    return result


def local(cluster: Cluster) -> ControlPlane:
    if not isinstance(cluster, ControlPlane):
        pytest.skip("only meaningful for the local control plane")
    return cluster


def get_json(cluster: Cluster, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json"))
    return result


def established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture
def scratch_namespace(control_plane: Cluster) -> Iterator[str]:
    name = f"cp-test-{secrets.token_hex(4)}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def test_reports_the_built_version(control_plane: Cluster) -> None:
    local(control_plane)
    version = json.loads(control_plane.kubectl("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v1.33.13"


@pytest.mark.parametrize(("name", "labels"), CAPI_CRDS.items())
def test_capi_crd_is_established_with_its_labels(
    control_plane: Cluster, name: str, labels: dict[str, str]
) -> None:
    crd = get_json(control_plane, "crd", name)
    assert established(crd)
    assert labels.items() <= crd["metadata"].get("labels", {}).items()
    served = {v["name"] for v in crd["spec"]["versions"] if v["served"]}
    assert {"v1beta1", "v1beta2"} <= served
    if isinstance(control_plane, ControlPlane):
        assert crd["spec"]["conversion"]["strategy"] == "None"


@pytest.mark.skipif(not CAPFLEET_CRDS, reason="crds/ holds no generated CRDs yet")
@pytest.mark.parametrize("name", CAPFLEET_CRDS)
def test_capfleet_crd_is_established_with_its_labels(control_plane: Cluster, name: str) -> None:
    expected = next(c for c in capfleet_crds() if c["metadata"]["name"] == name)
    crd = get_json(control_plane, "crd", name)
    assert established(crd)
    assert (expected["metadata"].get("labels") or {}).items() <= crd["metadata"].get("labels", {}).items()


def test_capi_objects_are_served_in_every_version(control_plane: Cluster, scratch_namespace: str) -> None:
    manifest = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": scratch_namespace},
        "spec": {
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": "c1"}
        },
    }
    control_plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    old = get_json(control_plane, "clusters.v1beta1.cluster.x-k8s.io", "c1", "-n", scratch_namespace)
    assert old["apiVersion"] == "cluster.x-k8s.io/v1beta1"


def test_admin_request_is_audited(control_plane: Cluster) -> None:
    cp = local(control_plane)
    _, offset = cp.audit_events()
    marker = f"audit-{secrets.token_hex(4)}"
    request = urllib.request.Request(
        f"{cp.server}/api/v1/namespaces/default/configmaps/{marker}",
        headers={"Authorization": f"Bearer {cp.admin_token}"},
    )
    context = ssl.create_default_context(cafile=str(cp.ca_path))
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10, context=context)
    assert error.value.code == 404
    error.value.close()

    def audited() -> dict[str, Any] | None:
        events, _ = cp.audit_events(offset)
        return next((e for e in events if marker in e["requestURI"]), None)

    event = eventually(audited)
    assert event["user"]["username"] == "admin"
    assert event["verb"] == "get"
    assert event["stage"] == "ResponseComplete"
    assert event["responseStatus"]["code"] == 404


def test_garbage_collector_and_namespace_controller_run(
    control_plane: Cluster, scratch_namespace: str
) -> None:
    kubectl = control_plane.kubectl
    kubectl("create", "configmap", "parent", "-n", scratch_namespace)
    uid = get_json(control_plane, "configmap", "parent", "-n", scratch_namespace)["metadata"]["uid"]
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "namespace": scratch_namespace,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": uid}],
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(child))
    kubectl("delete", "configmap", "parent", "-n", scratch_namespace)
    kubectl("wait", "--for=delete", "configmap/child", "-n", scratch_namespace, "--timeout=60s", timeout=90)

    kubectl("delete", "namespace", scratch_namespace, "--wait=false")
    kubectl("wait", "--for=delete", f"namespace/{scratch_namespace}", "--timeout=60s", timeout=90)
