"""The node image's programs that are not Kubernetes binaries: etcd, CoreDNS, kube-vip and pause.

hack/build-node-components.sh builds them from Go modules (pause from its C source in k8s.io/kubernetes)
and caches each under $CAPFLEET_CACHE/node-components/<name>-<version>/bin; `ensure_components` runs it
for whatever is missing and says where the binaries are, for containers.write_node_images.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capfleet_images.cache import cache_root, ensure_built, repo_root
from capfleet_images.nodeimage.versions import (
    COREDNS_VERSION,
    ETCD_VERSION,
    KUBE_VIP_VERSION,
    PAUSE_TAG,
    NodeImageVersions,
)

BUILD_SCRIPT = Path("hack") / "build-node-components.sh"


@dataclass(frozen=True)
class Component:
    """One thing the build script builds (`name` is how NODE_COMPONENTS calls it) and its binaries."""

    name: str
    version: str
    binaries: tuple[str, ...]
    optional: tuple[str, ...] = ()


COMPONENTS = (
    Component("etcd", ETCD_VERSION, ("etcd",), optional=("etcdctl",)),
    Component("coredns", COREDNS_VERSION, ("coredns",)),
    Component("kube-vip", KUBE_VIP_VERSION, ("kube-vip",)),
    Component("pause", PAUSE_TAG, ("pause",)),
)


def component_bin_dir(name: str, version: str) -> Path:
    return cache_root() / "node-components" / f"{name}-{version}" / "bin"


def script_env(versions: NodeImageVersions) -> dict[str, str]:
    """The build script's version variables (its defaults are the same; explicit keeps them in step)."""
    return {
        "ETCD_VERSION": ETCD_VERSION,
        "COREDNS_VERSION": COREDNS_VERSION,
        "KUBE_VIP_VERSION": KUBE_VIP_VERSION,
        "PAUSE_VERSION": PAUSE_TAG,
        "KUBE_VERSION": versions.kubernetes,  # the module pause.c comes from
    }


def ensure_components(
    versions: NodeImageVersions | None = None, names: Sequence[str] | None = None
) -> dict[str, Path]:
    """Binary name → file, for every component (or those `names` names), built first where missing;
    optional ones if built."""
    versions = versions or NodeImageVersions()
    binaries: dict[str, Path] = {}
    for component in COMPONENTS:
        if names is not None and component.name not in names:
            continue
        bin_dir = ensure_built(
            f"{component.name} {component.version}",
            component_bin_dir(component.name, component.version),
            component.binaries,
            repo_root() / BUILD_SCRIPT,
            {**script_env(versions), "NODE_COMPONENTS": component.name},
        )
        for binary in (*component.binaries, *component.optional):
            if os.access(bin_dir / binary, os.X_OK):
                binaries[binary] = bin_dir / binary
    return binaries
