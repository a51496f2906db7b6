"""The engine: one level-triggered reconcile per object, with finalizers and retries handled in one place.

An operator declares a `Controller` per kind it reconciles: `reconcile(ctx, obj)` brings the world in
line with the object, `finalize(ctx, obj)` gives back what it holds outside before the object goes; both
return a `Result`. The engine does the rest, as controller-runtime does for Go controllers:

- watch events only enqueue keys (`queues.WorkQueue`: deduplicated, one reconcile of a key at a time);
  events of other kinds enqueue the keys their mapping functions name (`Watch`: a child enqueues its
  owner), and every event lands in the shared watch cache (`caches.WatchCache`) reconciles read from;
- a worker takes a key, reads the object as it is now, and calls `finalize` when it is being deleted and
  still carries the controller's finalizer, `reconcile` otherwise; the finalizer is added before the first
  reconcile (when `needs_finalizer` says the object will hold something outside) and removed once
  `finalize` returns a result with nothing left to wait for;
- a capfleet error is retried after its own backoff (`CapfleetError.delay`, by the key's count of
  failures in a row); any other exception is retried as an unavailable backend is; success resets the
  count and requeues after the result's delay, else after the resync period, the net for a lost event;
- the process's own writes to the object (told to `Engine.wrote`: the finalizer, the status patch) do
  not enqueue it again: the engine remembers the resourceVersion each write produced and passes over the
  event that carries exactly that version. Any other change has another version and is reconciled. No
  operator lists fields to ignore.

Nothing here writes status: the reconcile's recorder does, once per reconcile, and tells `Engine.wrote`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from capfleet import errors, kube, metrics
from capfleet.controller.caches import EntryKey, Reads, WatchCache, entry_key, resource_version
from capfleet.controller.queues import WorkQueue
from capfleet.resources import Resource

log = logging.getLogger("capfleet.controller")
C = TypeVar("C")
Obj = Mapping[str, Any]
DEFAULT_RESYNC_SECONDS = 600.0


@dataclass(frozen=True)
class Key:
    """An object of the controller's kind."""

    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: Obj) -> Key:
        meta = obj["metadata"]
        return cls(meta.get("namespace"), meta["name"])


@dataclass(frozen=True)
class Result:
    """What a reconcile asks next: to be run again after `requeue_after` seconds, or (None) only when
    something changes. For `finalize`, a delay means the deletion is not finished: the finalizer stays."""

    requeue_after: float | None = None


DONE = Result()


@dataclass(frozen=True)
class Watch:
    """Another kind whose events enqueue objects of the controller's kind: `keys` maps an object of it
    (as an event shows it) to the keys to reconcile."""

    resource: Resource
    keys: Callable[[Obj], Iterable[Key]]


def owners(kind: str) -> Callable[[Obj], list[Key]]:
    """The mapping of a child to its owners of `kind` (by ownerReference, in the child's namespace)."""

    def keys(child: Obj) -> list[Key]:
        meta = child["metadata"]
        refs = meta.get("ownerReferences") or []
        return [Key(meta.get("namespace"), ref["name"]) for ref in refs if ref.get("kind") == kind]

    return keys


@dataclass
class Controller(Generic[C]):
    """One kind's reconciler, as an operator declares it."""

    resource: Resource
    finalizer: str
    reconcile: Callable[[C, Obj], Awaitable[Result]]
    finalize: Callable[[C, Obj], Awaitable[Result]]
    watches: Sequence[Watch] = ()
    needs_finalizer: Callable[[Obj], bool] = lambda obj: True
    """Whether an object will hold something outside that its deletion must give back."""
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    workers: int = 4


def same_kind(one: Resource, other: Resource) -> bool:
    """Whether two resources are one kind (kopf's and capfleet's resources may differ in version)."""
    return (one.group, one.plural) == (other.group, other.plural)


def is_deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def finalizers_of(obj: Obj) -> list[str]:
    return list(obj["metadata"].get("finalizers") or [])


