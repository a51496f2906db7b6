"""The reconcile kit: the pieces every capfleet operator's reconcile is built from, so all five speak alike.

- `Settings`: an operator's options, one frozen dataclass read once at startup from `CAPFLEET_*`
  variables (a bad value stops the operator with one line naming the variable, before any handler runs);
- `Context`: what one reconcile needs (API client, Event recorder, settings), built from kopf's memo;
- `from_memo`: the one typed accessor for what startup put in the operator-wide memo;
- `Recorder`: a reconcile's conditions found step by step, written as a status cache on success and on
  failure, with a summarised Ready and an Event when Ready changes.

Retries are not here: a reconcile raises a `capfleet.errors` error and `runtime.reconciler` turns it into
kopf's retry with the error's backoff, the one retry policy of the fleet.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from capfleet import conditions, errors, events, metrics, pausing, statuses
from capfleet.api.base import Condition
from capfleet.conditions import Update
from capfleet.kube import Kube
from capfleet.resources import Resource

T = TypeVar("T")

ENV_PREFIX = "CAPFLEET_"
KUBE_KEY, EVENTS_KEY, SETTINGS_KEY = "kube", "events", "settings"


def setting(default: Any, *, env: str | None = None, parse: Callable[[str], Any] | None = None) -> Any:
    """A settings field read from `env` (default: `CAPFLEET_<FIELD NAME>`), converted by `parse` (default:
    by the field's type)."""
    return dataclasses.field(default=default, metadata={"env": env, "parse": parse})


@dataclass(frozen=True)
class Settings:
    """Base of every operator's settings: subclass it as a frozen dataclass of typed, defaulted fields."""

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Field name → environment variable."""
        return {f.name: f.metadata.get("env") or ENV_PREFIX + f.name.upper() for f in dataclasses.fields(cls)}

    @classmethod
    def load(cls, environ: Mapping[str, str]) -> Self:
        """The settings from `environ`; ValueError naming the variable when a value does not parse."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        variables = cls.variables()
        for field in dataclasses.fields(cls):
            raw = environ.get(variables[field.name], "")
            if raw == "":
                continue
            parse = field.metadata.get("parse") or _parser(hints[field.name])
            try:
                values[field.name] = parse(raw)
            except ValueError as exc:
                raise ValueError(f"{variables[field.name]}={raw!r}: {exc}") from None
        return cls(**values)


def _parser(annotation: Any) -> Callable[[str], Any]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        [inner] = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _parser(inner)
    if annotation is bool:
        return _boolean
    if annotation in (int, float, str):
        return annotation  # type: ignore[no-any-return]
    raise TypeError(f"no parser for settings of type {annotation}: give the field one")


def _runtime_type(annotation: Any) -> type[Any]:
    """The class an annotation checks against: `dict[str, X]` is checked as `dict`."""
    origin = typing.get_origin(annotation)
    return origin if isinstance(origin, type) else annotation


def _boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("not a boolean (true/false)")


@functools.cache
def _memo_fields(context: type[Context]) -> tuple[tuple[str, str, type[Any]], ...]:
    """A context class's `in_memo` fields: (name, memo key, class). Resolved once per class: resolving
    the annotations is costly, and every reconcile would repeat it."""
    hints = typing.get_type_hints(context)
    return tuple(
        (f.name, f.metadata["memo"], _runtime_type(hints[f.name]))
        for f in dataclasses.fields(context)
        if "memo" in f.metadata
    )


def from_memo(memo: Mapping[str, Any], key: str, kind: type[T]) -> T:
    """What startup put in the operator-wide memo under `key`; a clear error when startup did not run."""
    found = memo.get(key)
    if not isinstance(found, kind):
        raise RuntimeError(f"the operator did not start: no {kind.__name__} in memo[{key!r}]")
    return found


def in_memo(key: str) -> Any:
    """A `Context` field that `Context.from_memo` fills from `memo[key]`, checked against its type."""
    return dataclasses.field(metadata={"memo": key})


@dataclass
class Context:
    """What every reconcile of an operator needs; operators subclass it to add their own shared parts,
    declared as `name: Type = in_memo(KEY)` fields (their settings: `in_memo(SETTINGS_KEY)`)."""

    kube: Kube
    recorder: events.Recorder

    @staticmethod
    def parts(memo: Mapping[str, Any]) -> tuple[Kube, events.Recorder]:
        """The API client and Event recorder the runtime created at startup."""
        return from_memo(memo, KUBE_KEY, Kube), from_memo(memo, EVENTS_KEY, events.Recorder)

    @classmethod
    def from_memo(cls, memo: Mapping[str, Any], **rest: Any) -> Self:
        """The context of one reconcile from what startup put in the operator-wide memo (kopf gives each
        object a shallow copy of it, so shared parts must exist before the first object is handled);
        `rest` gives fields that are not in memo."""
        kube, recorder = cls.parts(memo)
        fields = _memo_fields(cls)  # type: ignore[arg-type]  # a class is hashable; mypy sees Self
        found = {name: from_memo(memo, key, kind) for name, key, kind in fields}
        return cls(kube=kube, recorder=recorder, **found, **rest)

    async def write_status(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        fields: Mapping[str, Any],
        updates: list[Update],
        ready_steps: list[str] | None,
    ) -> Mapping[str, Any]:
        """Patch the status keys that change (conditions, with a summarised Ready when `ready_steps` are
        given) through the status subresource, post an Event when Ready changes, time the steps just done
        (`capfleet_step_duration_seconds`). Only what differs is written: an idle fleet makes no API
        writes. Returns the object as it now stands (the API server's answer when something was written),
        so a later write in the same reconcile sends only what differs and carries its resourceVersion."""
        meta = body["metadata"]
        current = body.get("status") or {}
        desired = {
            **fields,
            "conditions": statuses.with_conditions(
                current, updates, generation=meta.get("generation"), ready_steps=ready_steps
            ),
        }
        changed = statuses.differences(current, desired)
        answer = None
        if changed:
            answer = await self.kube.patch_status(resource, meta["name"], changed, meta.get("namespace"))
        found = conditions.parse(desired["conditions"])
        if ready_steps and "conditions" in changed and meta.get("creationTimestamp"):
            before = conditions.parse(current.get("conditions"))
            done = statuses.steps_done(before, found, ready_steps, meta["creationTimestamp"])
            metrics.record_steps(resource.kind, done)
        ready = conditions.find(found, conditions.READY)
        if ready is not None:
            await self.announce(body, ready)
        return answer if answer is not None else {**body, "status": {**current, **desired}}

    async def announce(self, body: Mapping[str, Any], ready: Condition) -> None:
        """Post an Event when Ready becomes True (Normal) or False (Warning, and again when the reason
        changes; the recorder drops repeats). Ready=Unknown is a step still waiting on another (a child,
        CAPI's bootstrap data): the condition says so, and an Event each time the step it waits on moved
        on would be a Warning for progress and one more write per step. Operators whose Events tell
        another story (a phase, an error's own reason) override this."""
        if ready.status == "True":
            await self.recorder.transition(body, "Normal", ready.reason, ready.message)
        elif ready.status == "False":
            await self.recorder.transition(body, "Warning", ready.reason, ready.message)


class Recorder:
    """One reconcile's progress: conditions found step by step and status fields, written as a whole on
    success (`finish`) and on the first failing step (`step` records the error's reason, then re-raises
    it for the one retry policy). `steps` are the conditions Ready summarises, in order."""

    def __init__(
        self, ctx: Context, resource: Resource, body: Mapping[str, Any], steps: list[str] | None
    ) -> None:
        self.ctx, self.resource, self.body, self.steps = ctx, resource, body, steps
        self.updates: list[Update] = [pausing.condition(False)]
        self.fields: dict[str, Any] = {}

    def note(self, *updates: Update) -> None:
        self.updates.extend(updates)

    async def step(self, condition: str, work: Awaitable[T], reason: str, message: str = "") -> T:
        """Await `work`; on success `condition` is True with `reason`, on a capfleet error it is False with
        the error's reason and message, written at once."""
        try:
            result = await work
        except errors.CapfleetError as exc:
            self.updates.append(Update.false(condition, exc.reason, exc.message))
            await self.finish()
            raise
        self.updates.append(Update.true(condition, reason, message))
        return result

    async def finish(self) -> Mapping[str, Any]:
        return await self.ctx.write_status(self.resource, self.body, self.fields, self.updates, self.steps)

    async def paused(self) -> Mapping[str, Any]:
        """Write only the Paused condition: a paused or moving object is left untouched otherwise."""
        self.updates = [pausing.condition(True)]
        return await self.finish()
