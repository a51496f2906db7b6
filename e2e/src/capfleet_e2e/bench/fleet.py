"""`make bench-fleet N=…`: N bare-metal machines through the real Cluster API and capfleet's fleet, side by
side with Cluster API's floor for N Machines, on one control plane in one run.

Both sides start from a cluster whose one-replica control plane is up, then scale a MachineDeployment from
0 to N and time it until every worker Machine is provisioned (`status.initialization.
infrastructureProvisioned`), then delete the cluster and time it until every Machine is gone.

- The floor: CAPD's in-memory backend (capfleet_e2e.bench.floor), CAPI's own scale-test provider, every
  simulated startup zero.
- capfleet: the five operators unchanged, each a process of its own under its own ServiceAccount and
  RBAC; real NetBox holding N+1 servers; sushy-tools' fake driver as their BMCs and the fake ramdisk
  (capfleet_e2e.baremetal.fakeramdisk) playing iPXE and the deploy ramdisk for each; the cluster from
  deploy/clusterctl/cluster-template-baremetal.yaml; a stand-in workload API server at the endpoint, where
  `kubeadm init` would have written its config (capfleet_e2e.workload).

Per operator it reads, from the API server's audit log, its requests and writes per machine, and from
/proc its CPU seconds and peak RSS; then, with everything provisioned, the writes of a quiet minute (idle
writes, which must be 0) and the resident memory after it; and the same figures while the Cluster is
deleted. Beside them, the requests the fleet sent NetBox, and the CPU seconds of every process of the lab
by what it is (API server, etcd, Cluster API's managers, NetBox, PostgreSQL, the BMC emulator, each
operator, the bench itself): on a small machine they share the cores, and this says who spent them. The
VM half of a hybrid fleet is not in this bench yet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from capfleet import resources
from capfleet.kube import Kube
from capfleet_e2e.baremetal.fakeramdisk import FakeRamdisk, boot_env, fake_systems
from capfleet_e2e.baremetal.redfish import RedfishEmulator
from capfleet_e2e.bench.fleetfigures import (
    OperatorFigures,
    SideResult,
    format_results,
    is_write,
    provisioned_workers,
    writes_of,
)
from capfleet_e2e.bench.floor import Capd, floor_cluster
from capfleet_e2e.bench.measure import ProcSample, cpu_since, read_cpu_by_label, read_proc, requests_of
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import artifacts_dir, repo_root
from capfleet_e2e.netbox.fixtures import RealNetboxes, instance_behind
from capfleet_e2e.netbox.proxy import NetboxProxy
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.processes import free_port
from capfleet_e2e.serviceaccounts import apply_operator_rbac, service_account_kubeconfig, service_account_user
from capfleet_e2e.site import BMC_FIELD, ensure_custom_fields, render, secret
from capfleet_e2e.waiting import eventually
from capfleet_e2e.workload import WorkloadAPIServer

Obj = dict[str, Any]
OPERATORS = {
    "capi_machine_glue": "capi-machine-glue",
    "ipam_address": "ipam-address",
    "netbox_device": "netbox-device",
    "baremetal_provision": "baremetal-provision",
    "libvirt_vm": "libvirt-vm",
}
TEMPLATE = Path("deploy") / "clusterctl" / "cluster-template-baremetal.yaml"
CLUSTER = "fleet"
IDLE_SECONDS = 60.0
# How often the bench lists the Machines: its own reads load the same API server as both sides.
POLL_SECONDS = 1.0
SETTLE_SECONDS = 15.0
KUBERNETES_VERSION = "v1.33.0"


# --- driving the cluster -------------------------------------------------------------------------------


async def machines_of(kube: Kube, namespace: str) -> list[Obj]:
    return await kube.list(resources.CAPI_MACHINES, namespace)


async def scale_and_time(kube: Kube, namespace: str, deployment: str, n: int, within: float) -> float:
    """Scale MachineDeployment `deployment` to `n`; seconds until all `n` workers are provisioned."""
    started = time.monotonic()
    await kube.patch(resources.MACHINE_DEPLOYMENTS, deployment, {"spec": {"replicas": n}}, namespace)

    async def done() -> bool:
        return provisioned_workers(await machines_of(kube, namespace)) >= n

    await eventually(f"{n} provisioned worker Machines", done, within, POLL_SECONDS)
    return time.monotonic() - started


async def delete_and_time(kube: Kube, namespace: str, cluster: str, within: float) -> float:
    started = time.monotonic()
    await kube.delete(resources.CAPI_CLUSTERS, cluster, namespace)

    async def gone() -> bool:
        return (
            not await machines_of(kube, namespace)
            and await kube.get(resources.CAPI_CLUSTERS, cluster, namespace) is None
        )

    await eventually("every Machine and the Cluster to be gone", gone, within, POLL_SECONDS)
    return time.monotonic() - started


async def settled(cp: ControlPlane, users: Sequence[str], offset: int, within: float) -> int:
    """Wait until `users` have written nothing for SETTLE_SECONDS (a provisioned server still boots from its
    disk for a while); returns the audit log's offset from there."""
    deadline = time.monotonic() + within
    while True:
        await asyncio.sleep(SETTLE_SECONDS)
        events, after = cp.audit_events(offset)
        if not any(writes_of(events, user) for user in users):
            return after
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the operators were still writing {within:.0f} s after all were provisioned")
        offset = after


