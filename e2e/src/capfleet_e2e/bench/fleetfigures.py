"""The figures `make bench-fleet` gathers for each side, and the side-by-side table it prints: pure
functions of the audit log's events and /proc readings, apart from driving the cluster (capfleet_e2e.bench.
fleet) so they are unit-tested without one."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capfleet_e2e.bench.measure import requests_of

Obj = dict[str, Any]
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class OperatorFigures:
    """One operator's cost over a phase: requests, writes, CPU seconds, peak RSS."""

    requests: int = 0
    writes: int = 0
    cpu_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    # "patch hybridmachines/status" -> how many: where the writes went.
    writes_by_target: dict[str, int] = field(default_factory=dict)
    # Resident now, once the fleet is converged and has been quiet for a minute.
    idle_rss_mib: float | None = None
    # "patch baremetalinstances: annotation seed-fetched-at" -> how many: what each patch changed.
    patches_by_change: dict[str, int] = field(default_factory=dict)


@dataclass
class SideResult:
    """One side's figures for N machines."""

    name: str
    machines: int
    seconds_to_provisioned: float
    seconds_to_deleted: float
    operators: dict[str, OperatorFigures] = field(default_factory=dict)
    idle_writes_per_minute: int | None = None
    # The same figures while the Cluster is deleted (N workers and the control plane).
    deletion: dict[str, OperatorFigures] = field(default_factory=dict)
    # The requests the fleet sent NetBox (counted by the lab's proxy in front of it), and the CPU seconds
    # of every process of the lab by what it is (the API server, NetBox, …), over each phase.
    netbox_requests: int | None = None
    netbox_requests_deleting: int | None = None
    # "GET virtualization/virtual-machines" -> how many: where NetBox's requests went, over each phase.
    netbox_by_request: dict[str, int] = field(default_factory=dict)
    netbox_by_request_deleting: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_deleting: dict[str, float] = field(default_factory=dict)
    cores: int | None = None
    vms: int = 0
    """How many of the worker Machines are VMs (the rest are bare-metal servers)."""


NETBOX_OBJECT_ID = re.compile(r"/\d+(?=/|$)")