@dataclass
class Engine(Generic[C]):
    """A controller at work: its queue, its cache, its failures in a row by key, its own writes."""

    controller: Controller[C]
    cache: WatchCache = field(default_factory=WatchCache)
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    _failures: dict[Key, int] = field(default_factory=dict)
    _own_versions: dict[EntryKey, int] = field(default_factory=dict)
    _evented: set[Key] = field(default_factory=set)

    # Events.

    def seen(self, resource: Resource, event_type: str | None, obj: Obj) -> None:
        """A watch event of the controller's kind or of a watched one: cached, then its keys enqueued."""
        deleted = event_type == "DELETED"
        self.cache.seen(resource, obj, deleted=deleted)
        if same_kind(resource, self.controller.resource):
            key = Key.of(obj)
            if deleted:
                self.queue.forget(key)
                self._failures.pop(key, None)
            elif not self._is_own_write(obj):
                self._enqueue(key)
            return
        for watch in self.controller.watches:
            if same_kind(watch.resource, resource):
                for key in watch.keys(obj):
                    self._enqueue(key)

    def _enqueue(self, key: Key) -> None:
        self._evented.add(key)
        self.queue.add(key)

    def wrote(self, resource: Resource, answer: Obj) -> None:
        """The API server's answer to a write of this process: its event will not enqueue the object."""
        version = resource_version(answer)
        if version is None:
            return
        meta = answer["metadata"]
        self._own_versions[entry_key(resource, meta.get("namespace"), meta["name"])] = version
        self.cache.written(resource, answer)

    def _is_own_write(self, obj: Obj) -> bool:
        """Whether the event shows exactly what a write of this process made. An older event is someone
        else's change that this process may not have reconciled yet: it is not passed over."""
        meta = obj["metadata"]
        key = entry_key(self.controller.resource, meta.get("namespace"), meta["name"])
        own, version = self._own_versions.get(key), resource_version(obj)
        if own is None or version is None or version < own:
            return False
        del self._own_versions[key]
        return version == own

    # Workers.

    async def work(self, ctx: Callable[[Reads], C], api: kube.Kube) -> None:
        """One worker: reconcile keys until the queue is closed."""
        while (key := await self.queue.get()) is not None:
            try:
                await self.process(key, ctx, api)
            finally:
                self.queue.done(key)

    async def process(self, key: Key, ctx: Callable[[Reads], C], api: kube.Kube) -> None:
        """One reconcile of `key`, with its outcome turned into when the key comes back. A key enqueued by
        an event reads what the watches showed; one that came back by its timer (a retry, a requeue, the
        resync) reads from the API server, the net for what a watch can miss."""
        controller, started = self.controller, time.monotonic()
        by_event = key in self._evented
        self._evented.discard(key)
        reads: Reads = self.cache.reader(api) if by_event else api
        try:
            obj = await reads.get(controller.resource, key.name, key.namespace)
            if obj is None:
                self._failures.pop(key, None)
                return
            result = await self._run(ctx(reads), api, obj)
        except Exception as exc:  # every failure is retried: the worker must outlive it
            error, outcome = as_capfleet_error(exc, controller.resource.kind, key)
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            backoff = error.delay(failures)
            delay = controller.resync_seconds if backoff is None else errors.jittered(backoff)
            del error  # its traceback holds every frame of the failed reconcile
        else:
            self._failures.pop(key, None)
            outcome = "success"
            delay = controller.resync_seconds if result.requeue_after is None else result.requeue_after
        metrics.record_reconcile(controller.resource.kind, outcome, time.monotonic() - started)
        self.queue.add_after(key, delay)

    async def _run(self, ctx: C, api: kube.Kube, obj: Obj) -> Result:
        controller = self.controller
        present = controller.finalizer in finalizers_of(obj)
        if is_deleting(obj):
            if not present:
                return DONE
            result = await controller.finalize(ctx, obj)
            if result.requeue_after is None:
                await self._set_finalizer(api, obj, add=False)
            return result
        if not present and controller.needs_finalizer(obj):
            obj = await self._set_finalizer(api, obj, add=True)
        return await controller.reconcile(ctx, obj)

    async def _set_finalizer(self, api: kube.Kube, obj: Obj, *, add: bool) -> Obj:
        """Add or remove the controller's finalizer: a merge patch of the whole list with the object's
        resourceVersion, so a list changed meanwhile is a conflict (retried) rather than overwritten."""
        meta, finalizer = obj["metadata"], self.controller.finalizer
        current = finalizers_of(obj)
        wanted = [*current, finalizer] if add else [f for f in current if f != finalizer]
        patch = {"metadata": {"finalizers": wanted, "resourceVersion": meta["resourceVersion"]}}
        resource = self.controller.resource
        answer = await api.patch(resource, meta["name"], patch, meta.get("namespace"))
        if answer is None:
            raise errors.Waiting(f"{resource.kind} {meta['name']} is gone")
        self.wrote(resource, answer)
        return answer


def as_capfleet_error(exc: Exception, kind: str, key: Key) -> tuple[errors.CapfleetError, str]:
    """The capfleet error whose retry policy applies to a failed reconcile, and the outcome to count.
    An API error or an unexpected failure is retried as an unavailable backend is."""
    where = f"{kind} {key.namespace}/{key.name}" if key.namespace else f"{kind} {key.name}"
    if isinstance(exc, errors.CapfleetError):
        log.info("%s: %s: %s", where, exc.reason, exc.message)
        return exc, "permanent" if exc.retry_base is None else "retry"
    if isinstance(exc, kube.Conflict):
        log.info("%s: changed meanwhile, again: %s", where, exc)
        return errors.BackendUnavailable(str(exc)), "retry"
    if isinstance(exc, kube.KubeError):
        log.warning("%s: API error: %s", where, exc)
    else:
        log.error("%s: reconcile failed", where, exc_info=exc)
    return errors.BackendUnavailable(str(exc)), "error"


async def run_workers(engine: Engine[C], ctx: Callable[[Reads], C], api: kube.Kube) -> None:
    """The controller's workers, until the queue is closed (`Engine.queue.close()`)."""
    workers = [asyncio.ensure_future(engine.work(ctx, api)) for _ in range(engine.controller.workers)]
    try:
        await asyncio.gather(*workers)
    finally:
        for worker in workers:
            worker.cancel()
