"""The console as the tests run it: `python -m capfleet_console` on loopback as its own ServiceAccount
(the RBAC of deploy/overlays/console), users as ServiceAccounts with tokens, and a headless Chromium.

Chromium and its driver come from Debian (hack/setup.sh); Selenium is told where they are, so it never
looks for a driver to download.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.processes import Component, free_port, wait_for
from capfleet_e2e.serviceaccounts import apply_operator_rbac, service_account_kubeconfig

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


class ConsoleProcess:
    def __init__(self, cluster: Cluster, workdir: Path, env: dict[str, str]) -> None:
        self.cluster, self.workdir, self.env = cluster, workdir, env
        self.port = free_port()
        self.component: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConsoleProcess:
        apply_operator_rbac(self.cluster.kubectl, "console")
        kubeconfig = service_account_kubeconfig(self.cluster, "console", self.workdir / "console.kubeconfig")
        env = {
            "KUBECONFIG": str(kubeconfig),
            "CAPFLEET_CONSOLE_LISTEN": f"127.0.0.1:{self.port}",
            "CAPFLEET_CONSOLE_SECURE_COOKIES": "false",  # plain HTTP on loopback
            **self.env,
        }
        argv = [sys.executable, "-m", "capfleet_console"]
        log_dir = artifacts_dir() / "operators"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.component = Component(f"console-{self.port}", argv, log_dir, env=env)
        wait_for("the console's /healthz", self.healthy, 60, watch=[self.component])
        return self

    def healthy(self) -> bool | None:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return True if answer.status == 200 else None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()


def console_user(
    cluster: Cluster, namespace: str, name: str, *, bound: bool, hypervisors: bool = False
) -> str:
    """A ServiceAccount in `namespace` as a console user, and a fresh token of it: bound there to
    capfleet-console-user if `bound`, and cluster-wide to the hypervisor viewer if `hypervisors` (a
    ClusterRoleBinding named `<namespace>-<name>-hypervisors`, for the test to delete)."""
    cluster.kubectl("create", "serviceaccount", name, "-n", namespace)
    subject = f"--serviceaccount={namespace}:{name}"
    if bound:
        cluster.kubectl(
            "create",
            "rolebinding",
            f"{name}-console",
            "-n",
            namespace,
            "--clusterrole=capfleet-console-user",
            subject,
        )
    if hypervisors:
        cluster.kubectl(
            "create", "clusterrolebinding", f"{namespace}-{name}-hypervisors",
            "--clusterrole=capfleet-console-hypervisor-viewer", subject,
        )  # fmt: skip
    return cluster.kubectl("create", "token", name, "-n", namespace, "--duration=1h").strip()


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium driven through Debian's chromedriver; closed afterwards."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> Path:
    """Save what the browser shows as `<artifacts>/console/<name>.png` (kept as a CI artifact)."""
    folder = artifacts_dir() / "console"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