def netbox_spent(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The requests NetBox served between two readings of the lab proxy's counts ("GET /api/dcim/
    devices/12/" -> how many), by method and endpoint with object ids folded ("GET dcim/devices/{id}"),
    most first."""
    spent: Counter[str] = Counter()
    for request, count in after.items():
        method, _, path = request.partition(" ")
        endpoint = NETBOX_OBJECT_ID.sub("/{id}", path.removeprefix("/api/").rstrip("/"))
        spent[f"{method} {endpoint}"] += count - before.get(request, 0)
    return {request: count for request, count in spent.most_common() if count > 0}


def writes_of(events: Iterable[Obj], username: str) -> int:
    """How many of `username`'s requests among audit `events` changed something."""
    return sum(requests_of(events, username).by_verb.get(verb, 0) for verb in WRITES)


def is_write(target: str) -> bool:
    return target.split(" ", 1)[0] in WRITES


def provisioned_workers(machines: Sequence[Obj]) -> int:
    """How many worker Machines (not the control plane's) have their infrastructure provisioned."""
    return sum(
        1
        for m in machines
        if "cluster.x-k8s.io/control-plane" not in (m["metadata"].get("labels") or {})
        and ((m.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned")
    )


def format_results(floor: SideResult, fleet: SideResult) -> str:
    """The side-by-side table: times and their ratios, then capfleet's cost per operator and per machine."""
    n = fleet.machines
    lines = [
        f"{'N = ' + str(n):<34}{'CAPI floor (CAPD in-memory)':>30}{'capfleet':>14}{'ratio':>8}",
    ]
    times = [("time to all provisioned (s)", floor.seconds_to_provisioned, fleet.seconds_to_provisioned)]
    if fleet.seconds_to_deleted > 0:  # not yet, in the figures printed before the deletion
        times.append(("time to all deleted (s)", floor.seconds_to_deleted, fleet.seconds_to_deleted))
    for label, a, b in times:
        ratio = f"{b / a:.2f}" if a > 0 else "n/a"
        lines.append(f"{label:<34}{a:>30.1f}{b:>14.1f}{ratio:>8}")
    lines.append(f"capfleet's workers: {n - fleet.vms} bare-metal servers, {fleet.vms} VMs")
    lines.append("")
    lines += _per_operator("capfleet operator", fleet.operators, n, peak_rss=True)
    lines += _lab_lines(fleet.netbox_requests, fleet.cpu, n, fleet.seconds_to_provisioned, fleet.cores)
    lines.append(f"idle writes per minute once converged: {fleet.idle_writes_per_minute}")
    lines.append("")
    lines.append("writes per machine, by request:")
    lines += _spent(fleet.operators, n)
    lines += _netbox_spent(fleet.netbox_by_request, n)
    lines += _patched(fleet.operators, n)
    if fleet.deletion:
        lines.append("")
        lines += _per_operator("deleting (N + 1 machines)", fleet.deletion, n + 1, peak_rss=False)
        lines += _lab_lines(
            fleet.netbox_requests_deleting, fleet.cpu_deleting, n + 1, fleet.seconds_to_deleted, fleet.cores
        )
        lines.append("writes per machine while deleting, by request:")
        lines += _spent(fleet.deletion, n + 1)
        lines += _netbox_spent(fleet.netbox_by_request_deleting, n + 1)
        lines += _patched(fleet.deletion, n + 1)
    return "\n".join(lines)


def _per_operator(
    title: str, operators: Mapping[str, OperatorFigures], machines: int, *, peak_rss: bool
) -> list[str]:
    """A row per operator (requests and writes per machine, CPU seconds, peak RSS), then all writes."""
    rss_title = f"{'peak RSS MiB':>14}{'idle RSS MiB':>14}" if peak_rss else ""
    lines = [f"{title:<24}{'requests/machine':>18}{'writes/machine':>16}{'CPU s':>9}{rss_title}"]
    for name, figures in operators.items():
        idle = f"{figures.idle_rss_mib:>14.1f}" if figures.idle_rss_mib is not None else f"{'n/a':>14}"
        rss = f"{figures.peak_rss_mib:>14.1f}{idle}" if peak_rss else ""
        lines.append(
            f"{name:<24}{figures.requests / machines:>18.2f}{figures.writes / machines:>16.2f}"
            f"{figures.cpu_seconds:>9.1f}{rss}"
        )
    total_writes = sum(f.writes for f in operators.values())
    lines.append(f"{'all operators':<24}{'':>18}{total_writes / machines:>16.2f}")
    return lines


def _lab_lines(
    netbox_requests: int | None,
    cpu: Mapping[str, float],
    machines: int,
    seconds: float,
    cores: int | None,
) -> list[str]:
    """NetBox's requests per machine, and the CPU seconds the lab's processes spent over a phase."""
    lines = []
    if netbox_requests is not None:
        lines.append(f"NetBox: {netbox_requests / machines:.2f} requests/machine")
    if cpu:
        spent = ", ".join(f"{label} {used:.1f}" for label, used in cpu.items() if used >= 0.05)
        available = f" (of {cores} cores x {seconds:.1f} s = {cores * seconds:.0f})" if cores else ""
        lines.append(f"CPU s by process{available}: {spent}")
    return lines


def _spent(operators: Mapping[str, OperatorFigures], machines: int) -> list[str]:
    lines = []
    for name, figures in operators.items():
        spent = ", ".join(
            f"{target} {count / machines:.2f}" for target, count in figures.writes_by_target.items()
        )
        lines.append(f"  {name}: {spent or 'none'}")
    return lines


def _netbox_spent(by_request: Mapping[str, int], machines: int) -> list[str]:
    if not by_request:
        return []
    spent = ", ".join(f"{request} {count / machines:.2f}" for request, count in by_request.items())
    return [f"  NetBox: {spent}"]


def _patched(operators: Mapping[str, OperatorFigures], machines: int) -> list[str]:
    """The patches per machine by what they changed (0.05 or more per machine), for each operator."""
    lines = []
    for name, figures in operators.items():
        spent = [
            f"{change} {count / machines:.2f}"
            for change, count in figures.patches_by_change.items()
            if count / machines >= 0.05
        ]
        if spent:
            lines.append(f"  {name}: " + "; ".join(spent))
    return ["patches per machine, by what they change:", *lines] if lines else []
