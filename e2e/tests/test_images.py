"""The five operator Dockerfiles: one structure, only the operator's own package, non-root, labelled.

No container engine runs here, so the Dockerfiles are checked as text: each installs exactly its own
workspace member (`uv sync --frozen --no-dev --package <its project> --no-editable`), runs as a non-root
user, starts `python -m <its package>` (which must exist), carries the OCI labels title, description,
version, revision and source (the last three from build ARGs), and only libvirt-vm installs libvirt.
Apart from names and libvirt, the five files are the same instruction for instruction.
`make images` must say plainly when no container engine exists, and fail.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass

import pytest

from capfleet_e2e.kubebin import repo_root

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
LIBVIRT = "libvirt-vm"
OCI = "org.opencontainers.image."


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def instructions(operator: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    text = (repo_root() / "operators" / operator / "Dockerfile").read_text()
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


def final_stage(found: list[Instruction]) -> list[Instruction]:
    starts = [i for i, instruction in enumerate(found) if instruction.keyword.upper() == "FROM"]
    assert len(starts) == 2, "a build stage and a runtime stage"
    return found[starts[-1] :]


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


@pytest.mark.parametrize("operator", OPERATORS)
def test_dockerfile_installs_only_its_package_and_runs_it_as_non_root(operator: str) -> None:
    found = instructions(operator)
    project = tomllib.loads((repo_root() / "operators" / operator / "pyproject.toml").read_text())
    name = project["project"]["name"]
    syncs = [i.arguments for i in found if i.keyword.upper() == "RUN" and "uv sync" in i.arguments]
    assert syncs == [f"uv sync --frozen --no-dev --package {name} --no-editable"]

    stage = final_stage(found)
    users = [i.arguments for i in stage if i.keyword.upper() == "USER"]
    assert len(users) == 1
    user, _, group = users[0].partition(":")
    assert user not in {"root", "0", ""}, "the image runs as non-root"
    assert user.isdigit(), "numeric, so the kubelet can check runAsNonRoot"
    assert int(user) > 0
    assert group not in {"root", "0"}

    (entrypoint,) = [i.arguments for i in stage if i.keyword.upper() == "ENTRYPOINT"]
    assert entrypoint == f'["python", "-m", "{package_of(operator)}"]'
    assert (repo_root() / "operators" / operator / "src" / package_of(operator) / "__main__.py").is_file()

    declared = {i.arguments.split("=")[0] for i in stage if i.keyword.upper() == "ARG"}
    found_labels = labels(stage)
    assert found_labels[f"{OCI}title"] == f"capfleet-{operator}"
    assert found_labels[f"{OCI}description"]
    for key, arg in (("version", "VERSION"), ("revision", "REVISION"), ("source", "SOURCE")):
        assert found_labels[f"{OCI}{key}"] == f"${{{arg}}}"
        assert arg in declared, f"ARG {arg} is declared in the runtime stage"


@pytest.mark.parametrize("operator", OPERATORS)
def test_only_libvirt_vm_installs_libvirt(operator: str) -> None:
    runs = " ".join(i.arguments for i in instructions(operator) if i.keyword.upper() == "RUN")
    assert ("libvirt" in runs) == (operator == LIBVIRT)
    if operator == LIBVIRT:
        runtime = " ".join(i.arguments for i in final_stage(instructions(operator)) if i.keyword == "RUN")
        assert re.search(r"\blibvirt0\b", runtime), "the client library, nothing more, in the runtime stage"
        assert "libvirt-daemon" not in runtime
        assert "libvirt-clients" not in runtime


def normalised(operator: str) -> list[tuple[str, str]]:
    """The instructions with the operator's names replaced and libvirt's package installs removed."""
    result = []
    for instruction in instructions(operator):
        if instruction.keyword.upper() == "RUN" and "apt-get" in instruction.arguments:
            continue
        arguments = instruction.arguments.replace(operator, "<operator>").replace(
            package_of(operator), "<pkg>"
        )
        if instruction.keyword.upper() == "LABEL":
            arguments = re.sub(r'(description=)"[^"]*"', r"\1...", arguments)
        result.append((instruction.keyword.upper(), arguments))
    return result


def test_the_five_dockerfiles_share_one_structure() -> None:
    reference = normalised(OPERATORS[0])
    for operator in OPERATORS[1:]:
        assert normalised(operator) == reference, operator


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
