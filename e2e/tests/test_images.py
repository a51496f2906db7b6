"""The operator image: one Dockerfile for all five, only the operator's own package, non-root, labelled.

No container engine runs here, so `operators/Dockerfile` is checked as text: it installs exactly the
workspace member its `OPERATOR` build argument names (`uv sync --frozen --no-dev --package
capfleet-${OPERATOR} --no-editable`; every operator's project is named so), runs as a non-root user,
starts `python -m <package>` (which must exist for each operator), carries the OCI labels title,
description, version, revision and source (the last three from build ARGs), and installs libvirt only for
libvirt-vm. `make images` and docker compose build every operator from it; `make images` must say plainly
when no container engine exists, and fail.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from capfleet_e2e.kubebin import repo_root

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
LIBVIRT = "libvirt-vm"
OCI = "org.opencontainers.image."


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def instructions() -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    text = (repo_root() / "operators" / "Dockerfile").read_text()
    logical, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            logical.append(current.strip())
            current = ""
    assert not current, "a continuation line ends the file"
    return [Instruction(*[*line.split(None, 1), ""][:2]) for line in logical]


def stages(found: list[Instruction]) -> tuple[list[Instruction], list[Instruction]]:
    starts = [i for i, instruction in enumerate(found) if instruction.keyword.upper() == "FROM"]
    assert len(starts) == 2, "a build stage and a runtime stage"
    return found[starts[0] : starts[1]], found[starts[1] :]


def package_of(operator: str) -> str:
    return operator.replace("-", "_")


def labels(stage: list[Instruction]) -> dict[str, str]:
    found: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword.upper() == "LABEL":
            for pair in shlex.split(instruction.arguments):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def run_shell(arguments: str, operator: str, stubs: Path) -> subprocess.CompletedProcess[str]:
    """Run a RUN instruction's shell text as the build would, with apt-get stubbed to print its call."""
    stubs.mkdir(exist_ok=True)
    stub = stubs / "apt-get"
    stub.write_text('#!/bin/sh\necho "apt-get $*"\n')
    stub.chmod(0o755)
    return subprocess.run(
        ["sh", "-ec", arguments],
        env={"OPERATOR": operator, "PATH": f"{stubs}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


@pytest.mark.parametrize("operator", OPERATORS)
def test_the_image_installs_only_the_operators_package(operator: str) -> None:
    project = tomllib.loads((repo_root() / "operators" / operator / "pyproject.toml").read_text())
    assert project["project"]["name"] == f"capfleet-{operator}"
    syncs = [i.arguments for i in instructions() if i.keyword.upper() == "RUN" and "uv sync" in i.arguments]
    assert syncs == ['uv sync --frozen --no-dev --package "capfleet-${OPERATOR}" --no-editable']
    assert (repo_root() / "operators" / operator / "src" / package_of(operator) / "__main__.py").is_file()


@pytest.mark.parametrize("operator", OPERATORS)
def test_the_entry_point_runs_the_operators_package(operator: str, tmp_path: Path) -> None:
    build, runtime = stages(instructions())
    (entrypoint,) = [i.arguments for i in runtime if i.keyword.upper() == "ENTRYPOINT"]
    command = json.loads(entrypoint)[0]
    [writer] = [i.arguments for i in build if i.keyword.upper() == "RUN" and command in i.arguments]
    script = f"""
        mkdir -p {tmp_path}/bin
        {writer.replace("/app/.venv/bin", f"{tmp_path}/bin")}
    """
    subprocess.run(["sh", "-ec", script], env={"OPERATOR": operator, "PATH": "/usr/bin:/bin"}, check=True)
    written = (tmp_path / "bin" / command).read_text()
    assert written == f'#!/bin/sh\nexec python -m {package_of(operator)} "$@"\n'


def test_the_console_image_runs_the_console_package(tmp_path: Path) -> None:
    project = tomllib.loads((repo_root() / "console" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "capfleet-console"
    assert (repo_root() / "console" / "src" / "capfleet_console" / "__main__.py").is_file()
    build, runtime = stages(instructions())
    assert any(i.keyword.upper() == "COPY" and i.arguments == "console console" for i in build)
    (entrypoint,) = [i.arguments for i in runtime if i.keyword.upper() == "ENTRYPOINT"]
    command = json.loads(entrypoint)[0]
    [writer] = [i.arguments for i in build if i.keyword.upper() == "RUN" and command in i.arguments]
    script = f"mkdir -p {tmp_path}/bin\n{writer.replace('/app/.venv/bin', f'{tmp_path}/bin')}"
    subprocess.run(["sh", "-ec", script], env={"OPERATOR": "console", "PATH": "/usr/bin:/bin"}, check=True)
    assert (tmp_path / "bin" / command).read_text() == '#!/bin/sh\nexec python -m capfleet_console "$@"\n'


def test_the_image_runs_as_non_root_with_its_labels() -> None:
    _, runtime = stages(instructions())
    users = [i.arguments for i in runtime if i.keyword.upper() == "USER"]
    assert len(users) == 1
    user, _, group = users[0].partition(":")
    assert user not in {"root", "0", ""}, "the image runs as non-root"
    assert user.isdigit(), "numeric, so the kubelet can check runAsNonRoot"
    assert int(user) > 0
    assert group not in {"root", "0"}
    declared = {i.arguments.split("=")[0] for i in runtime if i.keyword.upper() == "ARG"}
    found_labels = labels(runtime)
    assert found_labels[f"{OCI}title"] == "capfleet-${OPERATOR}"
    assert found_labels[f"{OCI}description"]
    for key, arg in (("version", "VERSION"), ("revision", "REVISION"), ("source", "SOURCE")):
        assert found_labels[f"{OCI}{key}"] == f"${{{arg}}}"
        assert arg in declared, f"ARG {arg} is declared in the runtime stage"
    assert "OPERATOR" in declared


@pytest.mark.parametrize("operator", OPERATORS)
def test_only_libvirt_vm_installs_libvirt(operator: str, tmp_path: Path) -> None:
    build, runtime = stages(instructions())
    installs = [
        i.arguments for i in build + runtime if i.keyword.upper() == "RUN" and "apt-get" in i.arguments
    ]
    assert len(installs) == 2, "one package step per stage"
    build_out, runtime_out = (run_shell(step, operator, tmp_path) for step in installs)
    assert build_out.returncode == runtime_out.returncode == 0, build_out.stderr + runtime_out.stderr
    installed = build_out.stdout + runtime_out.stdout
    assert ("libvirt" in installed) == (operator == LIBVIRT)
    if operator == LIBVIRT:
        assert re.search(r"\blibvirt0\b", runtime_out.stdout), "the client library in the runtime stage"
        assert "libvirt-daemon" not in runtime_out.stdout
        assert "libvirt-clients" not in runtime_out.stdout


def test_an_unknown_operator_stops_the_build(tmp_path: Path) -> None:
    build, _ = stages(instructions())
    [step] = [i.arguments for i in build if i.keyword.upper() == "RUN" and "apt-get" in i.arguments]
    refused = run_shell(step, "nginx", tmp_path)
    assert refused.returncode != 0
    assert "OPERATOR must name one of the five operators" in refused.stderr


def test_make_images_and_compose_build_every_operator_from_it() -> None:
    makefile = (repo_root() / "Makefile").read_text()
    assert "-f operators/Dockerfile --build-arg OPERATOR=$$op" in makefile
    compose = yaml.safe_load((repo_root() / "docker-compose.yaml").read_text())
    for operator in OPERATORS:
        build = compose["services"][operator]["build"]
        assert build["dockerfile"] == "operators/Dockerfile"
        assert build["args"] == {"OPERATOR": operator}
    assert not list((repo_root() / "operators").glob("*/Dockerfile")), "no per-operator copies"


def test_make_images_without_a_container_engine_fails_plainly() -> None:
    result = subprocess.run(
        ["make", "--no-print-directory", "images", "CONTAINER_ENGINE="],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "no container engine found" in result.stderr
