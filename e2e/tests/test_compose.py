"""docker-compose.yaml, checked without a container engine.

- it parses and validates against the Compose Specification's JSON schema (the copy check-jsonschema
  ships on PyPI as its `vendor.compose-spec` builtin schema);
- every build context, and the Dockerfile in it, exists;
- services wait for each other only with `condition: service_healthy` (and then the awaited service
  has a healthcheck, in the file or in its Dockerfile's HEALTHCHECK) or for a one-shot job with
  `service_completed_successfully`; every operator service has a healthcheck of its own;
- every environment variable an operator reads (string constants `CAPFLEET_*` and `KUBECONFIG` in
  shared/src and in operators/<operator>/src, found with `ast`, so a new variable fails this test) is
  set for that operator's service.
"""

from __future__ import annotations

import ast
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from capfleet_e2e.kubebin import repo_root

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
ENV_NAME = re.compile(r"^(CAPFLEET_[A-Z0-9_]+|KUBECONFIG)$")


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((repo_root() / "docker-compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def compose_schema() -> dict[str, Any]:
    vendor = resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema: dict[str, Any] = json.loads(vendor.read_text())
    return schema


def test_compose_file_validates_against_the_compose_specification() -> None:
    schema = compose_schema()
    assert schema["title"] == "Compose Specification"
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(compose()), key=lambda e: list(e.path))
    assert [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors] == []


def test_the_schema_check_can_fail() -> None:
    schema = compose_schema()
    broken = compose()
    broken["services"]["k3s"]["depends_on"] = {"netbox": {"condition": "when-it-feels-like-it"}}
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(broken))


def build_of(service: dict[str, Any]) -> tuple[Path, Path] | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        build = {"context": build}
    context = (repo_root() / build.get("context", ".")).resolve()
    return context, context / build.get("dockerfile", "Dockerfile")


def test_every_build_context_and_dockerfile_exists() -> None:
    built = {name: build_of(service) for name, service in services().items() if "build" in service}
    assert set(OPERATORS) <= set(built), "the five operators are built from the operator Dockerfile"
    for name, paths in built.items():
        assert paths is not None
        context, dockerfile = paths
        assert context.is_dir(), f"{name}: no build context {context}"
        assert dockerfile.is_file(), f"{name}: no Dockerfile {dockerfile}"
        assert context in dockerfile.parents, f"{name}: the Dockerfile is outside its context"
    for operator in OPERATORS:
        paths = built[operator]
        assert paths is not None
        assert paths == (repo_root(), repo_root() / "operators" / "Dockerfile")
        assert services()[operator]["build"]["args"] == {"OPERATOR": operator}


def has_healthcheck(service: dict[str, Any]) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable", False) and check.get("test") not in (None, ["NONE"])
    paths = build_of(service)
    return paths is not None and "\nHEALTHCHECK " in "\n" + paths[1].read_text()


def test_every_awaited_service_has_a_healthcheck() -> None:
    all_services = services()
    awaited = set()
    for name, service in all_services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions, not a plain list"
        for other, how in depends.items():
            assert other in all_services, f"{name} depends on unknown service {other}"
            condition = how.get("condition")
            # Only two ways to wait: for a healthy service, or for a one-shot job to finish.
            assert condition in {"service_healthy", "service_completed_successfully"}, f"{name} → {other}"
            if condition == "service_healthy":
                awaited.add(other)
            else:
                assert all_services[other].get("restart") == "no", f"{other} is a one-shot job"
    assert awaited, "services wait for others to be healthy"
    assert sorted(s for s in awaited if not has_healthcheck(all_services[s])) == []
    assert sorted(op for op in OPERATORS if not has_healthcheck(all_services[op])) == []


def variables_read(*roots: Path) -> set[str]:
    """String constants naming an environment variable in the Python sources under `roots`."""
    found = set()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and ENV_NAME.match(node.value)
                ):
                    found.add(node.value)
    return found


def image_environment() -> set[str]:
    """The variables operators/Dockerfile's ENV lines set in every image (compose builds from it)."""
    names = set()
    for line in (repo_root() / "operators" / "Dockerfile").read_text().splitlines():
        if line.startswith("ENV "):
            names |= {word.split("=", 1)[0] for word in line[4:].split() if "=" in word}
    return names


def test_shared_runtime_variables_are_found() -> None:
    shared = variables_read(repo_root() / "shared" / "src")
    assert {"KUBECONFIG", "CAPFLEET_LOG_FORMAT", "CAPFLEET_VERBOSE"} <= shared


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_variable_the_operator_reads_is_set(operator: str) -> None:
    needed = variables_read(repo_root() / "shared" / "src", repo_root() / "operators" / operator / "src")
    environment = services()[operator].get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.partition("=")[::2] for item in environment)
    assert "CAPFLEET_VERSION" in image_environment()
    assert sorted(needed - set(environment) - image_environment()) == []
    kubeconfig = environment["KUBECONFIG"]
    mounts = [str(v).split(":")[1] for v in services()[operator].get("volumes") or [] if ":" in str(v)]
    assert any(kubeconfig.startswith(f"{m.rstrip('/')}/") for m in mounts), "the kubeconfig is mounted"
