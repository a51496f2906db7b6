"""The clusterctl cluster templates (deploy/clusterctl/cluster-template*.yaml), assembled from the parts in
deploy/clusterctl/parts/.

The three flavors share one control plane, one worker bootstrap and the same node scripts (kube-vip, the
kubeadm retries, the image-free pod network): written once, a fix reaches every flavor, and a flavor cannot
lack what another needed to make real nodes. A part is a YAML document (or a piece of one) with its
comments; a line `#@include <path>` is replaced by that part, indented as the line is, and `@@TOKEN@@` by
the flavor's value. Each file's header (the command to render it, the variables without a default) is
generated from what the assembled template really uses, with the node image's Kubernetes version.

    python -m capfleet_e2e.clusterctl_templates generate|check    (make clusterctl-components[-check])
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from capfleet_e2e.kubebin import repo_root
from capfleet_images.nodeimage.versions import NodeImageVersions

TEMPLATES_DIR = Path("deploy") / "clusterctl"
PARTS_DIR = TEMPLATES_DIR / "parts"
INCLUDE = re.compile(r"^(?P<indent> *)#@include (?P<path>\S+)$", re.MULTILINE)
TOKEN = re.compile(r"@@(?P<name>[A-Z_]+)@@")
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?P<default>:=[^}]*)?\}")
# clusterctl sets these itself from `generate cluster`'s arguments and flags.
CLUSTERCTL_VARIABLES = frozenset(
    {"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT"}
)


@dataclass(frozen=True)
class Flavor:
    """One cluster template: its file, what it makes, its parts in order and its tokens' values."""

    file: str
    summary: str
    parts: tuple[str, ...]
    flag: str = ""
    tokens: Mapping[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return TEMPLATES_DIR / self.file


COMMON_HEAD = ("cluster.yaml",)
COMMON_WORKERS = ("machine-deployment.yaml",)
FLAVORS = (
    Flavor(
        "cluster-template.yaml",
        "hybrid: the control plane on libvirt VMs, workers on bare-metal servers claimed from NetBox",
        (
            *COMMON_HEAD,
            "hybridcluster-hybrid.yaml",
            "pools.yaml",
            "kubeadm-control-plane.yaml",
            "machine-template-vm-control-plane.yaml",
            *COMMON_WORKERS,
            "machine-template-baremetal-md-0.yaml",
        ),
        tokens={"VIP_INTERFACE": "eth0"},
    ),
    Flavor(
        "cluster-template-vm.yaml",
        "every machine a libvirt VM (no NetBox needed)",
        (
            *COMMON_HEAD,
            "hybridcluster-vm.yaml",
            "pools.yaml",
            "kubeadm-control-plane.yaml",
            "machine-template-vm-control-plane.yaml",
            *COMMON_WORKERS,
            "machine-template-vm-md-0.yaml",
        ),
        flag="--flavor vm ",
        tokens={"VIP_INTERFACE": "eth0"},
    ),
    Flavor(
        "cluster-template-baremetal.yaml",
        "every machine a bare-metal server claimed from NetBox",
        (
            *COMMON_HEAD,
            "hybridcluster-baremetal.yaml",
            "pools.yaml",
            "kubeadm-control-plane.yaml",
            "machine-template-baremetal-control-plane.yaml",
            *COMMON_WORKERS,
            "machine-template-baremetal-md-0.yaml",
        ),
        flag="--flavor baremetal ",
        tokens={"VIP_INTERFACE": "eno1"},
    ),
)


def expand(text: str, parts: Path, seen: tuple[str, ...] = ()) -> str:
    """`text` with every `#@include` line replaced by its part (recursively), indented as the line."""

    def included(match: re.Match[str]) -> str:
        name = match.group("path")
        if name in seen:
            raise ValueError(f"{' -> '.join((*seen, name))}: a part includes itself")
        body = expand((parts / name).read_text(), parts, (*seen, name)).rstrip("\n")
        indent = match.group("indent")
        return "\n".join(indent + line if line else line for line in body.split("\n"))

    return INCLUDE.sub(included, text)


def substitute(text: str, tokens: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in tokens:
            raise KeyError(f"token @@{name}@@ has no value in this flavor")
        return tokens[name]

    return TOKEN.sub(value, text)


def variables(text: str) -> dict[str, str | None]:
    """Each `${VAR}` the template uses and its default (`${VAR:=default}`), None where it has none."""
    found: dict[str, str | None] = {}
    for match in VARIABLE.finditer(text):
        default = match.group("default")
        name = match.group("name")
        if default is not None or name not in found:
            found[name] = default[2:] if default is not None else None
    return found


def required(text: str) -> list[str]:
    """The variables a user must set: no default, and not one clusterctl fills in."""
    return sorted(n for n, d in variables(text).items() if d is None and n not in CLUSTERCTL_VARIABLES)


def header(flavor: Flavor, body: str) -> str:
    version = NodeImageVersions().kubernetes
    needed = required(body)
    lines = [
        f"# capfleet cluster template: {flavor.summary}.",
        f"# Generated from {PARTS_DIR}/ by `make clusterctl-components`: edit the parts, not this file.",
        "# Render it with clusterctl (variables from the environment or clusterctl.yaml):",
        f"#   clusterctl generate cluster NAME --infrastructure capfleet {flavor.flag}"
        f"--kubernetes-version {version} \\",
        "#     --control-plane-machine-count 3 --worker-machine-count 2 > NAME.yaml",
        f"# Kubernetes {version} is the version capfleet's node image carries (make node-image).",
        "# Required variables (no default):",
        *(f"#   {name}" for name in needed),
        "# The book's Cluster templates page explains every variable.",
    ]
    return "\n".join(lines) + "\n"


def assemble(flavor: Flavor, root: Path) -> str:
    parts = root / PARTS_DIR
    documents = [
        substitute(expand((parts / p).read_text(), parts), flavor.tokens).strip("\n") for p in flavor.parts
    ]
    body = "\n---\n".join(documents) + "\n"
    if "#@include" in body or "@@" in body:
        raise ValueError(f"{flavor.file}: an include or token was left unexpanded")
    return header(flavor, body) + "---\n" + body


def stale(root: Path) -> list[str]:
    return [f.file for f in FLAVORS if (root / f.path).read_text() != assemble(f, root)]


def generate(root: Path) -> None:
    for flavor in FLAVORS:
        (root / flavor.path).write_text(assemble(flavor, root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capfleet_e2e.clusterctl_templates", description=__doc__)
    parser.add_argument("action", choices=("generate", "check"))
    args = parser.parse_args(argv)
    root = repo_root()
    if args.action == "generate":
        generate(root)
        return 0
    if out_of_date := stale(root):
        print(f"stale: {', '.join(out_of_date)}; run `make clusterctl-components`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
