"""The fleet's objects as rows a person reads: VMs, hypervisors, bare-metal servers and quotas.

Pure: the caller lists the objects, this picks and formats the columns, so the CLI (`capfleet get`) and
any other client show the same thing. A row never carries a Secret's content: objects only name their
Secrets, and no column shows those names either.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet import conditions

CREATED_BY = "capfleet.dev/created-by"
"""Who asked for an object, recorded by the client that created it for them (the console does)."""
CREATOR_LABEL = "capfleet.dev/creator"
"""The same, as a label the API server can select on (`creator_label`): user names are no label values."""


def creator_label(user: str) -> str:
    return hashlib.sha256(user.encode()).hexdigest()[:40]


# Reasons of a Ready=False that mean "not yet" rather than "failed".
WAITING = frozenset(
    {"QuotaExceeded", "InsufficientCapacity", "NoHypervisorMatches", "Pending", "Paused", "Provisioning"}
)


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    health: list[str]  # per row: "good", "bad" or "busy", for a display that colours rows


def age(created: str | None, now: datetime.datetime) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d."""
    if not created:
        return "-"
    then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def mib(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1024:g} GiB" if value >= 1024 and value % 256 == 0 else f"{value} MiB"


@dataclass(frozen=True)
class Ready:
    """An object's Ready condition, as much of it as a row shows."""

    status: str
    reason: str
    message: str


def ready_condition(obj: Mapping[str, Any]) -> Ready | None:
    """The Ready condition, read straight from the wire form: a page of hundreds of rows reads one per row
    (validating every condition of every object cost a 500-VM page most of its time)."""
    for raw in (obj.get("status") or {}).get("conditions") or ():
        if raw.get("type") == conditions.READY:
            return Ready(
                str(raw.get("status", "Unknown")), str(raw.get("reason", "")), str(raw.get("message", ""))
            )
    return None


def health(obj: Mapping[str, Any]) -> str:
    """good when Ready, bad when a step failed for a reason other than waiting, busy otherwise."""
    ready = ready_condition(obj)
    if obj["metadata"].get("deletionTimestamp"):
        return "busy"
    if ready is None:
        return "busy"
    if ready.status == "True":
        return "good"
    waiting = ready.status == "Unknown" or ready.reason.startswith("Waiting") or ready.reason in WAITING
    return "busy" if waiting else "bad"


