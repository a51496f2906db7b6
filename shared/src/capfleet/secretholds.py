"""Credential Secrets outlive the objects that need them to give back what they hold outside Kubernetes.

`kubectl delete namespace` deletes everything in it at once, Secrets first as often as not. A NetboxDevice
then cannot release its device, a BaremetalInstance cannot power its server off, a LibvirtVM cannot
undefine its domain: their finalizers fail on a missing Secret that can no longer be created in a
terminating namespace, and the namespace stays Terminating for ever while NetBox, the BMCs and the
hypervisors keep what the cluster held.

So every object whose deletion talks to an outside system (a *holder*) puts a finalizer of its own on each
Secret it reads credentials from, before it creates anything outside, and takes it off as the last step of
its deletion. One finalizer per holder, not one per operator: holders come and go concurrently, and a
shared finalizer would need a count no one can update atomically. The finalizer names the holder (kind,
namespace and name, not its UID), so a Secret moved by `clusterctl move` together with its holders is
still let go of by the moved holders. Which Secrets an object holds is recorded on it (an annotation)
before the finalizer is added, so a holder whose Secret reference changed, or that was killed between the
two writes, still lets go of every one. Letting go is recorded on the holder too, before the finalizers
come off: kopf may run a deletion handler again after it succeeded (when it could not yet remove its own
finalizer, a timer of the object still exiting), and by then the Secrets may be gone, so a deletion runs
through `release`, which gives back only when no earlier run has let go. `get_secret` reads a credentials
Secret and turns the 403 of a namespace that did not opt in (no RoleBinding from deploy/tenant there) into
a condition that says so.

The right to read those Secrets is deleted with the namespace too: it is the operator's RoleBinding of
deploy/tenant, `capfleet-<operator>-secrets`, in the Secrets' namespace. A Secret kept is no use to a
holder that may no longer read it or take its finalizer off, so the holder holds that RoleBinding the same
way, with the same finalizer: put on before the first Secret of its namespace, taken off after the last.
Which namespaces' RoleBindings it holds is recorded on the holder as well (a second annotation). With the
cluster-wide opt-in there is no such RoleBinding and nothing to hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet import errors, resources
from capfleet.batching import Batch
from capfleet.kube import Forbidden, Invalid, Kube, Obj
from capfleet.resources import ROLEBINDINGS, Resource

DOMAIN = "holds.capfleet.dev"
HELD_ANNOTATION = "capfleet.dev/held-secrets"
"""On a holder: the Secrets it holds, as comma-separated `namespace/name`."""
LET_GO_ANNOTATION = "capfleet.dev/secrets-let-go"
"""On a holder being deleted: it gave back what it held outside and let go of its Secrets."""
GRANTS_ANNOTATION = "capfleet.dev/held-grants"
"""On a holder: the namespaces whose RoleBinding `capfleet-<operator>-secrets` it holds, comma-separated."""
GRANT_SUFFIX = "-secrets"
NAME_MAX = 63
_QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SECRET_FORBIDDEN = "SecretForbidden"


async def get_secret(kube: Kube, namespace: str, name: str) -> Obj | None:
    """A Secret by name, or None when it does not exist; read-only, as callers at once share one read
    (`Batches.read`). An operator may read Secrets only where deploy/tenant bound its secrets ClusterRole
    (everywhere with the cluster-wide opt-in): elsewhere the 403 becomes a condition that says so, retried
    like a missing Secret."""
    try:
        return await _batches_of(kube).read(namespace, name)
    except Forbidden as exc:
        message = (
            f"may not read Secret {namespace}/{name} ({exc.message}); to let the operators read "
            f"Secrets there, apply deploy/tenant in namespace {namespace}"
        )
        raise errors.DependencyMissing(message, reason=SECRET_FORBIDDEN) from exc


@dataclass(frozen=True)
class Holder:
    """An object that needs Secrets to release what it holds outside: its resource and metadata."""

    resource: Resource
    metadata: Mapping[str, Any]

    @property
    def namespace(self) -> str | None:
        namespace = self.metadata.get("namespace")
        return str(namespace) if namespace else None

    @property
    def finalizer(self) -> str:
        return finalizer_of(self.resource.kind, self.namespace, str(self.metadata["name"]))


def finalizer_of(kind: str, namespace: str | None, name: str) -> str:
    """`<namespace>.<kind>.holds.capfleet.dev/<name>`: a valid finalizer for any object name (names longer
    than a finalizer's name part keep their start and end in a hash)."""
    prefix = f"{namespace}.{kind.lower()}.{DOMAIN}" if namespace else f"{kind.lower()}.{DOMAIN}"
    if len(name) > NAME_MAX or not _QUALIFIED_NAME.match(name):
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[: NAME_MAX - 13].rstrip('-_.')}-{digest}"
    return f"{prefix}/{name}"


