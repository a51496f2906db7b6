"""The pure half of the IPAM benchmark: what a figure means, how it is computed, and how it is shown.

Kept apart from the code that drives the cluster so that each rule (which audit events count as a
provider's requests, what a duplicate is, how CPU and peak RSS are read from /proc) is unit-tested on
made-up input, and the benchmark's verdict never depends on untested arithmetic.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Obj = Mapping[str, Any]

# The figures compared between providers: (key, column title, format). Lower is better for all but rate.
FIGURES = (
    ("seconds_to_all_bound", "time to all bound (s)", "{:.2f}"),
    ("claims_per_second", "claims/s", "{:.1f}"),
    ("requests_per_claim", "API requests/claim", "{:.2f}"),
    ("cpu_seconds", "CPU s (total)", "{:.2f}"),
    ("cpu_burst_seconds", "CPU s (burst)", "{:.2f}"),
    ("peak_rss_mib", "peak RSS (MiB)", "{:.1f}"),
    ("duplicates", "duplicates", "{:d}"),
)


@dataclass(frozen=True)
class ProcSample:
    """CPU time (user + system), peak and current resident set size of one process."""

    cpu_seconds: float
    peak_rss_bytes: int
    rss_bytes: int


def stat_fields(stat: str) -> list[str]:
    """The fields of /proc/<pid>/stat from field 3 (state) on: counted from the last ')', as the command
    name (field 2) may hold spaces or parentheses itself."""
    return stat[stat.rindex(")") + 2 :].split()


def parse_cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """utime + stime from the text of /proc/<pid>/stat (fields 14 and 15), in seconds."""
    rest = stat_fields(stat)
    return (int(rest[11]) + int(rest[12])) / ticks_per_second


def parse_tree_stat(stat: str, ticks_per_second: int) -> tuple[int, float]:
    """The parent pid and the CPU seconds (utime + stime, and cutime + cstime: what it has reaped of its
    children) from the text of /proc/<pid>/stat."""
    rest = stat_fields(stat)
    return int(rest[1]), sum(int(tick) for tick in rest[11:15]) / ticks_per_second


PROCESS_NAMES = {
    "gunicorn": "NetBox",
    "redis-server": "Redis",
    "sshd:": "sshd",  # a session's process names itself "sshd: root@notty"
    "capfleet_e2e.bench.fleet": "bench (proxy, fake ramdisk, polls)",
    "qemu-system-x86_64": "QEMU (VM workers)",
    "qemu-system-x86": "QEMU (VM workers)",  # /proc/<pid>/comm keeps 15 characters
    # The scale lab's libvirtd runs under it: what it reaped is the QEMUs that exited.
    "capfleet_e2e.libvirt.reaper": "QEMU (VM workers)",
}


def process_label(argv: Sequence[str]) -> str:
    """Which part of the lab a process is, from its command line: the program, for Python the module
    (`-m`) or script it runs, PostgreSQL whatever its processes call themselves ("postgres: netbox …")."""
    if not argv or not argv[0]:
        return "?"
    # Some servers rewrite their whole command line into argv[0] ("redis-server 127.0.0.1:6379").
    name = os.path.basename(argv[0].split()[0])
    if name.startswith("postgres"):
        return "PostgreSQL"
    if name.startswith("python"):
        args = list(argv[1:])
        if "-m" in args[:-1]:
            name = args[args.index("-m") + 1]
        else:
            name = os.path.basename(next((a for a in args if not a.startswith("-")), name))
    return PROCESS_NAMES.get(name, name.replace("_", "-"))


def cpu_by_label(processes: Mapping[int, tuple[int, float, str]], root: int) -> dict[str, float]:
    """CPU seconds of `root` and its live descendants, summed by label, given each live pid's (parent, CPU
    seconds with what it reaped, label): a server's workers and the connections its database forked
    under the server's. A child that exited is in its parent's reaped figure, once."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    totals: dict[str, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in processes:
            _, cpu, label = processes[pid]
            totals[label] = totals.get(label, 0.0) + cpu
            todo += children.get(pid, [])
    return totals


