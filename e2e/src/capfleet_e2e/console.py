"""The console as the tests and `make demo` run it: `python -m capfleet_console` on loopback as its own
ServiceAccount (the RBAC of deploy/overlays/console), users as ServiceAccounts with tokens, and a headless
Chromium on its pages.

Chromium and its driver come from Debian (hack/setup.sh); Selenium is told where they are, so it never
looks for a driver to download.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from capfleet.api import kinds
from capfleet.kube import Kube
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


OLD_PAGE = "capfleetOldPage"


def answered(driver: Any) -> bool:
    """Whether a new document, fully loaded, has replaced the one marked with OLD_PAGE."""
    script = f"return window.{OLD_PAGE} === undefined && document.readyState === 'complete'"
    return bool(driver.execute_script(script))


class Page:
    """The browser on the console, with the few steps the tests take; blocking calls run in a thread."""

    def __init__(self, driver: Any, url: str, namespace: str) -> None:
        self.driver, self.url, self.namespace = driver, url, namespace
        self.seen: list[str] = []  # every page's HTML, to check that no secret was ever shown

    async def call(self, action: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(action, *args)

    async def open(self, path: str) -> None:
        await self.call(self.driver.get, self.url + path)
        self.seen.append(await self.call(lambda: self.driver.page_source))

    async def submit(self, fill: Callable[[], Any]) -> None:
        """Run `fill` (which clicks a submit button) and wait until the answer has replaced the page:
        a click may return before the browser has even sent the form.

        The old page is marked in its `window`, which a new document does not inherit. Waiting for the
        old `<html>` element to go stale instead raced with Chromium: asked about a node while it was
        being detached, chromedriver answers with an unknown error ("Node with given id does not belong
        to the document") rather than a stale element, and the test failed on a page that had loaded."""

        def fill_and_wait() -> None:
            self.driver.execute_script(f"window.{OLD_PAGE} = true")
            fill()
            WebDriverWait(self.driver, 60, ignored_exceptions=(WebDriverException,)).until(answered)

        await self.call(fill_and_wait)
        self.seen.append(await self.call(lambda: self.driver.page_source))

    async def sign_in(self, token: str) -> None:
        await self.open("/signin")

        def fill() -> None:
            self.driver.find_element(By.ID, "token").send_keys(token)
            self.driver.find_element(By.ID, "signin").click()

        await self.submit(fill)

    async def sign_out(self) -> None:
        await self.submit(lambda: self.driver.find_element(By.CSS_SELECTOR, ".signout button").click())

    def text(self, selector: str) -> str:
        try:
            return str(self.driver.find_element(By.CSS_SELECTOR, selector).text)
        except NoSuchElementException:
            return ""


def finished_steps(tree: str, machine: dict[str, Any]) -> list[str]:
    """The True step conditions of a HybridMachine that the cluster page's tree does not show with how
    long the step took (`<Step> 12s` or `<Step> 3m04s`): empty when every finished step is there."""
    steps = [
        c["type"]
        for c in (machine.get("status") or {}).get("conditions") or []
        if c["status"] == "True" and c["type"] not in {"Ready", "Paused"}
    ]
    assert steps, f"{machine['metadata']['name']} has finished steps"
    return [step for step in steps if not re.search(rf"\b{step} \d+(m\d\d)?s\b", tree)]


DEMO_QUOTA = {"vcpus": 16, "memoryMiB": 64 * 1024, "storageGiB": 300, "vms": 20}


@contextlib.asynccontextmanager
async def demo_console(
    cluster: Cluster, kube: Kube, namespace: str, workdir: Path, env: dict[str, str]
) -> AsyncIterator[DemoConsole]:
    """The console as `make demo` offers it: running on loopback, a VMQuota in `namespace` (so its bar
    has limits to show), and a user `demo-user` there (capfleet-console-user in the namespace, the
    hypervisor viewer cluster-wide) whose token is written to a file only its owner can read."""
    quota = {
        "apiVersion": kinds.VM_QUOTA.resource.api_version,
        "kind": kinds.VM_QUOTA.kind,
        "metadata": {"name": "demo"},
        "spec": {"hard": DEMO_QUOTA},
    }
    await kube.create_or_get(kinds.VM_QUOTA.resource, quota, namespace)
    console = ConsoleProcess(cluster, workdir, {"CAPFLEET_CONSOLE_NAMESPACE": namespace, **env}).start()
    try:
        token = console_user(cluster, namespace, "demo-user", bound=True, hypervisors=True)
        token_file = workdir / "console-token"
        token_file.touch(mode=0o600)
        token_file.write_text(token + "\n")
        yield DemoConsole(console.url, token_file, namespace)
    finally:
        console.stop()
        cluster.kubectl(
            "delete", "clusterrolebinding", f"{namespace}-demo-user-hypervisors", "--ignore-not-found"
        )


@dataclass(frozen=True)
class DemoConsole:
    url: str
    token_file: Path
    namespace: str

    async def screenshots(self, cluster_name: str) -> list[Path]:
        """The VMs page and the cluster's page as the demo user sees them, saved to the artifacts."""
        saved = []
        with browser() as driver:
            page = Page(driver, self.url, self.namespace)
            await page.sign_in(self.token_file.read_text().strip())
            for name, path in (
                ("demo-vms", f"/vms?namespace={self.namespace}&scope=all"),
                ("demo-cluster", f"/clusters/{self.namespace}/{cluster_name}"),
            ):
                await page.open(path)
                saved.append(await asyncio.to_thread(screenshot, driver, name))
        return saved
