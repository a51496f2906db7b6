"""The API client of an operator on the engine: every write it makes is told to the watch cache.

A controller must know its own writes when their events come back, or each write (a status, a finalizer,
a mark the shared kit puts on the object, such as `capfleet.secretholds`' record of the Secrets it holds)
brings one more reconcile of an object that has not changed. So the engine's startup replaces the API
client in memo with a `RecordingKube` around it: the answer to each patch, JSON patch, status patch and
deletion, and each object it creates, goes to the watch cache (`WatchCache.written`, `created`), which
then knows that write's event for what it is. Reads and everything else pass through unchanged.

A write whose event must bring a reconcile (a mark whose next pass must re-read what an outside system
holds) goes through `unrecorded`, the client itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from capfleet.controller.caches import WatchCache
from capfleet.kube import Kube, Obj, Propagation
from capfleet.resources import Resource


class RecordingKube(Kube):
    """`unrecorded` with its writes told to `cache`; every call goes to `unrecorded` (so a test's fake
    client can be wrapped too). One per process, so everything keyed by the client (the Secret batches of
    `capfleet.secretholds`) stays shared."""

    def __init__(self, unrecorded: Kube, cache: WatchCache) -> None:
        # Every call goes to `unrecorded`: its own client (`_api`), timeout and pool are the ones used.
        super().__init__(getattr(unrecorded, "_api", None), unrecorded.field_manager)  # type: ignore[arg-type]
        self.unrecorded, self.cache = unrecorded, cache

    def _written(self, resource: Resource, answer: Obj | None) -> Obj | None:
        if answer is not None and answer.get("kind") in (None, resource.kind):
            self.cache.written(resource, answer)
        return answer

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        return await self.unrecorded.get(resource, name, namespace)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return await self.unrecorded.list(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )

    async def apply(
        self, resource: Resource, body: Obj, namespace: str | None = None, *, force: bool = True
    ) -> Obj:
        applied = await self.unrecorded.apply(resource, body, namespace, force=force)
        self.cache.written(resource, applied)
        return applied

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        created = await self.unrecorded.create(resource, body, namespace)
        self.cache.created(resource, created)
        return created

    async def create_or_get(
        self, resource: Resource, body: Obj, namespace: str | None = None
    ) -> tuple[Obj, bool]:
        found, made = await self.unrecorded.create_or_get(resource, body, namespace)
        if made:
            self.cache.created(resource, found)
        return found, made

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        *,
        strategic: bool = False,
    ) -> Obj | None:
        answer = await self.unrecorded.patch(resource, name, patch, namespace, strategic=strategic)
        return self._written(resource, answer)

    async def json_patch(
        self, resource: Resource, name: str, operations: Sequence[Obj], namespace: str | None = None
    ) -> Obj | None:
        return self._written(
            resource, await self.unrecorded.json_patch(resource, name, operations, namespace)
        )

    async def patch_status(
        self, resource: Resource, name: str, status: Obj, namespace: str | None = None
    ) -> Obj | None:
        return self._written(resource, await self.unrecorded.patch_status(resource, name, status, namespace))

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Propagation | None = None,
        uid: str | None = None,
    ) -> Obj | None:
        answer = await self.unrecorded.delete(resource, name, namespace, propagation=propagation, uid=uid)
        return self._written(resource, answer)
