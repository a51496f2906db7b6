"""deploy/clusterctl/infrastructure-components.yaml: the all-in-one overlay, as clusterctl wants it.

`python -m capfleet_e2e.clusterctl_components generate|check [path]` (`make clusterctl-components`,
`make clusterctl-components-check`). The file is rendered with the real kustomize from
deploy/overlays/all-in-one and then made into clusterctl provider components:

- exactly one Namespace (capfleet-system; clusterctl moves everything into `--target-namespace`);
- the provider label `cluster.x-k8s.io/provider: infrastructure-capfleet` on every object;
- every operator's container is `manager` (clusterctl's image overrides look for that name);
- `${VAR:=default}` variables (see `VARIABLES`) for each operator's image and for logging, so
  `clusterctl init --infrastructure capfleet` works without any variable set.

The generated file is committed; `check` fails when it is stale, as `crdgen check` does for crds/.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from capfleet.runtime import VERSION
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.kustomize import build, documents

OUTPUT = Path("deploy") / "clusterctl" / "infrastructure-components.yaml"
OVERLAY = Path("deploy") / "overlays" / "all-in-one"
PROVIDER_LABEL = ("cluster.x-k8s.io/provider", "infrastructure-capfleet")
CONTAINER = "manager"
OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
DEFAULT_TAG = f"v{VERSION}"


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
        tag_variable(op): ("CAPFLEET_IMAGE_TAG's value", f"image tag of {op} alone (upgrade one operator)")
        for op in OPERATORS
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


def image(operator: str) -> str:
    tag = f"${{{tag_variable(operator)}:=${{CAPFLEET_IMAGE_TAG:={DEFAULT_TAG}}}}}"
    return f"${{CAPFLEET_IMAGE_REGISTRY:={VARIABLES['CAPFLEET_IMAGE_REGISTRY'][0]}}}/{operator}:{tag}"


def _operator_of(deployment: dict[str, Any]) -> str:
    name: str = deployment["metadata"]["name"]
    for operator in OPERATORS:
        if name == f"capfleet-{operator}-manager":
            return operator
    raise ValueError(f"Deployment {name} belongs to no known operator")


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = [e for e in container.get("env") or [] if e["name"] != name]
    container["env"] = [*env, {"name": name, "value": Quoted(value)}]


def _container_args(container: dict[str, Any]) -> list[str]:
    args = [a for a in container.get("args") or [] if not a.startswith("--log-format")]
    return [f"--log-format=${{CAPFLEET_LOG_FORMAT:={VARIABLES['CAPFLEET_LOG_FORMAT'][0]}}}", *args]


def components(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The all-in-one overlay's objects turned into clusterctl provider components."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    if len(namespaces) != 1:
        raise ValueError(f"the all-in-one overlay must hold exactly one Namespace, not {len(namespaces)}")
    result = []
    for obj in objects:
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("labels", {})[PROVIDER_LABEL[0]] = PROVIDER_LABEL[1]
        if obj["kind"] == "Deployment":
            operator = _operator_of(obj)
            containers = obj["spec"]["template"]["spec"]["containers"]
            if containers[0]["name"] != CONTAINER:
                raise ValueError(f"{operator}: the first container must be {CONTAINER!r} (clusterctl's)")
            own = containers[0]["image"]
            for other in containers:  # baremetal-provision's boot front runs the operator's image too
                if other["image"] == own:
                    other["image"] = image(operator)
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


def header() -> str:
    lines = [
        "# capfleet's clusterctl provider components (infrastructure-capfleet). GENERATED from",
        "# deploy/overlays/all-in-one by `make clusterctl-components`; do not edit by hand.",
        "# Variables (clusterctl substitutes them; each has a default):",
    ]
    width = max(len(name) for name in VARIABLES)
    lines += [
        f"#   {name:<{width}}  {meaning} (default {default})"
        for name, (default, meaning) in VARIABLES.items()
    ]
    return "\n".join(lines) + "\n"


def render(root: Path | None = None) -> str:
    root = root or repo_root()
    objects = components(documents(build(root / OVERLAY)))
    body = "---\n".join(
        yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000)
        for o in objects
    )
    return header() + "---\n" + body


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
    parser.add_argument("path", nargs="?", type=Path, default=None, help=f"default: <repo>/{OUTPUT}")
    args = parser.parse_args(argv)
    path: Path = args.path or repo_root() / OUTPUT
    rendered = render()
    if args.command == "generate":
        path.write_text(rendered)
        print(f"wrote {path}")
        return 0
    if not path.is_file() or path.read_text() != rendered:
        print(f"{path} is stale: run `make clusterctl-components`", file=sys.stderr)
        return 1
    print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
