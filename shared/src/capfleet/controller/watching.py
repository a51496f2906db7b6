"""How an `Engine` hears kopf's watch streams, and when its workers run.

kopf keeps doing what it does well: one watch stream per kind with its re-listing, label selectors for
shards, and the operator's lifecycle. The engine registers only `on.event` handlers (which write nothing
to the objects: no progress or last-handled annotations) and a startup and a cleanup handler that start
and stop its workers. kopf lists every object when a watch starts, so every object is reconciled once at
startup: the level-triggered resync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kopf

from capfleet import reconciling
from capfleet.controller.caches import Reads
from capfleet.controller.engine import C, Engine, run_workers
from capfleet.kube import Kube
from capfleet.resources import Resource


def register(
    engine: Engine[C],
    context: Callable[[kopf.Memo, Reads], C],
    registry: kopf.OperatorRegistry | None = None,
) -> None:
    """Feed `engine` the events of its kind and of the kinds it watches, and run its workers from
    startup to cleanup, each reconcile with `context(memo, reads)`."""
    controller = engine.controller
    name = controller.resource.kind.lower()

    def hear(resource: Resource) -> None:
        @kopf.on.event(*resource.watch, id=f"{name}-hears-{resource.plural}", registry=registry)
        async def heard(event: kopf.RawEvent, **_: Any) -> None:
            engine.seen(resource, event["type"], event["object"])

    hear(controller.resource)
    for watch in controller.watches:
        if watch.resource != controller.resource:
            hear(watch.resource)
    running: list[asyncio.Future[None]] = []

    @kopf.on.startup(id=f"{name}-workers", registry=registry)
    async def start(memo: kopf.Memo, **_: Any) -> None:
        api = reconciling.from_memo(memo, reconciling.KUBE_KEY, Kube)
        running.append(asyncio.ensure_future(run_workers(engine, lambda reads: context(memo, reads), api)))

    @kopf.on.cleanup(id=f"{name}-workers-stop", registry=registry)
    async def stop(**_: Any) -> None:
        engine.queue.close()
        while running:
            await running.pop()
