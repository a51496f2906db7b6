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
- the process's own writes (told to the cache, `WatchCache.written`: the finalizer, a status patch) do
  not enqueue anything again: the cache knows the resourceVersion each write produced and the event
  that carries exactly that version is no news. Any other change has another version and is
  reconciled. No operator lists fields to ignore.

Nothing here writes status: the reconcile's recorder does, once per reconcile, and tells the cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from capfleet import errors, kube, metrics, runtime
from capfleet.controller import finalizers
from capfleet.controller.caches import Reads, WatchCache
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


def done_after(step: Callable[[C, Obj], Awaitable[None]]) -> Callable[[C, Obj], Awaitable[Result]]:
    """A reconcile (or finalize) that is done when `step` returns, and raises what it raises to wait."""

    async def run(ctx: C, obj: Obj) -> Result:
        await step(ctx, obj)
        return DONE

    return run


@dataclass(frozen=True)
class Watch:
    """Another kind whose events enqueue objects of the controller's kind: `keys` maps an object of it
    (as an event shows it) to the keys to reconcile, `groups` to the groups (`Controller.group`) in its
    namespace whose every member is to be reconciled (a CAPI Cluster: every machine of that cluster)."""

    resource: Resource
    keys: Callable[[Obj], Iterable[Key]] = lambda obj: ()
    groups: Callable[[Obj], Iterable[str]] = lambda obj: ()
    settle_seconds: float | None = None
    """How long the keys this watch enqueues wait for the events that follow (None: the controller's
    `settle_seconds`): a pool's counts written once for a burst of its addresses' events."""
    echoes: bool = False
    """Whether this process's own writes of that kind concern the controller too (a pool's Ready, written
    by the pool's controller, which the pool's claims wait for); by default they are no news."""


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
    serves: Callable[[Obj], bool] = lambda obj: True
    """Whether an object is this controller's to reconcile (others are neither reconciled nor finalized)."""
    needs_finalizer: Callable[[Obj], bool] = lambda obj: True
    """Whether an object will hold something outside that its deletion must give back."""
    helps_deletion: bool = False
    """Whether `finalize` also runs for an object being deleted without the controller's finalizer (one
    that waits for another's finalizer the controller lets go of: CAPI's ProtectAddress on an IPAddress)."""
    group: Callable[[Obj], str | None] = lambda obj: None
    """The group an object belongs to in its namespace (a machine's CAPI cluster), for `Watch.groups`."""
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    settle_seconds: float = 0.0
    """How long a key enqueued by an event waits for the events that follow it (a child created, its
    finalizer, its first status), so that they cost one reconcile."""
    workers: int = 8
    """How many objects are reconciled at once: reconciles mostly wait on the API server and backends."""


class TimedWait(errors.Waiting):
    """A wait whose end the reconcile knows (a grace period), not one that doubts what the watches showed:
    the key comes back after exactly its delay, unjittered, and reads from the watch cache."""


def same_kind(one: Resource, other: Resource) -> bool:
    """Whether two resources are one kind (kopf's and capfleet's resources may differ in version)."""
    return (one.group, one.plural) == (other.group, other.plural)