def read_cpu_by_label(root: int) -> dict[str, float]:
    """`cpu_by_label` of `root`'s process tree, from /proc now."""
    ticks, processes = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent, cpu = parse_tree_stat(Path(f"/proc/{entry}/stat").read_text(), ticks)
                # A process that exited and is not reaped yet has no command line: its name tells.
                argv = Path(f"/proc/{entry}/cmdline").read_text().split("\0")
                argv = argv if argv[0] else [Path(f"/proc/{entry}/comm").read_text().strip()]
            except (OSError, ValueError):
                continue  # gone meanwhile
            processes[int(entry)] = (parent, cpu, process_label(argv))
    return cpu_by_label(processes, root)


def cpu_since(now: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """Each label's CPU seconds between two readings, most first."""
    spent = {label: cpu - before.get(label, 0.0) for label, cpu in now.items()}
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


def parse_memory(status: str, key: str = "VmHWM") -> int:
    """A memory figure from the text of /proc/<pid>/status, in bytes: VmHWM (the peak resident set size)
    unless `key` names another (VmRSS: resident now)."""
    for line in status.splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024  # the kernel always writes "kB"
    raise ValueError(f"no {key} line in /proc/<pid>/status")


def read_proc(pid: int) -> ProcSample:
    """The live process's CPU seconds and RSS, read from /proc (so: before stopping it)."""
    with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/status") as status:
        memory = status.read()
        return ProcSample(
            parse_cpu_seconds(stat.read(), os.sysconf("SC_CLK_TCK")),
            parse_memory(memory),
            parse_memory(memory, "VmRSS"),
        )


@dataclass
class Requests:
    """One user's API requests: each audit ID once (a watch logs ResponseStarted and ResponseComplete)."""

    total: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)
    user_agents: list[str] = field(default_factory=list)
    # "patch hybridmachines/status": what the requests were for, to tell which handler pays for them.
    by_target: dict[str, int] = field(default_factory=dict)
    # "patch baremetalinstances: annotation seed-fetched-at": what the patches logged with their bodies
    # changed, most first.
    patches_by_change: dict[str, int] = field(default_factory=dict)


def request_target(event: Obj) -> str:
    """An audit event's verb and resource (with its subresource): "patch hybridmachines/status"."""
    ref = event.get("objectRef") or {}
    resource = str(ref.get("resource", "?"))
    if ref.get("subresource"):
        resource += "/" + str(ref["subresource"])
    return f"{event.get('verb')} {resource}"


def requests_of(events: Iterable[Obj], username: str) -> Requests:
    """The requests that `username` made, among `events` (audit log lines). A watch is logged when it
    starts and again when it ends, maybe in a later read of the log: it is counted when it starts."""
    seen: set[str] = set()
    verbs: Counter[str] = Counter()
    targets: Counter[str] = Counter()
    changes: Counter[str] = Counter()
    agents: set[str] = set()
    for event in events:
        if (event.get("user") or {}).get("username") != username:
            continue
        audit_id = str(event.get("auditID"))
        if audit_id in seen or (event.get("stage") == "ResponseComplete" and event.get("verb") == "watch"):
            continue
        seen.add(audit_id)
        verbs[str(event.get("verb"))] += 1
        targets[request_target(event)] += 1
        if event.get("verb") == "patch" and "requestObject" in event:
            changes[f"{request_target(event)}: {patch_change(event['requestObject'])}"] += 1
        agents.add(str(event.get("userAgent")))
    return Requests(
        len(seen),
        dict(sorted(verbs.items())),
        sorted(agents),
        dict(targets.most_common()),
        dict(changes.most_common()),
    )


def patch_change(body: Any) -> str:
    """What a merge patch or a JSON patch changes, in a few words: "finalizers", "annotation
    seed-fetched-at" (an annotation by its name without prefix), "spec.hypervisorName",
    "status.conditions"."""
    parts: set[str] = set()
    if isinstance(body, list):
        for op in body:
            if op.get("op") == "test":  # a precondition: it changes nothing
                continue
            path = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
            parts.add(_change_of(path[:3]))
    elif isinstance(body, dict):
        for top, value in body.items():
            if top in {"apiVersion", "kind"}:
                continue
            if not isinstance(value, dict):
                parts.add(top)
                continue
            for key, inner in value.items():
                if top == "metadata" and key == "resourceVersion":
                    continue
                if top == "metadata" and key == "annotations" and isinstance(inner, dict):
                    parts |= {_change_of(["metadata", "annotations", name]) for name in inner}
                else:
                    parts.add(_change_of([top, key]))
    return ", ".join(sorted(parts)) or "nothing"


