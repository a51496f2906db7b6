"""The console in a real headless browser (Chromium, Selenium) against the real API server, the real
libvirt-vm operator (its own RBAC) and real hypervisors: a user signs in with a ServiceAccount token,
creates a VM through the form and sees it Running and counted in the quota bar, hits the quota and reads
the `QuotaExceeded` numbers, stops and deletes a VM and sees the waiting one placed; a second user with
no RBAC in the namespace sees nothing and cannot create; a cluster page shows every step with its time.
Screenshots of each page go to the artifacts (`console/`). No page ever shows a token or user-data.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from libvirt_vm_helpers import OPERATOR_ENV, create_hypervisor, delete_all, leftovers  # type: ignore[import-not-found]
from selenium.webdriver.common.by import By

from capfleet import resources
from capfleet.api import kinds, samples
from capfleet.kube import Kube
from capfleet_e2e.console import ConsoleProcess, browser, console_user, screenshot
from capfleet_e2e.console import Page as ConsolePage
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.libvirt.hypervisor import Hypervisor
from capfleet_e2e.libvirt.image import TestImage
from capfleet_e2e.serviceaccounts import RunOperatorAs
from capfleet_e2e.site import BASE_IMAGE, ensure_base_image, remove_base_image
from capfleet_e2e.standins import paused_cluster
from capfleet_e2e.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
QUOTAS, VMS = kinds.VM_QUOTA.resource, kinds.LIBVIRT_VM.resource
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ3wzYd0GnDnEc6Y6VxVtM1iYgV4bB3f0tTxVN1Z7u9 alice@laptop"
CREATE_FORM = re.compile(r'<form [^>]*id="create".*?</form>', re.DOTALL)
STATE_COLUMN = 6  # NAMESPACE NAME VCPUS MEMORY DISK STATE …


class Page(ConsolePage):
    """The browser on the console's VMs page, with the steps these tests take there."""

    async def create_vm(self, name: str) -> None:
        await self.open(f"/vms?namespace={self.namespace}")

        def fill() -> None:
            form = self.driver.find_element(By.ID, "create")
            form.find_element(By.NAME, "name").send_keys(name)
            for field, value in (("vcpus", "1"), ("memory_gib", "1"), ("disk_gib", "1")):
                box = form.find_element(By.NAME, field)
                box.clear()
                box.send_keys(value)
            form.find_element(By.NAME, "ssh_key").send_keys(KEY)
            form.find_element(By.ID, "create-vm").click()

        await self.submit(fill)

    async def vm_state(self, name: str) -> str | None:
        """The STATE cell of VM `name` on a fresh VMs page (all VMs), or None when it is not listed."""
        await self.open(f"/vms?namespace={self.namespace}&scope=all")
        cell = self.text(f"tr[data-name='{name}'] td:nth-child({STATE_COLUMN})")
        return cell or None

    async def press(self, name: str, action: str) -> None:
        await self.open(f"/vms?namespace={self.namespace}&scope=all")
        await self.submit(
            lambda: self.driver.find_element(
                By.CSS_SELECTOR, f"tr[data-name='{name}'] button.{action}"
            ).click()
        )


async def state_is(page: Page, name: str, wanted: str) -> bool:
    return await page.vm_state(name) == wanted


