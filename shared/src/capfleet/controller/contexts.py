"""The reconcile context of an operator on the engine: the kit's `reconciling.Context`, plus how this
reconcile reads and the watch cache.

Its API client is the engine's `RecordingKube` (`controller.writes`), so every write a reconcile makes
through `kube` (a status, a merge patch, a created child, the shared kit's marks) is told to the watch
cache: the write's own event enqueues nothing, and a reconcile that starts before that event arrives reads
what was written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from capfleet import reconciling
from capfleet.controller.caches import Reads, WatchCache
from capfleet.controller.watching import CACHE_KEY


@dataclass
class Context(reconciling.Context):
    cache: WatchCache = reconciling.in_memo(CACHE_KEY)
    reads: Reads = dataclasses.field(kw_only=True)
    """How this reconcile reads: the watch cache when an event brought it, else the API server."""