def apply(cp: ControlPlane, objects: Sequence[Obj] | str, namespace: str) -> None:
    text = (
        objects
        if isinstance(objects, str)
        else json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    )
    cp.kubectl("apply", "-n", namespace, "-f", "-", stdin=text)


async def run_floor(cp: ControlPlane, kube: Kube, n: int, within: float) -> SideResult:
    namespace = "bench-floor"
    cp.kubectl("create", "namespace", namespace)
    with Capd(cp):
        apply(cp, floor_cluster(namespace, CLUSTER, 0), namespace)

        async def control_plane_running() -> bool:
            found = await machines_of(kube, namespace)
            return len(found) == 1 and (found[0].get("status") or {}).get("phase") == "Running"

        await eventually(
            "the floor's control-plane Machine to be Running", control_plane_running, within, POLL_SECONDS
        )
        provisioned = await scale_and_time(kube, namespace, f"{CLUSTER}-workers", n, within)
        deleted = await delete_and_time(kube, namespace, CLUSTER, within)
    return SideResult("floor", n, provisioned, deleted)


def seed_servers(netbox: Any, systems: Sequence[Obj], bmc_address: str) -> None:
    """The fake servers in NetBox: the first as the control plane's role, the rest as workers."""
    ensure_custom_fields(netbox)
    roles = ["k8s-control-plane", "k8s-worker"]
    netbox.seed(
        {
            "sites": [{"name": "bench", "slug": "bench"}],
            "manufacturers": [{"name": "fake", "slug": "fake"}],
            "device_roles": [{"name": role, "slug": role} for role in roles],
            "device_types": [{"manufacturer": "fake", "model": "server", "slug": "server"}],
            "devices": [
                {
                    "name": system["name"],
                    "serial": system["uuid"],
                    "site": "bench",
                    "role": roles[0] if index == 0 else roles[1],
                    "device_type": "server",
                    "status": "inventory",
                    "custom_fields": {BMC_FIELD: bmc_address},
                    "interfaces": [{"name": "eno1", "mac_address": system["nics"][0]["mac"]}],
                }
                for index, system in enumerate(systems)
            ],
        }
    )


