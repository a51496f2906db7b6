"""What each page shows, from the objects the user may read: pure, so pages and tests agree.

Tables come from `capfleet.tables` (the `capfleet get` command shows the same rows); the cluster page
is `capfleet.tree`'s text split into lines, each marked good, bad or busy for colour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from capfleet import tables

QUOTA_ITEMS = (
    ("vcpus", "CPUs", ""),
    ("memoryMiB", "RAM", "GiB"),
    ("storageGiB", "Disk", "GiB"),
    ("vms", "VMs", ""),
)


@dataclass(frozen=True)
class QuotaItem:
    label: str
    used: str
    hard: str
    percent: int  # 0-100, for the bar

    def __str__(self) -> str:
        return f"{self.label} {self.used} / {self.hard}"


def quota_bar(quotas: Iterable[Mapping[str, Any]]) -> list[QuotaItem]:
    """Per limit, the tightest of the namespace's quotas: "CPUs 2 / 16 · RAM 4 / 64 GiB · …"."""
    items: list[QuotaItem] = []
    found = list(quotas)
    for key, label, unit in QUOTA_ITEMS:
        best: QuotaItem | None = None
        for quota in found:
            hard = ((quota.get("spec") or {}).get("hard") or {}).get(key)
            if hard is None:
                continue
            used = int((((quota.get("status") or {}).get("used")) or {}).get(key, 0))
            item = QuotaItem(label, _amount(used, key, unit), _amount(hard, key, unit), _percent(used, hard))
            if best is None or item.percent > best.percent:
                best = item
        if best is not None:
            items.append(best)
    return items


def _amount(value: int, key: str, unit: str) -> str:
    if key == "memoryMiB":
        return f"{value / 1024:g} {unit}"
    return f"{value} {unit}".strip()


def _percent(used: int, hard: int) -> int:
    if hard <= 0:
        return 100
    return min(100, round(100 * used / hard))


def mine(vms: Iterable[Mapping[str, Any]], user: str) -> list[Mapping[str, Any]]:
    """The VMs the console created for `user`."""
    return [vm for vm in vms if (vm["metadata"].get("annotations") or {}).get(tables.CREATED_BY) == user]


@dataclass(frozen=True)
class TreeLine:
    text: str
    mark: str  # good, bad, busy or "" for an object line


MARKS = {"✓": "good", "✗": "bad", "!": "busy", "?": "busy"}


def tree_lines(text: str) -> list[TreeLine]:
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip("│ ")
        lines.append(TreeLine(line, MARKS.get(stripped[:1], "")))
    return lines


def clusters(found: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    rows = []
    for cluster in sorted(found, key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"]["name"])):
        status = cluster.get("status") or {}
        rows.append(
            {
                "namespace": cluster["metadata"].get("namespace", ""),
                "name": cluster["metadata"]["name"],
                "phase": str(status.get("phase") or "-"),
            }
        )
    return rows