async def test_a_user_creates_a_vm_hits_the_quota_and_another_user_sees_nothing(
    kube: Kube,
    namespace: str,
    control_plane: Cluster,
    run_operator_as: RunOperatorAs,
    hypervisors: list[Hypervisor],
    test_image: TestImage,
    tmp_path: Path,
) -> None:
    for hv in hypervisors:
        ensure_base_image(hv, test_image)
    run_operator_as("libvirt_vm", "libvirt-vm", secrets_in=[namespace], env=OPERATOR_ENV)
    hv_names = [await create_hypervisor(kube, namespace, hv) for hv in hypervisors]
    quota = {
        "apiVersion": QUOTAS.api_version,
        "kind": "VMQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"vms": 1, "vcpus": 4}},
    }
    await kube.create(QUOTAS, quota, namespace)
    alice = console_user(control_plane, namespace, "alice", bound=True, hypervisors=True)
    bob = console_user(control_plane, namespace, "bob", bound=False)
    settings = {
        "CAPFLEET_CONSOLE_IMAGES": BASE_IMAGE,
        "CAPFLEET_CONSOLE_INTERFACE": "user",
        "CAPFLEET_CONSOLE_NAMESPACE": namespace,
    }
    console = ConsoleProcess(control_plane, tmp_path, settings).start()
    try:
        with browser() as driver:
            page = Page(driver, console.url, namespace)
            await page.sign_in(alice)
            assert page.text("#user") == f"system:serviceaccount:{namespace}:alice"

            await page.create_vm("web-1")
            await eventually("web-1 running", lambda: state_is(page, "web-1", "running"), 180, 2)

            async def counted() -> bool:
                await page.open(f"/vms?namespace={namespace}")
                return "VMs 1 / 1" in page.text("#quota")

            await eventually("the quota bar to count web-1", counted, 60, 2)
            assert "CPUs 1 / 4" in page.text("#quota")
            screenshot(driver, "vms")

            await page.create_vm("web-2")
            await eventually("web-2 over quota", lambda: state_is(page, "web-2", "QuotaExceeded"), 60, 2)
            waiting = page.text("tr.message td.waiting")
            assert waiting == "Scheduled: VMQuota team: VMs 1 used + 1 asked > 1 allowed", waiting
            screenshot(driver, "vms-quota-exceeded")

            await page.press("web-1", "stop")
            await eventually("web-1 stopped", lambda: state_is(page, "web-1", "shutoff"), 120, 2)
            await page.press("web-1", "delete")
            await eventually("web-1 gone", lambda: vm_gone(page, "web-1"), 120, 2)
            await eventually("web-2 placed and running", lambda: state_is(page, "web-2", "running"), 180, 2)
            await page.press("web-2", "delete")
            await eventually("web-2 gone", lambda: vm_gone(page, "web-2"), 120, 2)

            await page.open(f"/hypervisors?namespace={namespace}")
            assert all(name in page.text("table") for name in hv_names)
            screenshot(driver, "hypervisors")
            await show_a_cluster(kube, page, namespace)
            await page.sign_out()

            await page.sign_in(bob)
            await page.open(f"/vms?namespace={namespace}&scope=all")
            assert "Forbidden" in page.text("#refused")
            assert page.text("#no-vms") == "No VMs to show."
            await page.create_vm("sneaky")
            assert "Forbidden" in page.text("#form-problem")
            screenshot(driver, "vms-no-access")
            assert await kube.get(VMS, "sneaky", namespace) is None
            assert await kube.get(resources.SECRETS, "sneaky-user-data", namespace) is None

            for html in page.seen:
                assert alice not in html
                assert bob not in html
                # the key of a VM's user-data is never shown, except refilled into the form of the
                # user who just sent it (the answer to a refused create)
                assert "AAAAC3NzaC1lZDI1NTE5" not in CREATE_FORM.sub("", html)
    finally:
        console.stop()
        control_plane.kubectl(
            "delete", "clusterrolebinding", f"{namespace}-alice-hypervisors", "--ignore-not-found"
        )
        await delete_all(kube, namespace, hv_names)
        for hv in hypervisors:
            remove_base_image(hv)
    for hv in hypervisors:
        assert leftovers(hv, namespace) == ([], [])


async def vm_gone(page: Page, name: str) -> bool:
    return await page.vm_state(name) is None


async def show_a_cluster(kube: Kube, page: Page, namespace: str) -> None:
    """A Cluster with a HybridMachine whose steps finished at known times: the page shows each step's time."""
    owner = await paused_cluster(kube, namespace, "c1")
    machine = {
        "apiVersion": kinds.HYBRID_MACHINE.resource.api_version,
        "kind": "HybridMachine",
        "metadata": {"name": "c1-cp-0", "ownerReferences": [owner]},
        "spec": next(s for s in samples.valid_samples() if s["kind"] == "HybridMachine")["spec"],
    }
    made = await kube.create(kinds.HYBRID_MACHINE.resource, machine, namespace)
    created = made["metadata"]["creationTimestamp"]
    steps = [("ClusterInfrastructureReady", 1), ("BootstrapDataReady", 31), ("VMProvisioned", 190)]
    conditions = [
        {"type": step, "status": "True", "reason": step, "lastTransitionTime": later(created, seconds)}
        for step, seconds in steps
    ]
    conditions.append(
        {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": later(created, 190)}
    )
    await kube.patch_status(kinds.HYBRID_MACHINE.resource, "c1-cp-0", {"conditions": conditions}, namespace)
    await page.open(f"/clusters?namespace={namespace}")
    await page.open(f"/clusters/{namespace}/c1")
    tree = page.text("#tree")
    assert "HybridMachine c1-cp-0" in tree
    assert "✓ ClusterInfrastructureReady 1s, BootstrapDataReady 30s, VMProvisioned 2m39s" in tree
    screenshot(page.driver, "cluster")


def later(timestamp: str, seconds: int) -> str:
    start = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (start + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