def fleet_variables(workload: WorkloadAPIServer) -> dict[str, str]:
    """cluster-template-baremetal.yaml's variables: one control-plane server, no worker yet."""
    return {
        "CLUSTER_NAME": CLUSTER,
        "NAMESPACE": "bench-fleet",
        "KUBERNETES_VERSION": KUBERNETES_VERSION,
        "CONTROL_PLANE_MACHINE_COUNT": "1",
        "WORKER_MACHINE_COUNT": "0",
        "CONTROL_PLANE_ENDPOINT_HOST": workload.host,
        "CONTROL_PLANE_ENDPOINT_PORT": str(workload.port),
        "CAPFLEET_NODE_IP_RANGE": "10.96.0.1-10.96.15.254",
        "CAPFLEET_NODE_IP_PREFIX": "20",
        "CAPFLEET_NODE_GATEWAY": "10.96.0.254",
        "CAPFLEET_NAMESERVER": "10.96.0.254",
        "CAPFLEET_IMAGE_URL": "http://images.invalid/node.raw",
        # Never downloaded (the fake ramdisk writes no disk); a SHA-256 of something, as the API requires.
        "CAPFLEET_IMAGE_CHECKSUM": hashlib.sha256(b"capfleet scale lab").hexdigest(),
        "CAPFLEET_BMC_SYSTEM_PATH": "/redfish/v1/Systems/{name}",
        "CAPFLEET_BMC_NETWORK": "127.0.0.0/8",
        "CAPFLEET_NETBOX_SECRET": "netbox",
        "CAPFLEET_BMC_CREDENTIALS_SECRET": "bmc",
    }


@contextlib.asynccontextmanager
async def operators_running(
    cp: ControlPlane, namespace: str, env: Mapping[str, Mapping[str, str]], workdir: Path
) -> AsyncIterator[dict[str, OperatorProcess]]:
    log_dir = artifacts_dir() / "bench-fleet"
    log_dir.mkdir(parents=True, exist_ok=True)
    started: dict[str, OperatorProcess] = {}
    try:
        for module, operator in OPERATORS.items():
            apply_operator_rbac(cp.kubectl, operator)
            kubeconfig = service_account_kubeconfig(cp, operator, workdir / f"{operator}.kubeconfig")
            # As deployed: without --verbose, whose debug lines (every BMC request) cost CPU at scale.
            process = OperatorProcess(
                module,
                str(kubeconfig),
                log_dir,
                namespaces=[namespace],
                env=dict(env.get(module, {})),
                verbose=False,
            )
            started[operator] = process.start()
        yield started
    finally:
        for process in started.values():
            process.stop()


async def control_plane_provisioned(kube: Kube, namespace: str) -> bool:
    found = await machines_of(kube, namespace)
    initialization = ((found[0].get("status") or {}).get("initialization") or {}) if len(found) == 1 else {}
    return bool(initialization.get("infrastructureProvisioned"))


def operator_figures(
    events: Sequence[Obj], before: Mapping[str, ProcSample], after: Mapping[str, ProcSample]
) -> dict[str, OperatorFigures]:
    """Each operator's requests and writes among audit `events`, and its CPU and peak RSS from /proc."""
    figures = {}
    for op in after:
        requests = requests_of(events, service_account_user(op))
        writes = {target: count for target, count in requests.by_target.items() if is_write(target)}
        figures[op] = OperatorFigures(
            requests.total,
            sum(writes.values()),
            after[op].cpu_seconds - before[op].cpu_seconds,
            after[op].peak_rss_bytes / 2**20,
            writes,
        )
    return figures


def samples(processes: Mapping[str, OperatorProcess]) -> dict[str, ProcSample]:
    return {op: read_proc(p.component.pid) for op, p in processes.items() if p.component}


