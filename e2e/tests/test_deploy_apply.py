"""Every overlay in deploy/ is accepted by the real apiserver, and operators upgrade one at a time.

Each overlay is rendered with the real kustomize and sent with `kubectl apply --server-side
--dry-run=server`, so the apiserver's own validation (schemas, RBAC objects, CRDs, references) runs on
it. Then the all-in-one overlay is applied for real, one operator's image is changed in its own overlay
with `kustomize edit set image` (in a copy of the tree), and re-applying the all-in-one overlay must
change that Deployment and nothing else: that is what "upgrade each operator independently" means.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import Kubectl, repo_root
from capfleet_e2e.kustomize import build, copy_deploy_tree, set_image

pytestmark = pytest.mark.integration

OVERLAYS = (
    "ipam-address",
    "netbox-device",
    "libvirt-vm",
    "baremetal-provision",
    "capi-machine-glue",
    "all-in-one",
    "cluster-wide",
)
FIELD_MANAGER = "capfleet-deploy-tests"
NAMESPACE = "capfleet-system"


def apply(kubectl: Kubectl, rendered: str, *extra: str) -> str:
    # --force-conflicts: the RBAC tests of the same session apply deploy/base's admission policies under
    # their own field manager, and the API server's defaults in them then count as theirs.
    return kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        *extra,
        "-f",
        "-",
        stdin=rendered,
    )


@pytest.fixture(scope="module")
def fleet_base(control_plane: Cluster) -> Kubectl:
    """deploy/base applied for real: what every per-operator overlay expects to exist already."""
    kubectl = control_plane.kubectl
    apply(kubectl, build(repo_root() / "deploy" / "base"))
    return kubectl


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_server_side_dry_run(fleet_base: Kubectl, overlay: str) -> None:
    output = apply(fleet_base, build(repo_root() / "deploy" / "overlays" / overlay), "--dry-run=server")
    assert "deployment.apps/capfleet-" in output


def test_the_tenant_bindings_pass_server_side_dry_run_in_a_tenant_namespace(fleet_base: Kubectl) -> None:
    output = apply(fleet_base, build(repo_root() / "deploy" / "tenant"), "-n", "default", "--dry-run=server")
    assert output.count("rolebinding.rbac.authorization.k8s.io/capfleet-") == 4


def deployments(kubectl: Kubectl) -> dict[str, dict[str, Any]]:
    """name → (generation, resourceVersion, image) of every Deployment in capfleet-system."""
    items = json.loads(kubectl("get", "deployments", "-n", NAMESPACE, "-o", "json"))["items"]
    return {
        d["metadata"]["name"]: {
            "generation": d["metadata"]["generation"],
            "resourceVersion": d["metadata"]["resourceVersion"],
            "image": d["spec"]["template"]["spec"]["containers"][0]["image"],
        }
        for d in items
    }


def test_changing_one_image_tag_changes_only_that_deployment(fleet_base: Kubectl, tmp_path: Path) -> None:
    tree = copy_deploy_tree(tmp_path)
    all_in_one = tree / "deploy" / "overlays" / "all-in-one"
    apply(fleet_base, build(all_in_one))
    before = deployments(fleet_base)
    assert len(before) == 5

    apply(fleet_base, build(all_in_one))
    assert deployments(fleet_base) == before, "re-applying the same overlay changes nothing"

    set_image(
        tree / "deploy" / "overlays" / "netbox-device",
        "capfleet/netbox-device=registry.example/netbox-device:v0.2.0",
    )
    apply(fleet_base, build(all_in_one))
    after = deployments(fleet_base)

    upgraded = "capfleet-netbox-device-manager"
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {upgraded}
    assert after[upgraded]["image"] == "registry.example/netbox-device:v0.2.0"
    assert after[upgraded]["generation"] == before[upgraded]["generation"] + 1
