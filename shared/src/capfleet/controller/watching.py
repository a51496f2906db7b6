"""How an operator's controllers hear kopf's watch streams, and when their workers run.

kopf keeps doing what it does well: one watch stream per kind with its re-listing, label selectors for
shards, and the operator's lifecycle. `register` adds only `on.event` handlers (which write nothing to the
objects: no progress or last-handled annotations), one per kind however many controllers need it, and a
cleanup handler; it returns the startup step the operator's `runtime.run(connected=...)` runs once the API
client is in memo. That step makes the operator's `Engines` (one per controller, all sharing one watch
cache, both kept in the operator-wide memo) and starts their workers; kopf starts its watches only after
startup, and lists every object first, so every object is reconciled once at startup: the
level-triggered resync.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import kopf

from capfleet import reconciling
from capfleet.controller.caches import Reads, WatchCache
from capfleet.controller.engine import C, Controller, Engine, run_workers, same_kind
from capfleet.controller.writes import RecordingKube
from capfleet.kube import Kube
from capfleet.resources import Resource

ENGINES_KEY = "controller_engines"
CACHE_KEY = "controller_cache"


@dataclasses.dataclass
class Engines:
    """An operator's engines at work, with the watch cache they share."""

    cache: WatchCache
    engines: list[Engine[Any]]
    workers: list[asyncio.Future[None]] = dataclasses.field(default_factory=list)

    def seen(self, resource: Resource, event: kopf.RawEvent) -> None:
        """One watch event: into the shared cache once, then to every engine."""
        obj = event["object"]
        news = self.cache.seen(resource, obj, deleted=event["type"] == "DELETED")
        for engine in self.engines:
            engine.notice(resource, event["type"], obj, news=news)

    async def stop(self) -> None:
        for engine in self.engines:
            engine.queue.close()
        while self.workers:
            await self.workers.pop()


def kinds_of(controllers: Sequence[Controller[Any]]) -> list[Resource]:
    """Every kind the controllers reconcile or watch, once each."""
    found: list[Resource] = []
    for controller in controllers:
        for resource in [controller.resource, *(w.resource for w in controller.watches)]:
            if not any(same_kind(resource, known) for known in found):
                found.append(resource)
    return found


Tune = Callable[[kopf.Memo, Controller[C]], Controller[C]]


def register(
    controllers: Sequence[Controller[C]],
    context: Callable[[kopf.Memo, Reads], C],
    *,
    remember_absence: Sequence[Resource] = (),
    tune: Tune[C] | None = None,
    registry: kopf.OperatorRegistry | None = None,
) -> Callable[[kopf.Memo], Awaitable[None]]:
    """Run `controllers` in this operator: each reconcile gets `context(memo, reads)`; `tune` adjusts a
    controller from the settings startup read (intervals); the cache keeps "not found" for the kinds in
    `remember_absence` (those the controllers create). Returns the startup step (`runtime.run`'s
    `connected`)."""

    def hear(resource: Resource) -> None:
        @kopf.on.event(*resource.watch, id=f"hear-{resource.plural}", registry=registry)
        async def heard(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
            reconciling.from_memo(memo, ENGINES_KEY, Engines).seen(resource, event)

    for resource in kinds_of(controllers):
        hear(resource)

    async def start(memo: kopf.Memo) -> None:
        if ENGINES_KEY in memo:  # kopf retries startup when a later step failed
            return
        cache = WatchCache(frozenset((r.group, r.plural) for r in remember_absence))
        api = RecordingKube(reconciling.from_memo(memo, reconciling.KUBE_KEY, Kube), cache)
        memo[reconciling.KUBE_KEY] = api  # every reconcile's writes are told to the cache
        tuned = [tune(memo, c) if tune is not None else c for c in controllers]
        running = Engines(cache, [Engine(controller, cache) for controller in tuned])
        memo[CACHE_KEY], memo[ENGINES_KEY] = cache, running
        for engine in running.engines:
            running.workers.append(
                asyncio.ensure_future(run_workers(engine, lambda reads: context(memo, reads), api))
            )

    # Registered before the runtime's cleanup, so it runs first: the workers stop before the API client
    # they use is closed.
    @kopf.on.cleanup(id="controller-engines-stop", registry=registry)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        running = memo.get(ENGINES_KEY)
        if isinstance(running, Engines):
            await running.stop()

    return start
