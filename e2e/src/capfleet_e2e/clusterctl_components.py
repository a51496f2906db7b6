"""deploy/clusterctl/*-components.yaml: the all-in-one overlay, as clusterctl wants it, as two providers.

`python -m capfleet_e2e.clusterctl_components generate|check [directory]` (`make clusterctl-components`,
`make clusterctl-components-check`). The all-in-one overlay is rendered with the real kustomize and split
into the two clusterctl providers capfleet ships, as Metal3 ships its IPAM apart from its infrastructure
provider, so that `clusterctl init --ipam capfleet` installs and `clusterctl upgrade` moves ipam-address
on its own:

- `infrastructure-capfleet` (infrastructure-components.yaml): netbox-device, libvirt-vm,
  baremetal-provision, capi-machine-glue, the console (deploy/overlays/console), every CRD but the IPAM
  group's, and what the fleet shares (deploy/base's metrics reader and admission policies);
- `ipam-capfleet` (ipam-components.yaml): ipam-address and the ipam.capfleet.dev CRDs.

Each holds exactly one Namespace (capfleet-system, shared; clusterctl moves everything into
`--target-namespace`), the provider label `cluster.x-k8s.io/provider: <provider>` on every object, and
every operator container named `manager` (clusterctl's image overrides look for that name). Images and
logging are `${VAR:=default}` variables (see `VARIABLES`), so `clusterctl init` works without any variable
set. A release (capfleet_e2e.release) renders the same objects with each image pinned by digest.

The generated files are committed; `check` fails when one is stale, as `crdgen check` does for crds/.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capfleet.runtime import VERSION
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.kustomize import build, documents

OUTPUT_DIR = Path("deploy") / "clusterctl"
OVERLAY = Path("deploy") / "overlays" / "all-in-one"
CONSOLE_OVERLAY = Path("deploy") / "overlays" / "console"
PROVIDER_LABEL_KEY = "cluster.x-k8s.io/provider"
CONTAINER = "manager"
OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
CONSOLE = "console"
DEFAULT_TAG = f"v{VERSION}"
IPAM_GROUP = "ipam.capfleet.dev"


@dataclass(frozen=True)
class Provider:
    """One clusterctl provider of capfleet's: its name, its clusterctl type, its file and its operators."""

    name: str
    """clusterctl's provider label, <type prefix>-capfleet."""
    type: str
    """The clusterctl.yaml `providers:` type."""
    file: str
    operators: tuple[str, ...]
    console: bool = False
    """Whether the provider also installs the console (a Deployment, not an operator)."""

    @property
    def images(self) -> tuple[str, ...]:
        """The images its Deployments run: its operators', and the console's."""
        return (*self.operators, *((CONSOLE,) if self.console else ()))


INFRASTRUCTURE = Provider(
    "infrastructure-capfleet",
    "InfrastructureProvider",
    "infrastructure-components.yaml",
    ("netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue"),
    console=True,
)
IPAM = Provider("ipam-capfleet", "IPAMProvider", "ipam-components.yaml", ("ipam-address",))
PROVIDERS = (INFRASTRUCTURE, IPAM)
OUTPUT = OUTPUT_DIR / INFRASTRUCTURE.file


def tag_variable(operator: str) -> str:
    """The variable that pins one operator's image tag, e.g. CAPFLEET_IPAM_ADDRESS_IMAGE_TAG."""
    return f"CAPFLEET_{operator.upper().replace('-', '_')}_IMAGE_TAG"


# name → (default, meaning). The per-operator tags default to CAPFLEET_IMAGE_TAG. No "${" in these texts:
# clusterctl reads variables in comments too, and the header lists these.
VARIABLES: dict[str, tuple[str, str]] = {
    "CAPFLEET_IMAGE_REGISTRY": (
        "docker.io/capfleet",
        "registry and path of the operator images, <registry>/<operator>; fully qualified (clusterctl)",
    ),
    "CAPFLEET_IMAGE_TAG": (DEFAULT_TAG, "image tag of every operator without its own tag variable set"),
    **{
        tag_variable(op): ("CAPFLEET_IMAGE_TAG's value", f"image tag of {op} alone (upgrade one image)")
        for op in (*OPERATORS, CONSOLE)
    },
    "CAPFLEET_LOG_FORMAT": ("json", "log format of every operator: json or plain"),
    "CAPFLEET_VERBOSE": ("false", "debug logging of every operator: true or false"),
    "CAPFLEET_INSTANCE_NAME": (
        "auto",
        "this management cluster's name in NetBox owner values (devices, VMs, IPs) and libvirt domains;"
        " auto: derived from its kube-system UID",
    ),
}


class Quoted(str):
    """A string that must stay a string after substitution (e.g. `"${CAPFLEET_VERBOSE:=false}"`)."""

    __slots__ = ()


class _Dumper(yaml.SafeDumper):
    pass


def _quoted(dumper: yaml.SafeDumper, value: Quoted) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style='"')


_Dumper.add_representer(Quoted, _quoted)


@dataclass(frozen=True)
class Pin:
    """A released image: its tag and its manifest digest (sha256:...)."""

    tag: str
    digest: str


def image(operator: str, pin: Pin | None = None) -> str:
    """The operator's image reference: registry and tag variables, or (a release) its tag and digest; the
    registry stays a variable either way, so a mirror keeps the digest."""
    registry = f"${{CAPFLEET_IMAGE_REGISTRY:={VARIABLES['CAPFLEET_IMAGE_REGISTRY'][0]}}}"
    if pin is not None:
        return f"{registry}/{operator}:{pin.tag}@{pin.digest}"
    tag = f"${{{tag_variable(operator)}:=${{CAPFLEET_IMAGE_TAG:={DEFAULT_TAG}}}}}"
    return f"{registry}/{operator}:{tag}"