@dataclass
class Engine(Generic[C]):
    """A controller at work: its queue, the watch cache it shares with the operator's other controllers,
    its failures in a row by key, and its objects by group."""

    controller: Controller[C]
    cache: WatchCache = field(default_factory=WatchCache)
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    _failures: dict[Key, int] = field(default_factory=dict)
    _evented: set[Key] = field(default_factory=set)
    _groups: dict[Key, tuple[str | None, str]] = field(default_factory=dict)

    # Events.

    def seen(self, resource: Resource, event_type: str | None, obj: Obj) -> None:
        """A watch event: cached, then noticed (an engine alone with its cache)."""
        news = self.cache.seen(resource, obj, deleted=event_type == "DELETED")
        self.notice(resource, event_type, obj, news=news)

    def notice(self, resource: Resource, event_type: str | None, obj: Obj, *, news: bool = True) -> None:
        """A watch event of the controller's kind or of a watched one, already in the cache: the keys it
        concerns enqueued. Not news (the echo of this process's own write) enqueues nothing."""
        if same_kind(resource, self.controller.resource):
            self._noticed_own(event_type, obj, news)
        namespace = obj["metadata"].get("namespace")
        for watch in self.controller.watches:
            if same_kind(watch.resource, resource) and (news or watch.echoes):
                for key in watch.keys(obj):
                    self._enqueue(key, watch.settle_seconds)
                for group in watch.groups(obj):
                    for key in self.members(namespace, group):
                        self._enqueue(key, watch.settle_seconds)

    def _noticed_own(self, event_type: str | None, obj: Obj, news: bool) -> None:
        key = Key.of(obj)
        if event_type == "DELETED":
            self.queue.forget(key)
            self._failures.pop(key, None)
            self._groups.pop(key, None)
            self._evented.discard(key)
            return
        group = self.controller.group(obj) if self.controller.serves(obj) else None
        if group is None:
            self._groups.pop(key, None)
        else:
            self._groups[key] = (key.namespace, group)
        if news and self.controller.serves(obj):
            self._enqueue(key)

    def members(self, namespace: str | None, group: str) -> list[Key]:
        return [key for key, of in self._groups.items() if of == (namespace, group)]

    def _enqueue(self, key: Key, settle: float | None = None) -> None:
        self._evented.add(key)
        self.queue.add_after(key, self.controller.settle_seconds if settle is None else settle)

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
            if obj is None or not controller.serves(obj):
                self._failures.pop(key, None)
                return
            result = await self._run(ctx(reads), api, obj)
        except (Exception, asyncio.CancelledError) as exc:  # every failure is retried: the worker outlives it
            if isinstance(exc, asyncio.CancelledError) and cancelled():
                raise  # the worker itself is stopping
            # A CancelledError otherwise comes from a shared future another caller cancelled: this
            # reconcile failed like any other.
            error, outcome = as_capfleet_error(exc, controller.resource.kind, key)
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            backoff = error.delay(failures)
            if isinstance(error, TimedWait) and backoff is not None:
                delay = backoff  # its end is its own: jitter would only come back before it
                self._evented.add(key)
            else:
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
        present = controller.finalizer in finalizers.finalizers_of(obj)
        if finalizers.is_deleting(obj):
            if not present:
                return await controller.finalize(ctx, obj) if controller.helps_deletion else DONE
            result = await controller.finalize(ctx, obj)
            if result.requeue_after is None:
                answer = await finalizers.remove(api, controller.resource, obj, controller.finalizer)
                if answer is not None:
                    self.cache.written(controller.resource, answer)
            return result
        if not present and controller.needs_finalizer(obj):
            obj = await finalizers.add(api, controller.resource, obj, controller.finalizer)
            self.cache.written(controller.resource, obj)
        return await controller.reconcile(ctx, obj)


def as_capfleet_error(exc: BaseException, kind: str, key: Key) -> tuple[errors.CapfleetError, str]:
    """The capfleet error whose retry policy applies to a failed reconcile, and the outcome to count. An
    API server answer is retried by what it means (`runtime.api_error`, as for kopf's handlers); an
    unexpected failure as an unavailable backend is."""
    where = f"{kind} {key.namespace}/{key.name}" if key.namespace else f"{kind} {key.name}"
    if isinstance(exc, errors.CapfleetError):
        log.info("%s: %s: %s", where, exc.reason, exc.message)
        return exc, "permanent" if exc.retry_base is None else "retry"
    if isinstance(exc, kube.KubeError):
        error = runtime.api_error(exc)
        log.log(logging.INFO if exc.status == 409 else logging.WARNING, "%s: %s", where, error.message)
        return error, "retry" if exc.status == 409 else "error"
    log.error("%s: reconcile failed", where, exc_info=exc)
    return errors.BackendUnavailable(str(exc)), "error"


def cancelled() -> bool:
    """Whether the running task itself is being cancelled (its worker stops), rather than a future it
    awaited having been cancelled by someone else."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def run_workers(engine: Engine[C], ctx: Callable[[Reads], C], api: kube.Kube) -> None:
    """The controller's workers, until the queue is closed (`Engine.queue.close()`). A worker that ends
    otherwise (a bug past `process`'s own net) is logged and replaced: one worker's end never stops the
    others."""
    workers = {asyncio.ensure_future(engine.work(ctx, api)) for _ in range(engine.controller.workers)}
    try:
        while workers:
            ended, workers = await asyncio.wait(workers, return_when=asyncio.FIRST_COMPLETED)
            for worker in ended:
                if engine.queue.closed:
                    continue
                failure = worker.exception() if not worker.cancelled() else None
                log.error(
                    "a %s worker ended; started again", engine.controller.resource.kind, exc_info=failure
                )
                workers.add(asyncio.ensure_future(engine.work(ctx, api)))
    finally:
        for worker in workers:
            worker.cancel()
