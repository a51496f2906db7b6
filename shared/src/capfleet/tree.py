"""A cluster as a tree of objects by ownerReference, each with its conditions: what `make demo` and
`capfleet describe cluster` print.

`clusterctl describe cluster` stops at CAPI's objects; this follows the ownerReferences further, down to
the fleet's intermediate objects (address claims, VMs, device claims, bare-metal instances), so one look
shows where every machine is and why.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

from capfleet import conditions, resources
from capfleet.api import kinds
from capfleet.resources import KCPS, KUBEADM_CONFIGS, MACHINE_DEPLOYMENTS, MACHINE_SETS, Resource

SHOWN = (
    resources.CAPI_CLUSTERS,
    kinds.HYBRID_CLUSTER.resource,
    KCPS,
    MACHINE_DEPLOYMENTS,
    MACHINE_SETS,
    resources.CAPI_MACHINES,
    KUBEADM_CONFIGS,
    kinds.HYBRID_MACHINE.resource,
    resources.IP_ADDRESS_CLAIMS,
    resources.IP_ADDRESSES,
    kinds.LIBVIRT_VM.resource,
    kinds.NETBOX_VIRTUAL_MACHINE.resource,
    kinds.NETBOX_DEVICE.resource,
    kinds.BAREMETAL_INSTANCE.resource,
)


class Lister(Protocol):
    """What the tree needs of an API client (`capfleet.kube.Kube`, or the console's acting client)."""

    async def list(self, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]: ...


def facts(obj: dict[str, Any]) -> str:
    """The few fields that say what an object is, beside its conditions."""
    kind, spec, status = obj["kind"], obj.get("spec") or {}, obj.get("status") or {}
    parts: list[str] = []
    if kind == "Machine":
        parts += [f"phase={status.get('phase')}", f"providerID={spec.get('providerID')}"]
        parts += [f"{a['type']}={a['address']}" for a in status.get("addresses") or []]
    elif kind == "IPAddress":
        parts.append(f"{spec.get('address')}/{spec.get('prefix')} gateway {spec.get('gateway')}")
    elif kind == "LibvirtVM":
        parts += [f"hypervisor={status.get('hypervisorName')}", f"domain={status.get('domainName')}"]
        parts.append(f"state={status.get('state')}")
    elif kind == "NetboxDevice":
        parts += [
            f"device={status.get('name')} (id {status.get('deviceID')})",
            f"bmc={status.get('bmcAddress')}",
        ]
    elif kind == "BaremetalInstance":
        parts += [f"phase={status.get('phase')}", f"power={status.get('powerState')}"]
    elif kind == "HybridCluster":
        endpoint = spec.get("controlPlaneEndpoint") or {}
        parts.append(f"endpoint={endpoint.get('host')}:{endpoint.get('port')}")
    elif kind in {"MachineDeployment", "KubeadmControlPlane", "MachineSet"}:
        parts.append(f"replicas={spec.get('replicas')}")
    return "  ".join(parts)


# CAPI's conditions whose normal state is False: shown only when they are not False.
NEGATIVE = frozenset({"Paused", "Deleting", "ScalingUp", "ScalingDown", "Remediating", "RollingOut"})


# Kinds whose conditions are steps done one after the other: the tree shows how long each one took.
TIMED = frozenset({"HybridMachine"})


def duration_text(seconds: int) -> str:
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def step_times(obj: dict[str, Any]) -> dict[str, str]:
    """Condition type → how long that step took, for kinds in TIMED (steps in the order they finished)."""
    if obj.get("kind") not in TIMED:
        return {}
    found = conditions.parse((obj.get("status") or {}).get("conditions"))
    steps = [
        c.type
        for c in sorted(found, key=lambda c: c.last_transition_time or "")
        if c.type not in {conditions.READY, conditions.PAUSED}
    ]
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return {}
    return {step: duration_text(s) for step, s in conditions.step_durations(found, steps, created).items()}


def conditions_text(obj: dict[str, Any]) -> list[str]:
    """`✓ A, B, C` for the conditions in their good state (with how long each step took, for kinds whose
    conditions are steps), then one line per other condition with its reason and message (CAPI's
    multi-line messages folded onto that line)."""
    good, other = [], []
    times = step_times(obj)
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] in NEGATIVE:
            if condition["status"] == "False":
                continue  # not paused, not deleting, not scaling: nothing to say
        elif condition["status"] == "True":
            took = times.get(condition["type"])
            good.append(f"{condition['type']} {took}" if took else condition["type"])
            continue
        mark = {"True": "!", "False": "✗"}.get(condition["status"], "?")
        message = " ".join(str(condition.get("message") or "").split())
        other.append(
            f"{mark} {condition['type']}: {condition.get('reason', '')}{': ' + message if message else ''}"
        )
    return ([f"✓ {', '.join(good)}"] if good else []) + other


async def cluster_tree(kube: Lister, namespace: str, cluster: str) -> str:
    """The Cluster and everything it owns, transitively, as indented text."""
    objects: list[dict[str, Any]] = []
    for resource in SHOWN:
        objects += await kube.list(resource, namespace)
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        refs = obj["metadata"].get("ownerReferences") or []
        parent = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if parent is not None:
            children[parent["uid"]].append(obj)
    roots = [o for o in objects if o["kind"] == "Cluster" and o["metadata"]["name"] == cluster]
    lines: list[str] = []

    def walk(obj: dict[str, Any], prefix: str, last: bool, root: bool) -> None:
        branch = "" if root else ("└── " if last else "├── ")
        head = f"{obj['kind']} {obj['metadata']['name']}"
        detail = facts(obj)
        lines.append(f"{prefix}{branch}{head}{'  ' + detail if detail else ''}")
        inner = prefix if root else prefix + ("    " if last else "│   ")
        kids = sorted(
            children.get(obj["metadata"]["uid"], []), key=lambda o: (o["kind"], o["metadata"]["name"])
        )
        bar = "│   " if kids else "    "
        for text in conditions_text(obj):
            lines.append(f"{inner}{bar}  {text}")
        for index, kid in enumerate(kids):
            walk(kid, inner, index == len(kids) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return "\n".join(lines)
