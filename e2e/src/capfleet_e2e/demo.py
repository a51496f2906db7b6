"""`make demo`: start a local control plane with capfleet on it and show, honestly, what exists today.

It starts the harness's control plane (or uses CAPFLEET_TEST_KUBECONFIG), runs the five operators as
subprocesses exactly as users run them, applies one valid object of every capfleet kind, shows what the
API rejects, and prints how to look around. The operators do not reconcile their kinds yet; the demo
says so rather than pretending. Interactive runs stay up until Enter; others tear down at once.
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

OPERATOR_MODULES = ["capi_machine_glue", "ipam_address", "netbox_device", "libvirt_vm", "baremetal_provision"]
NAMESPACE = "capfleet-demo"


def say(text: str = "") -> None:
    print(text, flush=True)


def resource_of(obj: dict[str, Any]) -> resources.Resource:
    return kinds.by_kind(obj["kind"]).resource


async def apply_samples(kubeconfig: Path) -> None:
    async with Kube.connect("capfleet-demo", str(kubeconfig)) as kube:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await kube.create_or_get(resources.NAMESPACES, namespace)
        say(f"One valid object of every capfleet kind, applied to namespace {NAMESPACE}:")
        for obj in samples.valid_samples():
            resource = resource_of(obj)
            ns = NAMESPACE if resource.namespaced else None
            await kube.create_or_get(resource, obj, ns)
            say(f"  created {resource.kind:<24} {obj['metadata']['name']}")
        say()
        say("What the API rejects (validation generated from the models):")
        for invalid in samples.invalid_samples():
            say(f"  {invalid.name}:\n    {await rejection(kube, invalid)}")
        say()


async def rejection(kube: Kube, invalid: samples.Invalid) -> str:
    """The apiserver's answer to an invalid object: created fresh, or as an update of `before`."""
    resource = resource_of(invalid.obj)
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


def main() -> None:
    say("capfleet demo — what exists today: the API, the shared runtime and five operators starting on it.")
    say("The operators do not reconcile their kinds yet (that is the work of the next issues).\n")
    cluster = start_cluster()
    operators: list[OperatorProcess] = []
    try:
        say(f"Control plane up at {cluster.server}; kubeconfig: {cluster.kubeconfig}\n")
        log_dir = artifacts_dir() / "demo-operators"
        log_dir.mkdir(parents=True, exist_ok=True)
        for module in OPERATOR_MODULES:
            operators.append(OperatorProcess(module, str(cluster.kubeconfig), log_dir).start())
            say(
                f"  operator {module:<20} live: health 127.0.0.1:{operators[-1].health_port}/healthz, "
                f"metrics 127.0.0.1:{operators[-1].metrics_port}/metrics"
            )
        say()
        asyncio.run(apply_samples(cluster.kubeconfig))
        kubectl = cluster.kubectl.binary if hasattr(cluster.kubectl, "binary") else "kubectl"
        say("Look around:")
        say(f"  export KUBECONFIG={cluster.kubeconfig}")
        say(f"  {kubectl} get capfleet -A        # every capfleet object (the 'capfleet' category)")
        say(f"  {kubectl} explain libvirtvm.spec  # the generated schema, with descriptions")
        say(f"  logs: {log_dir}")
        if sys.stdin.isatty() and not os.environ.get("CI"):
            input("\nPress Enter to tear everything down. ")
        say("Tearing down: operators stopped, control plane stopped, temporary files removed.")
    finally:
        for operator in operators:
            operator.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