def _change_of(path: Sequence[str]) -> str:
    if path[:2] == ["metadata", "annotations"] and len(path) > 2:
        return "annotation " + path[2].rsplit("/", 1)[-1]
    if path[:1] == ["metadata"]:
        return ".".join(path[1:2]) or "metadata"
    return ".".join(path[:2])


@dataclass
class Allocation:
    """The contract's outcome for a set of claims: who is unbound, which addresses are handed out twice."""

    bound: int = 0
    unbound: list[str] = field(default_factory=list)
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unbound or self.duplicates or self.problems)


def check_allocations(claims: Sequence[Obj], addresses: Sequence[Obj]) -> Allocation:
    """Every claim bound to an existing IPAddress that names it back, and no address held twice.

    `duplicates` counts IPAddresses whose address another IPAddress already holds, so 0 is the only
    acceptable value; it looks at every IPAddress, bound to a claim or not.
    """
    result = Allocation()
    by_name = {a["metadata"]["name"]: a for a in addresses}
    for claim in claims:
        name = claim["metadata"]["name"]
        ref = ((claim.get("status") or {}).get("addressRef") or {}).get("name")
        if not ref:
            result.unbound.append(name)
            continue
        address = by_name.get(ref)
        if address is None:
            result.problems.append(f"claim {name}: addressRef {ref} does not exist")
            continue
        claim_ref = ((address.get("spec") or {}).get("claimRef") or {}).get("name")
        if claim_ref != name:
            result.problems.append(f"claim {name}: IPAddress {ref} belongs to claim {claim_ref}")
            continue
        result.bound += 1
    holders: dict[str, list[str]] = {}
    for address in addresses:
        ip = str((address.get("spec") or {}).get("address"))
        holders.setdefault(ip, []).append(address["metadata"]["name"])
    for ip, names in sorted(holders.items()):
        if len(names) > 1:
            result.duplicates += len(names) - 1
            result.problems.append(
                f"address {ip} held by {len(names)} IPAddresses: {', '.join(sorted(names))}"
            )
    return result


@dataclass
class ScenarioResult:
    """One provider's run: the figures, and what went wrong if anything did."""

    name: str
    provider: str
    claims: int
    seconds_to_all_bound: float | None = None
    claims_per_second: float | None = None
    create_seconds: float | None = None
    requests: int | None = None
    requests_per_claim: float | None = None
    requests_by_verb: dict[str, int] = field(default_factory=dict)
    user_agents: list[str] = field(default_factory=list)
    startup_requests: int | None = None
    cpu_seconds: float | None = None
    cpu_burst_seconds: float | None = None
    peak_rss_mib: float | None = None
    bound: int | None = None
    duplicates: int | None = None
    problems: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems and self.duplicates == 0 and self.bound == self.claims


def ratios(capfleet: ScenarioResult, reference: ScenarioResult) -> dict[str, float | None]:
    """capfleet / reference for every figure (None when either is missing or the reference is 0)."""
    out: dict[str, float | None] = {}
    for key, _, _ in FIGURES:
        ours, theirs = getattr(capfleet, key), getattr(reference, key)
        out[key] = None if ours is None or theirs is None or theirs == 0 else ours / theirs
    return out


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def format_table(results: Sequence[ScenarioResult], ratio: Mapping[str, float | None] | None) -> str:
    """A plain-text table: one row per provider, then the capfleet/reference ratio when both ran."""
    header = ["", *(title for _, title, _ in FIGURES)]
    rows = [[r.name, *(_cell(getattr(r, key), fmt) for key, _, fmt in FIGURES)] for r in results]
    if ratio is not None:
        rows.append(["capfleet/reference", *(_cell(ratio[key], "{:.2f}") for key, _, _ in FIGURES)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def report(
    results: Sequence[ScenarioResult], ratio: Mapping[str, float | None] | None, **meta: Any
) -> dict[str, Any]:
    """The JSON document written to _artifacts/bench-ipam.json."""
    return {**meta, "results": [asdict(r) for r in results], "ratio_capfleet_over_reference": ratio}
