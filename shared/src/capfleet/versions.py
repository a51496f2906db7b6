"""Reading an object once per version.

kopf asks about the same object version several times per event: each handler's `when` filter, each
index, the record of what it handled, then the handler itself, each with a pydantic parse of its own.
An object's `(uid, resourceVersion)` names one content for good, so what a pure function reads from it
can be kept: `per_version` remembers the latest answers (an object without both fields, as tests build,
is read every time). Tests that build two contents under one version call `forget()` between them.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

R = TypeVar("R")
RECENT_VERSIONS = 256
"""How many versions each reader remembers: the objects kopf works on at once (its answers may hold the
object, so not many more)."""


_MEMORIES: list[OrderedDict[tuple[str, str], Any]] = []


def forget() -> None:
    """Forget every answer remembered so far."""
    for memory in _MEMORIES:
        memory.clear()


def version_of(body: Mapping[str, Any]) -> tuple[str, str] | None:
    meta = body.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    return (str(uid), str(version)) if uid and version else None


def per_version(
    read: Callable[[Mapping[str, Any]], R], size: int = RECENT_VERSIONS
) -> Callable[[Mapping[str, Any]], R]:
    """`read`, answered from memory for an object version it read lately. `read` must be pure: its
    answer may be handed out again, for another copy of the same version."""
    recent: OrderedDict[tuple[str, str], R] = OrderedDict()
    _MEMORIES.append(recent)

    @functools.wraps(read)
    def remembered(body: Mapping[str, Any]) -> R:
        key = version_of(body)
        if key is None:
            return read(body)
        if key in recent:
            recent.move_to_end(key)
            return recent[key]
        answer = recent[key] = read(body)
        if len(recent) > size:
            recent.popitem(last=False)
        return answer

    return remembered