def state_text(obj: Mapping[str, Any], state: str | None) -> str:
    """The object's own state word, or why it is not Ready yet (`Waiting: QuotaExceeded`)."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Deleting"
    ready = ready_condition(obj)
    if ready is not None and ready.status != "True":
        return f"{state or 'NotReady'}: {ready.reason}" if state else ready.reason
    return state or "-"


def owner_text(meta: Mapping[str, Any]) -> str:
    """Who the object is for: the user recorded at creation, else its controller ("HybridMachine/cp-0")."""
    created_by = (meta.get("annotations") or {}).get(CREATED_BY)
    if created_by:
        return str(created_by)
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return f"{ref['kind']}/{ref['name']}" if ref else "-"


def vms(objects: Iterable[Mapping[str, Any]], now: datetime.datetime) -> Table:
    header = ("NAMESPACE", "NAME", "VCPUS", "MEMORY", "DISK", "STATE", "HYPERVISOR", "OWNER", "AGE")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for vm in sorted(objects, key=_namespaced_name):
        meta, spec, status = vm["metadata"], vm.get("spec") or {}, vm.get("status") or {}
        disk = sum(int(d.get("sizeGiB", 0)) for d in spec.get("disks") or [])
        rows.append(
            (
                meta.get("namespace", ""),
                meta["name"],
                str(spec.get("vcpus", "-")),
                mib(spec.get("memoryMiB")),
                f"{disk} GiB",
                state_text(vm, status.get("state")),
                spec.get("hypervisorName") or "-",
                owner_text(meta),
                age(meta.get("creationTimestamp"), now),
            )
        )
        marks.append(health(vm))
    return Table(header, rows, marks)


def hypervisors(objects: Iterable[Mapping[str, Any]], placed: Iterable[Mapping[str, Any]]) -> Table:
    """Hypervisors with what capfleet VMs use of each (allocated/capacity), what is free for more (capacity
    less what the host keeps back and what is allocated, before the operator's overcommit), and how many
    VMs are on it."""
    on: dict[str, int] = {}
    for vm in placed:
        name = (vm.get("spec") or {}).get("hypervisorName")
        if name:
            on[name] = on.get(name, 0) + 1
    header = ("NAME", "HOST", "FAILURE DOMAIN", "REACHABLE", "VCPUS", "MEMORY", "STORAGE", "FREE", "VMS")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for hv in sorted(objects, key=lambda o: str(o["metadata"]["name"])):
        spec, status = hv.get("spec") or {}, hv.get("status") or {}
        capacity, allocated = status.get("capacity") or {}, status.get("allocated") or {}
        reachable = next(
            (c for c in conditions.parse(status.get("conditions")) if c.type == "Reachable"), None
        )
        rows.append(
            (
                hv["metadata"]["name"],
                f"{(spec.get('connection') or {}).get('host', '-')}",
                spec.get("failureDomain") or "-",
                "-"
                if reachable is None
                else ("yes" if reachable.status == "True" else f"no: {reachable.reason}"),
                _used_of(allocated.get("vcpus"), capacity.get("vcpus"), str),
                _used_of(allocated.get("memoryMiB"), capacity.get("memoryMiB"), mib),
                _used_of(allocated.get("storageGiB"), capacity.get("storageGiB"), lambda v: f"{v} GiB"),
                _free(capacity, spec.get("reserved") or {}, allocated),
                str(on.get(hv["metadata"]["name"], 0)),
            )
        )
        marks.append(health(hv))
    return Table(header, rows, marks)


def servers(
    instances: Iterable[Mapping[str, Any]], devices: Iterable[Mapping[str, Any]], now: datetime.datetime
) -> Table:
    """BaremetalInstances, each with the NetBox device claimed for the same machine (same controller)."""
    device_of: dict[str, Mapping[str, Any]] = {}
    for device in devices:
        controller = _controller_uid(device["metadata"])
        if controller:
            device_of[controller] = device
    header = ("NAMESPACE", "NAME", "PHASE", "POWER", "NETBOX DEVICE", "BMC", "AGE")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for bmi in sorted(instances, key=_namespaced_name):
        meta, spec, status = bmi["metadata"], bmi.get("spec") or {}, bmi.get("status") or {}
        device_status = (device_of.get(_controller_uid(meta) or "") or {}).get("status") or {}
        device_text = (
            f"{device_status.get('name')} (id {device_status.get('deviceID')})"
            if device_status.get("deviceID")
            else "-"
        )
        rows.append(
            (
                meta.get("namespace", ""),
                meta["name"],
                state_text(bmi, status.get("phase")),
                status.get("powerState") or "-",
                device_text,
                _without_credentials((spec.get("bmc") or {}).get("address", "-")),
                age(meta.get("creationTimestamp"), now),
            )
        )
        marks.append(health(bmi))
    return Table(header, rows, marks)


def quotas(objects: Iterable[Mapping[str, Any]]) -> Table:
    header = ("NAMESPACE", "NAME", "VCPUS", "MEMORY", "DISK", "VMS")
    rows: list[tuple[str, ...]] = []
    marks: list[str] = []
    for quota in sorted(objects, key=_namespaced_name):
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        cells = [
            _used_of(used.get("vcpus"), hard.get("vcpus"), str),
            _used_of(used.get("memoryMiB"), hard.get("memoryMiB"), mib),
            _used_of(used.get("storageGiB"), hard.get("storageGiB"), lambda v: f"{v} GiB"),
            _used_of(used.get("vms"), hard.get("vms"), str),
        ]
        meta = quota["metadata"]
        rows.append((meta.get("namespace", ""), meta["name"], *cells))
        full = any(
            hard.get(k) is not None and used.get(k, 0) >= hard[k]
            for k in ("vcpus", "memoryMiB", "storageGiB", "vms")
        )
        marks.append("busy" if full else "good")
    return Table(header, rows, marks)


def render(table: Table, paint: Mapping[str, str] | None = None) -> str:
    """Aligned columns, as kubectl prints them; `paint` maps a row's health to an ANSI colour code."""
    widths = [len(h) for h in table.header]
    for row in table.rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["   ".join(h.ljust(w) for h, w in zip(table.header, widths, strict=True)).rstrip()]
    for row, mark in zip(table.rows, table.health, strict=True):
        line = "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        colour = (paint or {}).get(mark)
        lines.append(f"\033[{colour}m{line}\033[0m" if colour else line)
    return "\n".join(lines)


def _free(capacity: Mapping[str, int], reserved: Mapping[str, int], allocated: Mapping[str, int]) -> str:
    """`12 vCPUs, 60 GiB, 460 GiB`: what is left of each, or `-` before the host was measured."""
    if not capacity:
        return "-"

    def left(key: str) -> int:
        return max(0, int(capacity.get(key, 0)) - int(reserved.get(key, 0)) - int(allocated.get(key, 0)))

    return f"{left('vcpus')} vCPUs, {mib(left('memoryMiB'))}, {left('storageGiB')} GiB"


def _used_of(used: int | None, limit: int | None, show: Any) -> str:
    if limit is None:
        return "-" if used is None else f"{show(used)}"
    return f"{show(used or 0)} / {show(limit)}"


def _namespaced_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (str(obj["metadata"].get("namespace", "")), str(obj["metadata"]["name"]))


def _controller_uid(meta: Mapping[str, Any]) -> str | None:
    refs: Sequence[Mapping[str, Any]] = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), None)
    return str(ref["uid"]) if ref else None


def _without_credentials(address: str) -> str:
    """A BMC address with any `user:password@` part dropped (addresses carry none; never show one)."""
    scheme, sep, rest = address.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"
