"""`make bench-console`: how long the console's VM list takes to load with many VMs in a namespace.

On a fresh control plane: N LibvirtVMs (default 500) written as libvirt-vm leaves them (placed, running,
Ready), a VMQuota, and a console user bound to capfleet-console-user. The console runs in this process
as its own ServiceAccount, acting for the user by impersonation as it does in production; each load is
one `GET /vms?scope=all` (the list's first page: 100 VMs, one list call with `limit`) timed from request to
the last byte of the page, after one warm-up load.
Prints the median and range of the loads, for N and for N/10 side by side, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_console.acting import KubeconfigCredentials
from capfleet_console.app import build
from capfleet_console.settings import ConsoleSettings
from capfleet_e2e.console import console_user
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.serviceaccounts import apply_operator_rbac, service_account_kubeconfig

VMS = kinds.LIBVIRT_VM.resource


def vm(name: str, index: int) -> dict[str, object]:
    return {
        "apiVersion": VMS.api_version,
        "kind": "LibvirtVM",
        "metadata": {"name": name, "annotations": {"capfleet.dev/created-by": "bench"}},
        "spec": {
            "vcpus": 2,
            "memoryMiB": 2048,
            "hypervisorName": f"hv-{index % 8}",
            "disks": [{"name": "root", "sizeGiB": 20, "sourceImage": "capfleet-node"}],
            "interfaces": [{"userMode": True, "macAddress": "52:54:00:00:00:01"}],
            "cloudInit": {"userDataSecretRef": {"name": f"{name}-user-data"}},
        },
    }


READY = {
    "state": "running",
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ],
}


async def fill(kube: Kube, namespace: str, count: int) -> None:
    namespace_body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await kube.create(resources.NAMESPACES, namespace_body)
    quota = {
        "apiVersion": kinds.VM_QUOTA.resource.api_version,
        "kind": "VMQuota",
        "metadata": {"name": "team"},
    }
    await kube.create(
        kinds.VM_QUOTA.resource, {**quota, "spec": {"hard": {"vcpus": 2000, "vms": 1000}}}, namespace
    )
    semaphore = asyncio.Semaphore(20)

    async def one(index: int) -> None:
        async with semaphore:
            name = f"vm-{index:04d}"
            await kube.create(VMS, vm(name, index), namespace)
            await kube.patch_status(VMS, name, READY, namespace)

    await asyncio.gather(*(one(i) for i in range(count)))


async def loads(client: TestClient, namespace: str, times: int) -> list[float]:  # type: ignore[type-arg]
    took = []
    for attempt in range(times + 1):
        started = time.perf_counter()
        answer = await client.get(f"/vms?namespace={namespace}&scope=all")
        body = await answer.text()
        assert answer.status == 200, body[:500]
        if attempt:  # the first load warms connections and templates
            took.append(time.perf_counter() - started)
    return took


async def measure(
    cp: ControlPlane, counts: Sequence[int], times: int, workdir: Path
) -> dict[int, list[float]]:
    apply_operator_rbac(cp.kubectl, "console")
    kubeconfig = service_account_kubeconfig(cp, "console", workdir / "console.kubeconfig")
    results = {}
    async with Kube.connect("capfleet-bench", str(cp.kubeconfig)) as admin:
        for count in counts:
            namespace = f"bench-{count}"
            await fill(admin, namespace, count)
            token = console_user(cp, namespace, "user", bound=True)
            settings = ConsoleSettings(interface="user", namespace=namespace, secure_cookies=False)
            credentials = await KubeconfigCredentials.load(str(kubeconfig), in_cluster=False)
            async with Kube.connect("capfleet-console", str(kubeconfig)) as reviewer:
                client = TestClient(TestServer(build(settings, reviewer, credentials)))
                await client.start_server()
                try:
                    signed = await client.post("/signin", data={"token": token}, allow_redirects=False)
                    assert signed.status == 303
                    results[count] = await loads(client, namespace, times)
                finally:
                    await client.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    counts = [max(1, args.vms // 10), args.vms]
    with tempfile.TemporaryDirectory(prefix="capfleet-bench-console-") as scratch, ControlPlane() as cp:
        results = asyncio.run(measure(cp, counts, args.loads, Path(scratch)))
    what = "console in-process, TLS to the API server"
    print(f"VM list page load, {args.loads} loads each after one warm-up ({what}):")
    print(f"{'VMs':>6}  {'median ms':>10}  {'min ms':>8}  {'max ms':>8}")
    for count, took in results.items():
        ms = [t * 1000 for t in took]
        print(f"{count:>6}  {statistics.median(ms):>10.1f}  {min(ms):>8.1f}  {max(ms):>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
