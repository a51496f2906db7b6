"""What a controller watches, kept from its own watch events, so a reconcile reads without GETs.

A reconcile reads its object and what it depends on: capi-machine-glue's HybridMachine reads its Machine,
Cluster and HybridCluster, its children and their IPAddresses, about ten objects. The controller watches
them anyway (their changes enqueue it), and each event also lands here: the newest object, or that it is
gone. Reading here instead of the API server costs a few GETs per object instead of one per object read
per reconcile.

- A reconcile woken by an event reads here; what no event has shown yet it GETs from the API server.
- An object found that way is not kept: only events keep an entry current, and an object outside the
  controller's watches (another shard's, or an IPAddress its provider does not label) must be read afresh.
- "Not found" is kept for the kinds the controller creates (`remember_absence`): a child it has yet to
  create is then not asked for on every reconcile. Its creation brings an event that replaces the entry;
  an event that arrived while the GET was under way wins over the GET's answer.
- A child the controller has just created is kept as its creation answered, unless an event came first:
  a reconcile woken before the child's ADDED event then does not create it again.
- Each object is kept as its compact JSON text (`packed`), a fifth of the memory of its parsed dicts, and
  parsed again when read.
- The answer to the controller's own write of an object it watches (its status, a provider ID) is kept,
  and events older than it are passed over until one at least as new comes (as client-go's MutationCache
  does, comparing resourceVersions as numbers): otherwise a reconcile woken while the watch lags behind
  those writes reads the object from before them and writes them again.
- A reconcile woken by the resync timer or a retry reads from the API server: the net for what a watch
  can miss, such as an object deleted while the watch was re-listing.

Reads may lag the API server by an event. That is safe: writes are idempotent (create or get, merge
patches of what differs), and the event that brings the newer object enqueues the reconcile again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from capfleet.resources import Resource

Obj = Mapping[str, Any]
EntryKey = tuple[str, str, str, str]  # group, plural, namespace, name


class Kind(Protocol):
    """What names a kind here: capfleet's `Resource` and kopf's `resource` argument both have these."""

    @property
    def group(self) -> str: ...

    @property
    def plural(self) -> str: ...


class Reads(Protocol):
    """How a reconcile reads one object: the API client itself, or `CachedReads`."""

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None: ...


def entry_key(resource: Kind, namespace: str | None, name: str) -> EntryKey:
    return (resource.group, resource.plural, namespace or "", name)


def without_managed_fields(body: Obj) -> dict[str, Any]:
    """The object as kept: no `managedFields`, often half of an object's size and never read here."""
    meta = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    return {**body, "metadata": meta}


def resource_version(body: Obj) -> int | None:
    """The object's resourceVersion as a number, or None if it is not one."""
    try:
        return int(body["metadata"].get("resourceVersion") or "")
    except ValueError:
        return None


def packed(body: Obj) -> str:
    """The object as kept: its compact JSON text, without `managedFields`. Parsed into dicts, an object
    takes four to five times the memory of its text, and a controller keeps several objects per object it
    reconciles; a read parses the text again (a fresh copy)."""
    return json.dumps(without_managed_fields(body), separators=(",", ":"))


@dataclass
class WatchCache:
    """The newest object of each key the watches have shown, or None where a GET found none (for the
    kinds in `remember_absence`: (group, plural))."""

    remember_absence: frozenset[tuple[str, str]] = frozenset()
    _entries: dict[EntryKey, str | None] = field(default_factory=dict)
    # Each event's number, by key: a GET's "not found" is kept only if no event came while it was under
    # way. Deleted keys are forgotten (the cache does not grow with every object that ever lived), so
    # deletions are noted apart, and only while a GET is under way.
    _events: int = 0
    _last_event: dict[EntryKey, int] = field(default_factory=dict)
    _deletions: dict[EntryKey, int] = field(default_factory=dict)
    _gets_under_way: int = 0
    # The resourceVersion of each kept answer to the controller's own write, until an event catches up.
    _written: dict[EntryKey, int] = field(default_factory=dict)

    def seen(self, resource: Kind, body: Obj, *, deleted: bool = False) -> bool:
        """What a watch event says about `body`: its newest state, or (`deleted`) that it is gone; an
        event older than the controller's own last write of the object is passed over. Returns whether
        the event is news: False for the echo of the controller's own write (the very resourceVersion
        its answer had), which changes nothing it has not seen."""
        meta = body["metadata"]
        key = entry_key(resource, meta.get("namespace"), meta["name"])
        self._events += 1
        if deleted:
            self._entries.pop(key, None)
            self._last_event.pop(key, None)
            self._written.pop(key, None)
            if self._gets_under_way:
                self._deletions[key] = self._events
            return True
        self._last_event[key] = self._events
        written = self._written.get(key)
        if written is not None:
            version = resource_version(body)
            if version is not None and version < written:
                return True  # someone else's change from before that write: the write's answer holds it
            del self._written[key]
            if version == written:
                return False
        self._entries[key] = packed(body)
        return True

    def written(self, resource: Kind, body: Obj) -> None:
        """The answer to the controller's own write of `body`: kept, if events keep the object here, until an
        event at least as new arrives."""
        meta = body["metadata"]
        key = entry_key(resource, meta.get("namespace"), meta["name"])
        version, kept = resource_version(body), self._entries.get(key)
        if version is None or kept is None or (resource_version(json.loads(kept)) or 0) >= version:
            return
        self._written[key] = version
        self._entries[key] = packed(body)

    def created(self, resource: Kind, body: Obj) -> None:
        """An object the controller just created: kept unless an event already showed it, so a
        reconcile woken before its ADDED event does not create it again."""
        meta = body["metadata"]
        key = entry_key(resource, meta.get("namespace"), meta["name"])
        if self._entries.get(key) is None:
            self._entries[key] = packed(body)

    def __len__(self) -> int:
        return len(self._entries)

    def reader(self, reads: Reads) -> CachedReads:
        """Reads served from here, falling back to `reads` (the API client) for what is not here."""
        return CachedReads(self, reads)

    async def read(self, reads: Reads, resource: Resource, name: str, namespace: str | None) -> Obj | None:
        """The object as kept here; else as `reads` finds it, keeping a "not found" if the kind's absence
        is kept and no event for it came meanwhile."""
        key = entry_key(resource, namespace, name)
        if key in self._entries:
            kept = self._entries[key]
            return json.loads(kept) if kept is not None else None
        started = self._events
        self._gets_under_way += 1
        try:
            found = await reads.get(resource, name, namespace)
        finally:
            self._gets_under_way -= 1
        news = max(self._last_event.get(key, 0), self._deletions.get(key, 0)) > started
        if not self._gets_under_way:
            self._deletions.clear()
        if found is None and not news and (resource.group, resource.plural) in self.remember_absence:
            self._entries[key] = None
        return found


@dataclass
class CachedReads:
    """`Reads` through the cache: what a reconcile woken by a change is given."""

    cache: WatchCache
    fallback: Reads

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        return await self.cache.read(self.fallback, resource, name, namespace)
