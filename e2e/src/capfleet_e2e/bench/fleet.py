"""`make bench-fleet N=…`: N hybrid machines (bare-metal servers and VMs) through the real Cluster API and
capfleet's fleet, side by side with Cluster API's floor for N Machines, on one control plane in one run.

Both sides start from a cluster whose one-replica control plane is up, then scale their worker
MachineDeployments from 0 to N Machines in all and time it until every worker Machine is provisioned
(`status.initialization.infrastructureProvisioned`), then delete the cluster and time it until every
Machine is gone.

- The floor: CAPD's in-memory backend (capfleet_e2e.bench.floor), CAPI's own scale-test provider, every
  simulated startup zero.
- capfleet: the five operators unchanged, each a process of its own under its own ServiceAccount and
  RBAC; real NetBox holding N+1 servers; sushy-tools' fake driver as their BMCs and the fake ramdisk
  (capfleet_e2e.baremetal.fakeramdisk) playing iPXE and the deploy ramdisk for each; the cluster from
  deploy/clusterctl/cluster-template-baremetal.yaml (a bare-metal control plane and MachineDeployment
  `md-0`) with a second MachineDeployment of VM workers (`md-vm`, cluster-template-vm.yaml's workers), by
  default half of the N; one test hypervisor (a private libvirtd behind its own sshd, in a network
  namespace of the run) whose VMs are real QEMU domains booting a disk that halts at once
  (capfleet_e2e.libvirt.haltdisk), recorded in NetBox as virtual machines; a stand-in workload API server
  at the endpoint, where `kubeadm init` would have written its config (capfleet_e2e.workload).

Per operator it reads, from the API server's audit log, its requests and writes per machine, and from
/proc its CPU seconds and peak RSS; then, with everything provisioned, the writes of a quiet minute (idle
writes, which must be 0) and the resident memory after it; and the same figures while the Cluster is
deleted. Beside them, the requests the fleet sent NetBox, and the CPU seconds of every process of the lab
by what it is (API server, etcd, Cluster API's managers, NetBox, PostgreSQL, the BMC emulator, each
operator, QEMU, the bench itself): on a small machine they share the cores, and this says who spent them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Kube, KubeError
from capfleet_e2e.baremetal.fakeramdisk import FakeRamdisk, boot_env, fake_systems
from capfleet_e2e.baremetal.redfish import RedfishEmulator
from capfleet_e2e.bench.fleetfigures import (
    OperatorFigures,
    SideResult,
    format_results,
    is_write,
    netbox_spent,
    provisioned_workers,
    writes_of,
)
from capfleet_e2e.bench.fleetlab import (
    CLUSTER,
    HYPERVISOR_LABELS,
    LIBVIRT_ENV,
    METAL_DEPLOYMENT,
    VM_DEPLOYMENT,
    fleet_objects,
    hypervisor_lab,
    seed_servers,
)
from capfleet_e2e.bench.floor import Capd, floor_cluster
from capfleet_e2e.bench.measure import ProcSample, cpu_since, read_cpu_by_label, read_proc, requests_of
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.controlplane import PATCH_BODIES_AUDIT_POLICY, ControlPlane
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.netbox.fixtures import RealNetboxes, instance_behind
from capfleet_e2e.netbox.proxy import NetboxProxy
from capfleet_e2e.netbox.releases import DEFAULT_RELEASE
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.processes import free_port
from capfleet_e2e.serviceaccounts import operator_as_service_account, service_account_user
from capfleet_e2e.site import register_hypervisor, secret
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
IDLE_SECONDS = 60.0
# How often the bench lists the Machines: its own reads load the same API server as both sides.
POLL_SECONDS = 1.0
SETTLE_SECONDS = 70.0
"""Longer than the fleet's slowest convergence without an event: a Hypervisor's allocation is refreshed
once a minute, and a server's first boot is a pass through two power changes of up to 11 s each on the
fake BMCs, writing only at its end. With 15 s, the N = 2 bench counted both as idle writes (3)."""


# --- driving the cluster -------------------------------------------------------------------------------


async def machines_of(kube: Kube, namespace: str) -> list[Obj]:
    return await kube.list(resources.CAPI_MACHINES, namespace)


def patient(probe: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
    """`probe`, answering False (not yet) while the API server is too busy to answer: a 5xx or a 429 from
    it, or no answer in time (the client's timeout comes as a KubeError of status 0). The bench's own polls
    share the API server with both sides; at N = 500 one of them got a 504 while the fleet deleted, and in
    another run one timed out, each of which ended the run before it printed the deletion."""

    async def tolerant() -> bool:
        try:
            return await probe()
        except KubeError as exc:
            if exc.status == 0 or exc.status >= 500 or exc.status == 429:
                return False
            raise
        except TimeoutError:
            return False

    return tolerant


async def scale_and_time(kube: Kube, namespace: str, replicas: Mapping[str, int], within: float) -> float:
    """Scale each MachineDeployment to its number of `replicas`, at once; seconds until all their workers
    are provisioned."""
    started = time.monotonic()
    for deployment, count in replicas.items():
        if count:
            patch = {"spec": {"replicas": count}}
            await kube.patch(resources.MACHINE_DEPLOYMENTS, deployment, patch, namespace)
    n = sum(replicas.values())

    async def done() -> bool:
        return provisioned_workers(await machines_of(kube, namespace)) >= n

    await eventually(f"{n} provisioned worker Machines", patient(done), within, POLL_SECONDS)
    return time.monotonic() - started


async def delete_and_time(kube: Kube, namespace: str, cluster: str, within: float) -> float:
    started = time.monotonic()
    await kube.delete(resources.CAPI_CLUSTERS, cluster, namespace)

    async def gone() -> bool:
        return (
            not await machines_of(kube, namespace)
            and await kube.get(resources.CAPI_CLUSTERS, cluster, namespace) is None
        )

    await eventually("every Machine and the Cluster to be gone", patient(gone), within, POLL_SECONDS)
    return time.monotonic() - started


async def settled(cp: ControlPlane, users: Sequence[str], offset: int, within: float) -> int:
    """Wait until `users` have written nothing for SETTLE_SECONDS; returns the audit log's offset from
    there."""
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
            "the floor's control-plane Machine to be Running",
            patient(control_plane_running),
            within,
            POLL_SECONDS,
        )
        provisioned = await scale_and_time(kube, namespace, {f"{CLUSTER}-workers": n}, within)
        deleted = await delete_and_time(kube, namespace, CLUSTER, within)
    return SideResult("floor", n, provisioned, deleted)


@contextlib.asynccontextmanager
async def operators_running(
    cp: ControlPlane, namespace: str, env: Mapping[str, Mapping[str, str]], workdir: Path
) -> AsyncIterator[dict[str, OperatorProcess]]:
    log_dir = artifacts_dir() / "bench-fleet"
    log_dir.mkdir(parents=True, exist_ok=True)
    started: dict[str, OperatorProcess] = {}
    try:
        for module, operator in OPERATORS.items():
            # As deployed: without --verbose, whose debug lines (every BMC request) cost CPU at scale.
            process = operator_as_service_account(
                cp,
                module,
                operator,
                workdir,
                log_dir,
                namespaces=[namespace],
                env=env.get(module),
                verbose=False,
            )
            started[operator] = process.start()
        yield started
    finally:
        for process in started.values():
            process.stop()


async def hypervisor_ready(kube: Kube, name: str) -> bool:
    found = await kube.get(kinds.HYPERVISOR.resource, name)
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


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
            patches_by_change=requests.patches_by_change,
        )
    return figures


def samples(processes: Mapping[str, OperatorProcess]) -> dict[str, ProcSample]:
    return {op: read_proc(p.component.pid) for op, p in processes.items() if p.component}


async def run_fleet(
    cp: ControlPlane,
    kube: Kube,
    n: int,
    vms: int,
    within: float,
    workdir: Path,
    scaled_up: Callable[[SideResult], None] = lambda _: None,
) -> SideResult:
    """capfleet's side; `scaled_up` gets the figures of the scale-up and the quiet minute as soon as they are
    known, before the deletion (which may fail on its own)."""
    namespace = "bench-fleet"
    cp.kubectl("create", "namespace", namespace)
    systems = fake_systems(n - vms + 1, "srv")
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
        network, hypervisor = stack.enter_context(hypervisor_lab())
        seed_servers(netbox, systems, f"127.0.0.1:{bmc.port}")
        hypervisor_name = await register_hypervisor(kube, namespace, hypervisor, labels=HYPERVISOR_LABELS)
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
        env = {"baremetal_provision": boot_env(boot_port, workdir / "ramdisk"), "libvirt_vm": LIBVIRT_ENV}
        processes = await stack.enter_async_context(operators_running(cp, namespace, env, workdir))
        apply(cp, fleet_objects(workload, network), namespace)
        try:
            await eventually(
                "the control-plane Machine to be provisioned",
                patient(lambda: control_plane_provisioned(kube, namespace)),
                within,
                POLL_SECONDS,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake ramdisk played: {fake.played}") from exc
        workload.upload_kubeadm_config()  # what `kubeadm init` would have done on it
        await eventually(
            "the Hypervisor to be Ready",
            patient(lambda: hypervisor_ready(kube, hypervisor_name)),
            within,
            POLL_SECONDS,
        )

        _, offset = cp.audit_events()
        before = samples(processes)
        netbox_before, cpu_before = netbox.faults.by_endpoint(), read_cpu_by_label(os.getpid())
        try:
            replicas = {METAL_DEPLOYMENT: n - vms, VM_DEPLOYMENT: vms}
            provisioned = await scale_and_time(kube, namespace, replicas, within)
        except AssertionError as exc:
            failed = {name: p.failure for name, p in fake.played.items() if p.failure}
            unfinished = {name: p.steps for name, p in fake.played.items() if not p.results}
            raise AssertionError(
                f"{exc}; the fake ramdisk failed for {failed}; servers it never finished: {unfinished}"
            ) from exc
        events, offset = cp.audit_events(offset)
        figures = operator_figures(events, before, samples(processes))
        netbox_by_request = netbox_spent(netbox_before, netbox.faults.by_endpoint())
        cpu = cpu_since(read_cpu_by_label(os.getpid()), cpu_before)

        users = [service_account_user(op) for op in processes]
        offset = await settled(cp, users, offset, within)
        await asyncio.sleep(IDLE_SECONDS)
        idle_events, offset = cp.audit_events(offset)
        idle = sum(writes_of(idle_events, user) for user in users)
        before = samples(processes)
        for op, sample in before.items():
            figures[op].idle_rss_mib = sample.rss_bytes / 2**20
        scaled_up(
            SideResult(
                "capfleet", n, provisioned, 0.0, figures, idle,
                netbox_requests=sum(netbox_by_request.values()), cpu=cpu, cores=os.cpu_count(), vms=vms,
                netbox_by_request=netbox_by_request,
            )
        )  # fmt: skip
        netbox_before, cpu_before = netbox.faults.by_endpoint(), read_cpu_by_label(os.getpid())
        deleted = await delete_and_time(kube, namespace, CLUSTER, within)
        deleting_events, _ = cp.audit_events(offset)
        deletion = operator_figures(deleting_events, before, samples(processes))
        netbox_deleting = netbox_spent(netbox_before, netbox.faults.by_endpoint())
        cpu_deleting = cpu_since(read_cpu_by_label(os.getpid()), cpu_before)
    return SideResult(
        "capfleet",
        n,
        provisioned,
        deleted,
        figures,
        idle,
        deletion,
        netbox_requests=sum(netbox_by_request.values()),
        netbox_requests_deleting=sum(netbox_deleting.values()),
        netbox_by_request=netbox_by_request,
        netbox_by_request_deleting=netbox_deleting,
        cpu=cpu,
        cpu_deleting=cpu_deleting,
        cores=os.cpu_count(),
        vms=vms,
    )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make bench-fleet", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--machines", type=int, default=100, help="worker Machines on each side (default 100)"
    )
    parser.add_argument(
        "--vms", type=int, default=None, help="how many of capfleet's workers are VMs (default: half, N // 2)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed for each wait")
    args = parser.parse_args(argv)
    if args.vms is None:
        args.vms = args.machines // 2
    if not 0 <= args.vms <= args.machines:
        parser.error(f"--vms must be between 0 and {args.machines}")
    return args


async def bench(
    n: int, within: float, workdir: Path, vms: int | None = None
) -> tuple[SideResult, SideResult]:
    """Both sides at `n` worker Machines, `vms` of capfleet's (default: half) VMs."""
    with ControlPlane(audit_policy=PATCH_BODIES_AUDIT_POLICY) as cp, CapiManagers(cp):
        async with Kube.connect("capfleet-bench", str(cp.kubeconfig)) as kube:
            floor = await run_floor(cp, kube, n, within)
            vm_count = n // 2 if vms is None else vms

            def scaled_up(partial: SideResult) -> None:
                print(f"{format_results(floor, partial)}\n(the deletion follows)\n", flush=True)

            fleet = await run_fleet(cp, kube, n, vm_count, within, workdir, scaled_up)
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
        floor, fleet = asyncio.run(bench(args.machines, args.timeout, Path(workdir), args.vms))
    print(format_results(floor, fleet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
