"""The CLI installed as a tool, outside the workspace: the wheel `uv build` makes, installed with
`uv tool install` (as a person installs it), gives working `capfleet` and `kubectl-capfleet` commands.

The workspace's environment has every extra and every other member installed, so a module the CLI needs
but the wheel does not declare goes unnoticed there; this installs the wheel alone, with its declared
dependencies only (resolved from PyPI, or uv's cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SHARED = Path(__file__).resolve().parents[1]


def uv() -> str:
    """uv itself: `uv run` names it in UV; else the one on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv is not installed")
    return found


def run(*argv: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done


@pytest.fixture(scope="module")
def tool_bin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The bin directory of a fresh tool install, and the environment it was made in."""
    root = tmp_path_factory.mktemp("tool")
    env = {
        # Nothing of the workspace's environment leaks in: the tool gets its own.
        **{k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}},
        "UV_TOOL_DIR": str(root / "tools"),
        "UV_TOOL_BIN_DIR": str(root / "bin"),
        "NO_COLOR": "1",
    }
    run(uv(), "build", "--wheel", "--out-dir", root / "dist", SHARED, env=env)
    [wheel] = (root / "dist").glob("capfleet-*.whl")
    # The Python running the tests (3.11): its base interpreter, not the workspace's virtualenv.
    run(uv(), "tool", "install", "--python", sys.executable, wheel, env=env)
    return root / "bin", env


def test_capfleet_and_kubectl_capfleet_run(tool_bin: tuple[Path, dict[str, str]]) -> None:
    bin_dir, env = tool_bin
    top = run(bin_dir / "capfleet", "--help", env=env).stdout
    assert "describe" in top
    assert "get" in top
    get = run(bin_dir / "kubectl-capfleet", "get", "--help", env=env).stdout
    assert get.startswith("usage: kubectl capfleet get")
    for flag in ("--output", "--selector", "--context", "--kubeconfig", "--all-namespaces"):
        assert flag in get


def test_the_installed_cli_reaches_its_kubernetes_client(
    tmp_path: Path, tool_bin: tuple[Path, dict[str, str]]
) -> None:
    """Past --help: a `get` loads the Kubernetes client and reads the kubeconfig (none here: status 2)."""
    bin_dir, env = tool_bin
    env = {**env, "KUBECONFIG": str(tmp_path / "missing")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(
        [str(bin_dir / "capfleet"), "get", "vms"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "capfleet: cannot use the kubeconfig" in done.stderr
    assert "Traceback" not in done.stderr


def test_netbox_setup_without_the_netbox_extra_says_what_to_install(
    tool_bin: tuple[Path, dict[str, str]],
) -> None:
    bin_dir, env = tool_bin
    done = subprocess.run(
        [str(bin_dir / "capfleet"), "netbox-setup", "--url", "https://netbox.example.com"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "capfleet[netbox]" in done.stderr