async def run_fleet(cp: ControlPlane, kube: Kube, n: int, within: float, workdir: Path) -> SideResult:
    namespace = "bench-fleet"
    cp.kubectl("create", "namespace", namespace)
    systems = fake_systems(n + 1, "srv")
    boot_port = free_port()
    netbox_logs = artifacts_dir() / "netbox"
    netbox_logs.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        netboxes = RealNetboxes(netbox_logs)
        stack.callback(netboxes.stop)
        real = netboxes.get(DEFAULT_RELEASE)
        netbox = instance_behind(stack.enter_context(NetboxProxy(real.url, static=real.static)), real)
        fake = await stack.enter_async_context(FakeRamdisk(f"http://127.0.0.1:{boot_port}"))
        bmc = stack.enter_context(RedfishEmulator(fake_systems=systems, notify_url=fake.url))
        workload = stack.enter_context(WorkloadAPIServer(cp, CLUSTER))
        seed_servers(netbox, systems, f"127.0.0.1:{bmc.port}")
        credentials = {
            "username": bmc.username,
            "password": bmc.password,
            "caBundle": bmc.ca_cert.read_text(),
        }
        for body in (
            secret("netbox", {"url": netbox.url, "token": netbox.token}),
            secret("bmc", credentials),
            workload.ca_secret(namespace),
        ):
            await kube.create(resources.SECRETS, body, namespace)
        env = {"baremetal_provision": boot_env(boot_port, workdir / "ramdisk")}
        processes = await stack.enter_async_context(operators_running(cp, namespace, env, workdir))
        apply(cp, render((repo_root() / TEMPLATE).read_text(), fleet_variables(workload)), namespace)
        try:
            await eventually(
                "the control-plane Machine to be provisioned",
                lambda: control_plane_provisioned(kube, namespace),
                within,
                POLL_SECONDS,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake ramdisk played: {fake.played}") from exc
        workload.upload_kubeadm_config()  # what `kubeadm init` would have done on it

        _, offset = cp.audit_events()
        before = samples(processes)
        netbox_before, cpu_before = netbox.faults.count(), read_cpu_by_label(os.getpid())
        try:
            provisioned = await scale_and_time(kube, namespace, f"{CLUSTER}-md-0", n, within)
        except AssertionError as exc:
            failed = {name: p.failure for name, p in fake.played.items() if p.failure}
            unfinished = {name: p.steps for name, p in fake.played.items() if not p.results}
            raise AssertionError(
                f"{exc}; the fake ramdisk failed for {failed}; servers it never finished: {unfinished}"
            ) from exc
        events, offset = cp.audit_events(offset)
        figures = operator_figures(events, before, samples(processes))
        netbox_requests = netbox.faults.count() - netbox_before
        cpu = cpu_since(read_cpu_by_label(os.getpid()), cpu_before)

        users = [service_account_user(op) for op in processes]
        offset = await settled(cp, users, offset, within)
        await asyncio.sleep(IDLE_SECONDS)
        idle_events, offset = cp.audit_events(offset)
        idle = sum(writes_of(idle_events, user) for user in users)
        before = samples(processes)
        for op, sample in before.items():
            figures[op].idle_rss_mib = sample.rss_bytes / 2**20
        netbox_before, cpu_before = netbox.faults.count(), read_cpu_by_label(os.getpid())
        deleted = await delete_and_time(kube, namespace, CLUSTER, within)
        deleting_events, _ = cp.audit_events(offset)
        deletion = operator_figures(deleting_events, before, samples(processes))
        netbox_requests_deleting = netbox.faults.count() - netbox_before
        cpu_deleting = cpu_since(read_cpu_by_label(os.getpid()), cpu_before)
    return SideResult(
        "capfleet",
        n,
        provisioned,
        deleted,
        figures,
        idle,
        deletion,
        netbox_requests,
        netbox_requests_deleting,
        cpu,
        cpu_deleting,
        os.cpu_count(),
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make bench-fleet", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--machines", type=int, default=100, help="worker Machines on each side (default 100)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed for each wait")
    return parser.parse_args(argv)


async def bench(n: int, within: float, workdir: Path) -> tuple[SideResult, SideResult]:
    with ControlPlane() as cp, CapiManagers(cp):
        async with Kube.connect("capfleet-bench", str(cp.kubeconfig)) as kube:
            floor = await run_floor(cp, kube, n, within)
            fleet = await run_fleet(cp, kube, n, within, workdir)
    return floor, fleet


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logs = artifacts_dir() / "bench-fleet"
    logs.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=logs / "bench.log", level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True
    )
    # The operators' kubeconfigs hold their tokens: a private directory, removed afterwards.
    with tempfile.TemporaryDirectory(prefix="capfleet-bench-") as workdir:
        floor, fleet = asyncio.run(bench(args.machines, args.timeout, Path(workdir)))
    print(format_results(floor, fleet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