def held(metadata: Mapping[str, Any]) -> list[str]:
    """The `namespace/name` of every Secret the object recorded it holds, in recorded order."""
    value = (metadata.get("annotations") or {}).get(HELD_ANNOTATION) or ""
    return [key for key in value.split(",") if key.count("/") == 1 and all(key.split("/"))]


def held_grants(metadata: Mapping[str, Any]) -> list[str]:
    """The namespaces whose Secrets RoleBinding the object recorded it holds, in recorded order."""
    value = (metadata.get("annotations") or {}).get(GRANTS_ANNOTATION) or ""
    return [namespace for namespace in value.split(",") if namespace]


def grant_of(kube: Kube, namespace: str) -> str:
    """The key of the RoleBinding (deploy/tenant's) that lets this operator read Secrets in `namespace`:
    `capfleet-<operator>-secrets`, named after the operator's field manager `capfleet-<operator>`."""
    return f"{namespace}/{kube.field_manager}{GRANT_SUFFIX}"


def namespaces_of(keys: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(key.split("/")[0] for key in keys))


def key_of(secret: Mapping[str, Any]) -> str:
    meta = secret["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def held_after(recorded: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """What the annotation must list while the holder takes `wanted`: everything recorded (let go of only
    once the wanted ones are held) and the wanted ones, without repeats."""
    return list(dict.fromkeys([*recorded, *wanted]))


def needs_finalizer(secret: Mapping[str, Any], finalizer: str) -> bool:
    """Whether `finalizer` is to be added: missing, and the Secret not being deleted (the API server
    refuses new finalizers on an object being deleted; a Secret already going cannot be kept)."""
    meta = secret["metadata"]
    return finalizer not in (meta.get("finalizers") or []) and not meta.get("deletionTimestamp")


async def hold(kube: Kube, holder: Holder, secrets: Sequence[Mapping[str, Any]]) -> None:
    """Hold exactly `secrets` (as just read) for `holder`: record them, add the holder's finalizer to each,
    then let go of the Secrets it held before and no longer uses. Idempotent; no API call when nothing
    changes."""
    recorded, granted = held(holder.metadata), held_grants(holder.metadata)
    wanted = list(dict.fromkeys(key_of(secret) for secret in secrets))
    listed = held_after(recorded, wanted)
    grants = held_after(granted, namespaces_of(wanted))
    if listed != recorded or grants != granted:
        await _record(kube, holder, listed, grants)
    # The right to read and let go of a namespace's Secrets, held before the first of them.
    for namespace in grants:
        if namespace not in granted:
            await _batches_of(kube).change(grant_of(kube, namespace), ADD, holder.finalizer, ROLEBINDINGS)
    for secret in secrets:
        if needs_finalizer(secret, holder.finalizer):
            await _batches_of(kube).change(key_of(secret), ADD, holder.finalizer)
    stale = [key for key in listed if key not in wanted]
    stale_grants = [namespace for namespace in grants if namespace not in namespaces_of(wanted)]
    if stale or stale_grants:
        await _let_go_of(kube, holder, stale, stale_grants)
        await _record(kube, holder, wanted, namespaces_of(wanted))


async def ever_held(kube: Kube, holder: Holder) -> bool:
    """Whether the holder ever recorded a Secret, as the API server has it now: one that never did never
    read its connection Secret, so it never reached the system that Secret opens and holds nothing there
    (its deletion has nothing to give back, even when the Secret never existed)."""
    meta = holder.metadata
    current = await kube.get(holder.resource, str(meta["name"]), holder.namespace)
    return bool(held((current or {"metadata": meta})["metadata"]))


async def release(kube: Kube, holder: Holder, give_back: Callable[[], Awaitable[None]]) -> None:
    """A holder's deletion: `give_back()` what it holds outside (raising to be called again), then let go
    of its Secrets; once an earlier run has let go, only let go again."""
    if not await _already_let_go(kube, holder):
        await give_back()
    await let_go(kube, holder)


async def let_go(kube: Kube, holder: Holder) -> None:
    """Record that the holder let go, then take its finalizer off every Secret it recorded: the last step
    of its deletion, once what it held outside is given back. The holder is read again: the deletion
    itself may have recorded a Secret after kopf read the object."""
    meta = holder.metadata
    current = await kube.get(holder.resource, str(meta["name"]), holder.namespace)
    if current is not None and LET_GO_ANNOTATION not in (current["metadata"].get("annotations") or {}):
        patch = {"metadata": {"annotations": {LET_GO_ANNOTATION: "true"}}}
        await kube.patch(holder.resource, str(meta["name"]), patch, holder.namespace)
    latest = current["metadata"] if current is not None else meta
    await _let_go_of(
        kube,
        holder,
        held_after(held(meta), held(latest)),
        held_after(held_grants(meta), held_grants(latest)),
    )


async def _already_let_go(kube: Kube, holder: Holder) -> bool:
    """Whether an earlier run of the holder's deletion already gave back what it held outside and let go
    of its Secrets (which may be gone since): then it only lets go again. Read from the API server, as a
    handler run again may have been given the object as it was before that run's writes."""
    meta = holder.metadata
    current = await kube.get(holder.resource, str(meta["name"]), holder.namespace)
    return LET_GO_ANNOTATION in ((current or {"metadata": meta})["metadata"].get("annotations") or {})


async def _let_go_of(kube: Kube, holder: Holder, keys: Sequence[str], grants: Sequence[str] = ()) -> None:
    """Take the holder's finalizer off the Secrets `keys`, then off the RoleBindings that let it do so."""
    batches = _batches_of(kube)
    for key in keys:
        await batches.change(key, REMOVE, holder.finalizer)
    for namespace in grants:
        await batches.change(grant_of(kube, namespace), REMOVE, holder.finalizer, ROLEBINDINGS)


ADD = "finalizers"
REMOVE = "$deleteFromPrimitiveList/finalizers"


class Batches:
    """What the callers of one process ask of one Secret at once, in as few requests: reads answered by
    one GET, and finalizer changes written as one patch per batch (`capfleet.batching`: while one patch is
    in flight, the changes asked meanwhile wait and go together in the next). A Secret shared by hundreds
    of holders (one NetBox connection, one BMC password for a rack) would otherwise be as many requests at
    once for one object, each patch rewriting its list of finalizers: under load, most of them time out."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._changes: dict[tuple[Resource, str, str], Batch[str, None]] = {}
        self._reads: dict[str, asyncio.Future[Obj | None]] = {}

    async def read(self, namespace: str, name: str) -> Obj | None:
        """The Secret as one GET in flight reads it for every caller that asks meanwhile: claims and servers
        reconciling at once would each read the one shared Secret, and on a busy API server those GETs queue
        past their timeout."""
        key = f"{namespace}/{name}"
        flight = self._reads.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self.kube.get(resources.SECRETS, name, namespace))
            self._reads[key] = flight
            flight.add_done_callback(functools.partial(self._landed, key))
        # Shielded: a caller cancelled while it waits must not cancel the others' read.
        return await asyncio.shield(flight)

    def _landed(self, key: str, flight: asyncio.Future[Obj | None]) -> None:
        if self._reads.get(key) is flight:
            del self._reads[key]
        if not flight.cancelled():
            flight.exception()  # retrieved: every caller may have left before it failed

    async def change(
        self, key: str, direction: str, finalizer: str, resource: Resource = resources.SECRETS
    ) -> None:
        """Add (`ADD`) or remove (`REMOVE`) `finalizer` on the Secret (or `resource`) `key`, with the
        changes others ask for meanwhile; raises what the patch that carried it raised."""
        batch = self._changes.get((resource, key, direction))
        if batch is None:
            write = functools.partial(self._write, resource, key, direction)
            batch = self._changes[(resource, key, direction)] = Batch(write, FINALIZERS_PER_PATCH)
        await batch.get(finalizer)

    async def _write(self, resource: Resource, key: str, direction: str, finalizers: list[str]) -> list[None]:
        change = {direction: list(dict.fromkeys(finalizers))}
        await _change_finalizers(self.kube, resource, key, change)
        return [None for _ in finalizers]


FINALIZERS_PER_PATCH = 1000
_BATCHES: weakref.WeakKeyDictionary[Kube, Batches] = weakref.WeakKeyDictionary()


def _batches_of(kube: Kube) -> Batches:
    """The batches of one API client (one per operator process and event loop)."""
    found = _BATCHES.get(kube)
    if found is None:
        found = _BATCHES[kube] = Batches(kube)
    return found


async def _change_finalizers(kube: Kube, resource: Resource, key: str, change: dict[str, Any]) -> None:
    namespace, name = key.split("/")
    # Invalid: being deleted since our read (no finalizer may be added then); it cannot be held any more.
    # A missing object (a RoleBinding under the cluster-wide opt-in) is answered None: nothing to hold.
    with contextlib.suppress(Invalid):
        await kube.patch(resource, name, {"metadata": change}, namespace, strategic=True)


async def _record(kube: Kube, holder: Holder, keys: Sequence[str], grants: Sequence[str]) -> None:
    meta = holder.metadata
    annotations = {HELD_ANNOTATION: ",".join(keys) or None, GRANTS_ANNOTATION: ",".join(grants) or None}
    await kube.patch(
        holder.resource, str(meta["name"]), {"metadata": {"annotations": annotations}}, holder.namespace
    )
