"""Installs the CRDs every integration test expects: capfleet's own and Cluster API's.

capfleet's CRDs are the generated files under <repo>/crds/. Cluster API's come from the Go module
`sigs.k8s.io/cluster-api@CAPI_VERSION`: its zip ships `config/crd/bases` without the kustomize layer, so
we apply what that layer would: the resources each `config/crd/kustomization.yaml` lists, with the labels
it and its sibling `config/default/kustomization.yaml` add. In v1.11 that is the contract labels
(`cluster.x-k8s.io/v1beta1: v1beta1`, `cluster.x-k8s.io/v1beta2: v1beta2`) on the kubeadm bootstrap and
control-plane CRDs (core's own CRDs carry none) and `cluster.x-k8s.io/provider: <provider>` on all.
Conversion is pinned to strategy None: without CAPI's webhook, the apiserver serves every version itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from capfleet_e2e.kubebin import HarnessError, Kubectl, find_go, repo_root

CAPI_MODULE = "sigs.k8s.io/cluster-api"
CAPI_VERSION = "v1.11.3"
# The kustomize folders (inside the module) whose CRDs the harness installs.
CAPI_CRD_FOLDERS = ("config/crd", "bootstrap/kubeadm/config/crd", "controlplane/kubeadm/config/crd")
FIELD_MANAGER = "capfleet-e2e"
ESTABLISH_TIMEOUT = "120s"

Crd = dict[str, Any]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: CAPI's CRDs are megabytes of YAML


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_Loader)  # a safe loader, C or Python


def capfleet_crd_files(root: Path | None = None) -> list[Path]:
    """Every generated CRD file under <repo>/crds/ (kustomization.yaml excluded)."""
    crds = (root or repo_root()) / "crds"
    return sorted(p for p in crds.rglob("*.yaml") if p.name != "kustomization.yaml")


def capfleet_crds(root: Path | None = None) -> list[Crd]:
    docs: list[Crd] = []
    for path in capfleet_crd_files(root):
        docs += [d for d in yaml.load_all(path.read_text(), Loader=_Loader) if d]
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


@cache
def capi_module_dir(version: str = CAPI_VERSION) -> Path:
    """The extracted `sigs.k8s.io/cluster-api` module (downloaded once into the Go module cache)."""
    with tempfile.TemporaryDirectory() as cwd:  # outside any go.mod
        result = subprocess.run(
            [find_go(), "mod", "download", "-json", f"{CAPI_MODULE}@{version}"],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"},
            check=False,
        )
    if result.returncode != 0:
        raise HarnessError(f"go mod download {CAPI_MODULE}@{version} failed: {result.stdout}{result.stderr}")
    return Path(json.loads(result.stdout)["Dir"])


def kustomization_labels(kustomization: dict[str, Any]) -> dict[str, str]:
    """The labels a kustomization adds to its resources (`labels[].pairs` and `commonLabels`)."""
    labels: dict[str, str] = dict(kustomization.get("commonLabels") or {})
    for entry in kustomization.get("labels") or []:
        labels.update(entry.get("pairs") or {})
    return labels


def capi_crds(module_dir: Path | None = None, folders: Iterable[str] = CAPI_CRD_FOLDERS) -> list[Crd]:
    """Cluster API's CRDs as `kustomize build config/default` would label them, without conversion webhook:
    those of the kustomize `folders` of `module_dir` (by default, the main module's three providers)."""
    module = module_dir or capi_module_dir()
    crds: list[Crd] = []
    for folder in folders:
        kustomization = _load(module / folder / "kustomization.yaml")
        labels = kustomization_labels(kustomization)
        default = module / folder / ".." / "default" / "kustomization.yaml"
        if default.is_file():
            labels.update(kustomization_labels(_load(default)))
        for resource in kustomization["resources"]:
            crd: Crd = _load(module / folder / resource)
            crd["metadata"].setdefault("labels", {}).update(labels)
            crd["spec"]["conversion"] = {"strategy": "None"}
            crds.append(crd)
    return crds


def _webhook_converted(kubectl: Kubectl, names: Iterable[str]) -> set[str]:
    """Those of `names` already installed with a conversion webhook (a real CAPI install we must keep)."""
    out = kubectl("get", "crd", *names, "--ignore-not-found", "-o", "json")
    if not out.strip():
        return set()
    items = json.loads(out).get("items", [])
    return {
        i["metadata"]["name"]
        for i in items
        if (i["spec"].get("conversion") or {}).get("strategy") == "Webhook"
    }


def apply_crds(kubectl: Kubectl, crds: list[Crd]) -> list[str]:
    """Server-side apply `crds`, wait until all are Established; return their names."""
    if not crds:
        return []
    names = [c["metadata"]["name"] for c in crds]
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}),
        timeout=300,
    )
    kubectl(
        "wait",
        "--for=condition=Established",
        f"--timeout={ESTABLISH_TIMEOUT}",
        *(f"crd/{n}" for n in names),
        timeout=300,
    )
    return names


def install_all(kubectl: Kubectl, keep_webhook_converted: bool = True, capfleet: bool = True) -> list[str]:
    """Install capfleet's (unless not `capfleet`: a cluster that gets them from `clusterctl init`) and
    Cluster API's CRDs; return the names of those installed.

    With `keep_webhook_converted`, Cluster API CRDs already served through a conversion webhook (a cluster
    that runs the real CAPI) are left alone, so the harness never breaks a working installation.
    """
    capi = capi_crds()
    if keep_webhook_converted:
        keep = _webhook_converted(kubectl, (c["metadata"]["name"] for c in capi))
        capi = [c for c in capi if c["metadata"]["name"] not in keep]
    return apply_crds(kubectl, (capfleet_crds() if capfleet else []) + capi)
