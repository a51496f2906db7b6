"""The cluster templates are assembled from deploy/clusterctl/parts/ (clusterctl_templates.py): the files
are current, every flavor makes nodes the same way (kube-vip's VIP from a pool, the image repository, the
kubeadm retries, the pod network), and each header names exactly the variables a user must set."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet_e2e import clusterctl_templates
from capfleet_e2e.clusterctl_templates import FLAVORS, Flavor, assemble, expand, required, stale, variables
from capfleet_e2e.kubebin import repo_root
from capfleet_images.nodeimage.versions import NodeImageVersions

NODE_SCRIPTS = {
    "KubeadmControlPlane": {
        "/etc/kubernetes/manifests/kube-vip.yaml",
        "/usr/local/sbin/kube-vip-prepare",
        "/usr/local/sbin/capfleet-retry-init",
        "/usr/local/sbin/capfleet-retry-control-plane-join",
        "/usr/local/sbin/capfleet-bridge-cni",
    },
    "KubeadmConfigTemplate": {"/usr/local/sbin/capfleet-retry-join", "/usr/local/sbin/capfleet-bridge-cni"},
}


def objects(flavor: Flavor) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for document in yaml.safe_load_all((repo_root() / flavor.path).read_text()):
        found.setdefault(document["kind"], []).append(document)
    return found


def test_the_templates_are_what_their_parts_assemble_to() -> None:
    assert stale(repo_root()) == [], "run `make clusterctl-components`"


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f.file)
def test_every_flavor_makes_nodes_the_same_way(flavor: Flavor) -> None:
    found = objects(flavor)
    [kcp] = found["KubeadmControlPlane"]
    [workers] = found["KubeadmConfigTemplate"]
    specs = {
        "KubeadmControlPlane": kcp["spec"]["kubeadmConfigSpec"],
        "KubeadmConfigTemplate": workers["spec"]["template"]["spec"],
    }
    for kind, paths in NODE_SCRIPTS.items():
        assert {f["path"] for f in specs[kind]["files"]} == paths, (flavor.file, kind)
    kubeadm = specs["KubeadmControlPlane"]["clusterConfiguration"]
    assert kubeadm["imageRepository"] == "${CAPFLEET_IMAGE_REPOSITORY:=registry.capfleet.invalid}"
    [cluster] = found["HybridCluster"]
    assert cluster["spec"]["controlPlaneEndpointPoolRef"]["kind"] == "HybridIPPool"
    pools = {p["metadata"]["name"] for p in found["HybridIPPool"]}
    assert pools == {"${CLUSTER_NAME}-control-plane-endpoint", "${CLUSTER_NAME}-nodes"}


def test_each_header_names_the_variables_without_a_default_and_the_node_images_version() -> None:
    for flavor in FLAVORS:
        text = (repo_root() / flavor.path).read_text()
        header = text.split("\n---\n", 1)[0]
        listed = [
            line.removeprefix("#   ")
            for line in header.splitlines()
            if line.startswith("#   ") and "generate" not in line and "--control" not in line
        ]
        assert listed == required(text), flavor.file
        assert f"--kubernetes-version {NodeImageVersions().kubernetes}" in header
    vm = (repo_root() / clusterctl_templates.TEMPLATES_DIR / "cluster-template-vm.yaml").read_text()
    assert "CAPFLEET_NETBOX_SECRET" not in variables(vm)
    assert "CAPFLEET_VM_IMAGE" in required(vm)


def test_includes_are_indented_and_a_loop_or_a_missing_token_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outer.yaml").write_text("a:\n  #@include inner.yaml\n")
    (tmp_path / "inner.yaml").write_text("b: 1\nc:\n  - @@X@@\n")
    assert expand((tmp_path / "outer.yaml").read_text(), tmp_path) == "a:\n  b: 1\n  c:\n    - @@X@@\n"
    (tmp_path / "loop.yaml").write_text("#@include loop.yaml\n")
    with pytest.raises(ValueError, match="includes itself"):
        expand("#@include loop.yaml\n", tmp_path)
    flavor = Flavor("t.yaml", "test", ("outer.yaml",))
    with pytest.raises(KeyError, match="X"):
        assemble_from(flavor, tmp_path)
    assert "- y" in assemble_from(Flavor("t.yaml", "test", ("outer.yaml",), tokens={"X": "y"}), tmp_path)


def assemble_from(flavor: Flavor, parts: Path) -> str:
    root = parts.parent / "root"
    (root / clusterctl_templates.PARTS_DIR).parent.mkdir(parents=True, exist_ok=True)
    link = root / clusterctl_templates.PARTS_DIR
    if not link.exists():
        link.symlink_to(parts)
    return assemble(flavor, root)


TEMPLATES_PAGE = Path("docs") / "clusters" / "templates.md"
ROW = re.compile(r"^\| `(?P<name>[A-Z0-9_]+)` \| (?P<flavors>[hvb ]+) \| (?P<default>[^|]+) \|", re.MULTILINE)
LETTER = {
    "cluster-template.yaml": "h",
    "cluster-template-vm.yaml": "v",
    "cluster-template-baremetal.yaml": "b",
}


def test_the_templates_page_lists_every_variable_with_its_flavors_and_default() -> None:
    """docs/clusters/templates.md's table against what the templates use: no variable missing or extra,
    each in the flavors that use it, with the default the templates give it."""
    used: dict[str, dict[str, str | None]] = {}
    for flavor in FLAVORS:
        for name, default in variables((repo_root() / flavor.path).read_text()).items():
            used.setdefault(name, {})[LETTER[flavor.file]] = default
    rows = {m["name"]: m for m in ROW.finditer((repo_root() / TEMPLATES_PAGE).read_text())}
    assert sorted(rows) == sorted(used)
    for name, by_flavor in used.items():
        row = rows[name]
        assert row["flavors"].split() == [f for f in "hvb" if f in by_flavor], name
        defaults = set(by_flavor.values())
        shown = row["default"].strip()
        if defaults == {None}:
            assert shown == "—", name
        else:
            assert all(f"`{d}`" in shown for d in defaults), (name, shown)