def _operator_of(deployment: dict[str, Any]) -> str:
    name: str = deployment["metadata"]["name"]
    for operator in (*OPERATORS, CONSOLE):
        if name == f"capfleet-{operator}-manager":
            return operator
    raise ValueError(f"Deployment {name} belongs to no known operator")


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = [e for e in container.get("env") or [] if e["name"] != name]
    container["env"] = [*env, {"name": name, "value": Quoted(value)}]


def _container_args(container: dict[str, Any]) -> list[str]:
    args = [a for a in container.get("args") or [] if not a.startswith("--log-format")]
    return [f"--log-format=${{CAPFLEET_LOG_FORMAT:={VARIABLES['CAPFLEET_LOG_FORMAT'][0]}}}", *args]


def owner(obj: dict[str, Any]) -> Provider | None:
    """The provider an object of the all-in-one overlay ships in; None for the Namespace (in both)."""
    if obj["kind"] == "Namespace":
        return None
    if obj["kind"] == "CustomResourceDefinition":
        return IPAM if obj["spec"]["group"] == IPAM_GROUP else INFRASTRUCTURE
    name: str = obj["metadata"]["name"]
    for provider in PROVIDERS:
        if any(name.startswith(f"capfleet-{op}-") for op in provider.images):
            return provider
    return INFRASTRUCTURE  # what the fleet shares: deploy/base's objects


def components(
    objects: list[dict[str, Any]], provider: Provider, pins: Mapping[str, Pin] | None = None
) -> list[dict[str, Any]]:
    """The all-in-one overlay's objects of `provider` turned into its clusterctl provider components;
    `pins` (operator → released image) pins each image by digest."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    if len(namespaces) != 1:
        raise ValueError(f"the all-in-one overlay must hold exactly one Namespace, not {len(namespaces)}")
    result = []
    for obj in objects:
        if owner(obj) not in (None, provider):
            continue
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("labels", {})[PROVIDER_LABEL_KEY] = provider.name
        if obj["kind"] == "Deployment":
            operator = _operator_of(obj)
            containers = obj["spec"]["template"]["spec"]["containers"]
            if containers[0]["name"] != CONTAINER:
                raise ValueError(f"{operator}: the first container must be {CONTAINER!r} (clusterctl's)")
            own = containers[0]["image"]
            for other in containers:  # baremetal-provision's boot front runs the operator's image too
                if other["image"] == own:
                    other["image"] = image(operator, None if pins is None else pins[operator])
            if operator == CONSOLE:  # its own settings: no operator flags
                result.append(obj)
                continue
            container = containers[0]
            container["args"] = _container_args(container)
            _set_env(
                container, "CAPFLEET_VERBOSE", f"${{CAPFLEET_VERBOSE:={VARIABLES['CAPFLEET_VERBOSE'][0]}}}"
            )
            if operator in {"netbox-device", "libvirt-vm", "ipam-address"}:
                _set_env(container, "CAPFLEET_INSTANCE_NAME", "${CAPFLEET_INSTANCE_NAME:=auto}")
        result.append(obj)
    # Namespace first, as clusterctl orders it too.
    return sorted(result, key=lambda o: o["kind"] != "Namespace")


def header(provider: Provider, body: str, release: str | None) -> str:
    made = (
        f"# capfleet release {release}: every image pinned by digest. Written by `make release`."
        if release is not None
        else "# GENERATED from deploy/overlays/all-in-one by `make clusterctl-components`; do not edit."
    )
    lines = [
        f"# capfleet's clusterctl provider components ({provider.name}).",
        made,
        "# Variables (clusterctl substitutes them; each has a default):",
    ]
    used = variables(body)
    width = max(len(name) for name in used)
    lines += [
        f"#   {name:<{width}}  {meaning} (default {default})"
        for name, (default, meaning) in VARIABLES.items()
        if name in used
    ]
    return "\n".join(lines) + "\n"


def overlay_objects(root: Path) -> list[dict[str, Any]]:
    """What the providers ship: the all-in-one overlay's objects and the console overlay's."""
    return documents(build(root / OVERLAY)) + documents(build(root / CONSOLE_OVERLAY))


def render(
    provider: Provider = INFRASTRUCTURE,
    root: Path | None = None,
    pins: Mapping[str, Pin] | None = None,
    release: str | None = None,
) -> str:
    """One provider's components file: generated (variables for every image) or, with `pins`, a release's."""
    root = root or repo_root()
    objects = components(overlay_objects(root), provider, pins)
    body = "---\n".join(
        yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000)
        for o in objects
    )
    return header(provider, body, release) + "---\n" + body


_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)(:?[=-])?")


def variables(text: str) -> dict[str, bool]:
    """Every `${NAME...}` in `text` (nested defaults included) → whether it has a default."""
    found: dict[str, bool] = {}
    for match in _VARIABLE.finditer(text):
        name, operator = match.group(1), match.group(2)
        found[name] = found.get(name, False) or operator is not None
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capfleet_e2e.clusterctl_components", description=__doc__)
    parser.add_argument("command", choices=["generate", "check"])
    parser.add_argument("directory", nargs="?", type=Path, default=None, help=f"default: <repo>/{OUTPUT_DIR}")
    args = parser.parse_args(argv)
    directory: Path = args.directory or repo_root() / OUTPUT_DIR
    stale = 0
    for provider in PROVIDERS:
        path, rendered = directory / provider.file, render(provider)
        if args.command == "generate":
            path.write_text(rendered)
            print(f"wrote {path}")
        elif not path.is_file() or path.read_text() != rendered:
            print(f"{path} is stale: run `make clusterctl-components`", file=sys.stderr)
            stale += 1
        else:
            print(f"{path} is up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
