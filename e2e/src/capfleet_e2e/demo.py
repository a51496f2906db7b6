"""`make demo`: start a local control plane with capfleet on it and show, honestly, what works today.

It starts the harness's control plane (or uses CAPFLEET_TEST_KUBECONFIG), runs the five operators as
subprocesses exactly as users run them, shows what the API rejects, then lets ipam-address allocate
addresses from an in-cluster IPPool (the embedded default) to CAPI IPAddressClaims and prints the result
as a tree with each object's conditions. The machine flow (VMs, bare metal, the CAPI glue) does not
exist yet, and the demo says so. Interactive runs stay up until Enter; others tear down at once.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from capfleet import resources
from capfleet.api import kinds, samples
from capfleet.kube import Invalid, Kube
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.plugin import start_cluster
from capfleet_e2e.waiting import eventually

OPERATOR_MODULES = ["capi_machine_glue", "ipam_address", "netbox_device", "libvirt_vm", "baremetal_provision"]
NAMESPACE = "capfleet-demo"
CLAIMS = ["cp-0-nic0", "worker-0-nic0", "worker-1-nic0"]


def say(text: str = "") -> None:
    print(text, flush=True)


async def rejection(kube: Kube, invalid: samples.Invalid) -> str:
    """The apiserver's answer to an invalid object: created fresh, or as an update of `before`."""
    resource = kinds.by_kind(invalid.obj["kind"]).resource
    ns = NAMESPACE if resource.namespaced else None
    name = invalid.obj["metadata"]["name"]
    try:
        if invalid.before is None:
            await kube.create(resource, invalid.obj, ns)
        else:
            await kube.create_or_get(resource, invalid.before, ns)
            await kube.patch(resource, name, {"spec": invalid.obj["spec"]}, ns)
    except Invalid as exc:
        return exc.message
    finally:
        if invalid.before is not None:
            await kube.delete(resource, name, ns)
    return "ACCEPTED — this is a bug"


def condition_line(obj: dict[str, Any]) -> str:
    conds = (obj.get("status") or {}).get("conditions") or []
    return "  ".join(
        f"{c['type']}={c['status']} ({c['reason']}{': ' + c['message'] if c.get('message') else ''})"
        for c in conds
    )


async def allocate(kube: Kube) -> None:
    pool = {
        "apiVersion": kinds.IPPOOL.resource.api_version,
        "kind": "IPPool",
        "metadata": {"name": "demo-pool"},
        "spec": {"addresses": ["192.0.2.10-192.0.2.20"], "prefix": 24, "gateway": "192.0.2.1"},
    }
    await kube.create_or_get(kinds.IPPOOL.resource, pool, NAMESPACE)
    for name in CLAIMS:
        claim_body: dict[str, Any] = {
            "apiVersion": resources.IP_ADDRESS_CLAIMS.api_version,
            "kind": "IPAddressClaim",
            "metadata": {"name": name},
            "spec": {"poolRef": {"apiGroup": kinds.IPAM_GROUP, "kind": "IPPool", "name": "demo-pool"}},
        }
        await kube.create_or_get(resources.IP_ADDRESS_CLAIMS, claim_body, NAMESPACE)

    async def all_bound() -> list[dict[str, Any]] | None:
        found = [await kube.get(resources.IP_ADDRESS_CLAIMS, name, NAMESPACE) for name in CLAIMS]
        bound = [c for c in found if c and ((c.get("status") or {}).get("addressRef") or {}).get("name")]
        return bound if len(bound) == len(CLAIMS) else None

    claims = await eventually("every claim to be bound", all_bound, within=60)

    async def counted() -> dict[str, Any] | None:
        found = await kube.get(kinds.IPPOOL.resource, "demo-pool", NAMESPACE)
        counts = ((found or {}).get("status") or {}).get("ipAddresses") or {}
        return found if counts.get("used") == len(CLAIMS) else None

    pool_now = await eventually("the pool's counts", counted, within=30)
    counts = pool_now["status"]["ipAddresses"]
    say(f"IPPool {NAMESPACE}/demo-pool  total={counts['total']} used={counts['used']} free={counts['free']}")
    say(f"│   {condition_line(pool_now)}")
    for claim in claims:
        address = await kube.get(resources.IP_ADDRESSES, claim["metadata"]["name"], NAMESPACE)
        spec: dict[str, Any] = (address or {}).get("spec") or {}
        say(f"├── IPAddressClaim {claim['metadata']['name']}")
        say(f"│   │   {condition_line(claim)}")
        say(f"│   └── IPAddress {spec.get('address')}/{spec.get('prefix')} gateway {spec.get('gateway')}")
    say()


async def show(kubeconfig: Path) -> None:
    async with Kube.connect("capfleet-demo", str(kubeconfig)) as kube:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await kube.create_or_get(resources.NAMESPACES, namespace)
        say("1. The API refuses invalid objects with a readable message (validation from the models):")
        for invalid in samples.invalid_samples():
            say(f"   - {invalid.name}: {await rejection(kube, invalid)}")
        say()
        say("2. ipam-address serves CAPI IPAddressClaims from an in-cluster IPPool (the embedded default):")
        await allocate(kube)


def main() -> None:
    say(
        "capfleet demo. What works today: the API, the shared runtime, and ipam-address allocating addresses."
    )
    say("Not yet: VMs (libvirt-vm), bare metal (netbox-device, baremetal-provision) and the CAPI glue;")
    say("their operators start and serve probes and metrics, but do not reconcile anything yet.\n")
    cluster = start_cluster()
    operators: list[OperatorProcess] = []
    try:
        say(f"Control plane: {cluster.server}  (kubeconfig {cluster.kubeconfig})")
        log_dir = artifacts_dir() / "demo-operators"
        log_dir.mkdir(parents=True, exist_ok=True)
        for module in OPERATOR_MODULES:
            operators.append(OperatorProcess(module, str(cluster.kubeconfig), log_dir).start())
            say(
                f"  operator {module:<20} live on 127.0.0.1:{operators[-1].health_port}/healthz, "
                f"metrics on 127.0.0.1:{operators[-1].metrics_port}/metrics"
            )
        say()
        asyncio.run(show(cluster.kubeconfig))
        kubectl = getattr(cluster.kubectl, "binary", "kubectl")
        say("Look around while this runs:")
        say(f"  export KUBECONFIG={cluster.kubeconfig}")
        say(f"  {kubectl} get ippools,ipaddressclaims,ipaddresses -n {NAMESPACE}")
        say(f"  {kubectl} explain hybridmachine.spec   # the generated API, with descriptions")
        say(f"  operator logs: {log_dir}")
        if sys.stdin.isatty() and not os.environ.get("CI"):
            input("\nPress Enter to tear everything down. ")
        say("Torn down: operators and control plane stopped, temporary files removed.")
    finally:
        for operator in operators:
            operator.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
