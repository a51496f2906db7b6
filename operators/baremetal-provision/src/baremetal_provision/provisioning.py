"""Reconciling one BaremetalInstance through its BMC: provision, expire, deprovision.

Level-triggered: each trigger (creation, an edit, the guest's marks written by `serving`, a restart, the
deadline timer) observes the BMC, lets `phases` choose one action, carries it out (`ACTIONS`) and
observes again until the instance waits for its guest. The power cycle that network-boots the server is
recorded in an annotation right after it happens, so a restart never repeats it; a failed attempt is
counted and its marks cleared in one patch after the server is off, so a restart in between powers it
off again (harmlessly) and counts it once. One lock per instance
keeps the timer and the change handlers from driving the same BMC at once.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import capfleet.patience
from baremetal_provision import bmcpolicy, markers, phases
from baremetal_provision.backends import bmc
from baremetal_provision.backends.base import BMC, Credentials, PowerState, SystemFacts
from baremetal_provision.contexts import INSTANCES, Context
from baremetal_provision.reporting import InstanceStatus
from capfleet import errors, pausing, secretholds
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstance
from capfleet.kube import Kube

MAX_STEPS = 8
FINISHING = frozenset({"boot_from_disk", "expire", "network_boot"})
"""Actions whose phase is reported once they are done, not before (provisioning only): the network boot's
report then carries the attempt it opened."""


def _decoded(data: Mapping[str, str], key: str) -> str | None:
    value = data.get(key)
    return base64.b64decode(value).decode() if value else None


async def credentials(kube: Kube, holder: secretholds.Holder, name: str) -> Credentials:
    """username/password (and optional caBundle) from the BMC credentials Secret `name`, held by `holder`
    (the instance) until its deletion has powered the server off."""
    secret = await secretholds.get_secret(kube, str(holder.namespace), name)
    if secret is None:
        raise errors.DependencyMissing(
            f"BMC credentials Secret {name} not found", reason="CredentialsMissing"
        )
    await secretholds.hold(kube, holder, [secret])
    data = secret.get("data") or {}
    username, password = _decoded(data, "username"), _decoded(data, "password")
    if not username or password is None:
        raise errors.InvalidSpec(
            f"Secret {name} needs keys username and password", reason="CredentialsInvalid"
        )
    return Credentials(username, password, _decoded(data, "caBundle"))


async def open_bmc(ctx: Context, instance: BaremetalInstance) -> BMC:
    given = instance.spec.bmc
    await bmcpolicy.admit(given)  # bad or untrusted addresses are refused before any Secret is read
    creds = await credentials(ctx.kube, holder_of(instance), given.credentials_secret_ref.name)
    return ctx.connect(given.address, creds, not given.disable_certificate_verification)


async def wait_for_power(target: BMC, wanted: PowerState, within: float) -> bool:
    """Poll the BMC until the server's power state is `wanted`; False when `within` seconds pass first."""
    deadline = time.monotonic() + within
    while (await target.facts()).power_state != wanted:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(1.0)
    return True


async def _annotate(ctx: Context, meta: Mapping[str, Any], changes: Mapping[str, str | None]) -> None:
    """Set (or, with None, remove) annotations of the instance in one patch."""
    patch = {"metadata": {"annotations": dict(changes)}}
    await ctx.kube.patch(INSTANCES, meta["name"], patch, meta["namespace"])


@dataclass
class Pass:
    """One reconcile's drive of the BMC: the instance, the BMC, and what the pass changed on the way
    (marks written, a disk boot requested), so each decision sees it without re-reading the object."""

    ctx: Context
    target: BMC
    instance: BaremetalInstance
    status: InstanceStatus
    boot_mark: str
    """The mark the network-boot action writes: the installer's, or on deletion the cleaner's."""
    clean: bool = False
    disk_requested: bool = False
    fresh: bool = False
    """Whether the instance was read afresh in this pass (`refresh`)."""
    meta: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.meta = dict(self.instance.metadata)

    @property
    def marks(self) -> phases.Marks:
        return phases.Marks.of(self.meta)

    @property
    def goal(self) -> phases.Goal:
        return phases.Goal.of(self.instance.spec)

    @property
    def timeout_seconds(self) -> int:
        return self.instance.spec.provisioning_timeout_seconds

    async def mark(self, key: str) -> None:
        await self.annotate({key: markers.now()})

    async def annotate(self, changes: Mapping[str, str | None]) -> None:
        """Set (or, with None, remove) annotations in one patch, and see them in this pass."""
        await _annotate(self.ctx, self.meta, changes)
        kept = {k: v for k, v in markers.annotations_of(self.meta).items() if k not in changes}
        self.meta["annotations"] = {**kept, **{k: v for k, v in changes.items() if v is not None}}

    async def refresh(self) -> bool:
        """Read the instance afresh, once per pass, before its first action on the BMC; False when it is
        gone. A pass may start from an event the watch delivered late and then wait for the instance's
        lock: a pass holding the instance as it was before its network boot would boot the server a
        second time within one attempt, and its installer, refused the callback key the first boot had
        fetched (it is served once), could not call back until the attempt's deadline. Decisions rest on
        the marks, so they must be the latest before acting."""
        found = await self.ctx.current(self.instance)
        if found is None:
            return False
        self.instance = found
        self.meta = dict(found.metadata)
        self.fresh = True
        return True

    async def wait_for_power(self, wanted: PowerState) -> None:
        await wait_for_power(self.target, wanted, self.ctx.settings.power_wait_seconds)


async def _power_off(run: Pass) -> None:
    await run.target.power_off(force=True)
    await run.wait_for_power("Off")


async def _network_boot(run: Pass) -> None:
    token = run.ctx.tokens.of(run.meta, cleaning=run.boot_mark == markers.CLEANING_BOOTED)
    if token is not None:  # for the boot server, ahead of its index
        run.ctx.attempts.opened(token, str(run.meta.get("namespace") or ""), str(run.meta["name"]))
    opened = markers.annotations_of(run.meta).get(markers.BOOT_WINDOW)
    if run.boot_mark == markers.NETWORK_BOOTED and not opened:
        await run.mark(markers.BOOT_WINDOW)  # before the power-on: the server may ask at once
    await run.target.set_boot_device("pxe", once=True)
    await run.target.power_on()
    await run.mark(run.boot_mark)


async def _boot_from_disk(run: Pass) -> None:
    await run.target.set_boot_device("disk", once=False)
    run.disk_requested = True


async def _power_on(run: Pass) -> None:
    await run.target.power_on()
    await run.wait_for_power("On")


async def _first_boot(run: Pass) -> None:
    await _power_on(run)
    await run.mark(markers.DISK_BOOTED)


async def _ensure_off(run: Pass) -> None:
    """Off, asking only when it is not: the ramdisk powers a server off itself, and some BMCs refuse a
    forced power-off of a server that is off."""
    if (await run.target.facts()).power_state != "Off":
        await _power_off(run)


async def _fail_attempt(run: Pass) -> None:
    await _ensure_off(run)
    marks = run.marks
    failure = phases.failure(marks, run.timeout_seconds)
    cleared: dict[str, str | None] = dict.fromkeys(markers.ATTEMPT_MARKS)
    failed = marks.failed_attempts + 1
    await run.annotate({**cleared, markers.FAILED_ATTEMPTS: str(failed), markers.LAST_FAILURE: failure})
    await run.status.attempt_failed(failed, run.goal.max_attempts, failure)


async def _shut_down(run: Pass) -> None:
    await shut_down(run.ctx, run.target)


async def _expire(run: Pass) -> None:
    await _ensure_off(run)
    await run.target.set_boot_device("disk", once=False)


ACTIONS: dict[phases.Action, Callable[[Pass], Awaitable[None]]] = {
    "power_off": _power_off,
    "network_boot": _network_boot,
    "boot_from_disk": _boot_from_disk,
    "power_on": _power_on,
    "first_boot": _first_boot,
    "fail_attempt": _fail_attempt,
    "shut_down": _shut_down,
    "expire": _expire,
}
"""What each action does to the BMC; `wait` and `done` end the pass."""


async def shut_down(ctx: Context, target: BMC) -> None:
    """Graceful shutdown; the power is cut when the OS ignores it for `shutdown_seconds`."""
    await target.power_off(force=False)
    if not await wait_for_power(target, "Off", ctx.settings.shutdown_seconds):
        await target.power_off(force=True)
        await wait_for_power(target, "Off", ctx.settings.power_wait_seconds)


Decide = Callable[[SystemFacts, Pass], phases.Decision]


def provisioning_decision(facts: SystemFacts, run: Pass) -> phases.Decision:
    return phases.decide(facts, run.marks, run.goal, now=datetime.now(UTC), disk_requested=run.disk_requested)


def deprovisioning_decision(facts: SystemFacts, run: Pass) -> phases.Decision:
    return phases.decide_deprovision(
        facts,
        run.marks,
        clean=run.clean,
        timeout_seconds=run.timeout_seconds,
        now=datetime.now(UTC),
        disk_requested=run.disk_requested,
    )


async def drive(run: Pass, decide: Decide, report_after: Collection[str] = ()) -> phases.Decision:
    """Observe, decide, act, until the decision is to wait or done (returned). The status is written where
    the pass ends, and before an action only when it starts a phase (not for those in `report_after`),
    so a slow action shows what it is doing: the power flips in between are not written (they would be
    a good part of the status writes). Raises Waiting when the BMC does not settle in MAX_STEPS."""
    reported: phases.Phase | None = None
    for _ in range(MAX_STEPS):
        facts = await run.target.facts()
        decision = decide(facts, run)
        if ACTIONS.get(decision.action) is not None and not run.fresh:
            if not await run.refresh():
                return dataclasses.replace(decision, action="wait")
            decision = decide(facts, run)  # on the marks as they are now
        action = ACTIONS.get(decision.action)
        starts_phase = decision.phase != reported and decision.action not in report_after
        if action is None or starts_phase:
            await run.status.phase(decision.phase, facts.power_state, run.marks, run.goal)
            reported = decision.phase
        if action is None:
            return decision
        opens_window = decision.action == "network_boot" and run.boot_mark == markers.NETWORK_BOOTED
        marks = markers.before_acting(run.meta, opens_window)
        if marks:
            await run.annotate(marks)
        await action(run)
    raise errors.Waiting("the BMC has not reached the requested state yet", reason="BMCSettling")


def check_spec(instance: BaremetalInstance) -> None:
    """What the schema cannot check: the BMC address must be one this operator can reach."""
    bmc.parse_address(instance.spec.bmc.address)


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    """Move the instance towards Provisioned (or Failed at its deadline); raises to retry."""
    instance = kinds.BAREMETAL_INSTANCE.parse(body)
    status = InstanceStatus(ctx, body)
    if pausing.hands_off(instance.metadata):
        await status.paused()
        return
    if markers.detached(instance.metadata):
        await status.detached()
        return
    async with ctx.lock(instance.metadata):
        try:
            await _provision(ctx, instance, status)
        except errors.CapfleetError as exc:
            await status.failed(exc)
            raise


async def _provision(ctx: Context, instance: BaremetalInstance, status: InstanceStatus) -> None:
    check_spec(instance)
    target = await open_bmc(ctx, instance)
    try:
        run = Pass(ctx, target, instance, status, boot_mark=markers.NETWORK_BOOTED)
        await drive(run, provisioning_decision, report_after=FINISHING)
    finally:
        await target.close()


def in_flight(body: Mapping[str, Any]) -> bool:
    """Between a network boot and the end of provisioning (Provisioned or Failed): the only time
    `needs_attention` can say yes, read from the raw object (kopf asks on every watch event)."""
    phase = (body.get("status") or {}).get("phase")
    return phase not in {"Failed", "Provisioned"} and bool(
        markers.annotations_of(body["metadata"]).get(markers.NETWORK_BOOTED)
    )


def needs_attention(body: Mapping[str, Any]) -> bool:
    """The timer's cheap check (no API or BMC call): a waiting instance ran out of time, or its
    installer's callback has not been acted on yet."""
    instance = kinds.BAREMETAL_INSTANCE.parse(body)
    phase = instance.status.phase if instance.status is not None else None
    if phase in {"Failed", "Provisioned"}:
        return False
    marks = phases.Marks.of(instance.metadata)
    if not phase and marks.network_booted_at is not None:
        return True  # status is a cache: lost (or not written yet), it is rebuilt from the marks and BMC
    if marks.called_back or marks.failure_reported:
        return True
    timeout = instance.spec.provisioning_timeout_seconds
    left = phases.remaining(marks, timeout_seconds=timeout, now=datetime.now(UTC))
    return left is not None and left <= 0


def needs_resync(body: Mapping[str, Any]) -> bool:
    """A provisioned instance is checked against its BMC now and then: the power state in status follows
    the BMC, and `spec.online` is enforced when someone powered the server on or off behind our back.
    Read from the raw object (kopf asks on every watch event)."""
    return (body.get("status") or {}).get("phase") == "Provisioned"


class CleaningInProgress(errors.Waiting):
    """The cleaner runs: the deletion looks again after this delay, unless its callback comes first."""

    retry_base = 5.0
    retry_cap = 15.0


# While the cleaner runs, the deletion handler waits for its callback itself (the boot server in this
# process says when it came; another replica's is seen at the next look) rather than raising for kopf to
# call it again: each of kopf's retries is two patches of its progress on the instance.
CLEANING_PATIENCE_SECONDS = 600.0


async def deprovision(
    ctx: Context, body: Mapping[str, Any], *, patience: float = CLEANING_PATIENCE_SECONDS
) -> None:
    """Clean the server if asked (network-boot the cleaner, wait for its callback), power it off
    (gracefully, then forced) and put its boot device back on disk. While the cleaner runs it waits for
    the callback (`patience.wait_out`, woken by the boot server, else looking again every
    `CleaningInProgress` backoff), and after `patience` seconds raises to be called again. An instance
    that never acted on its BMC (a wrong password, an unreachable BMC) or is detached is deleted without
    asking the BMC anything. Last, the credentials Secret is let go of (a run after that only lets go
    again)."""
    meta = body["metadata"]
    namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
    tries = 0

    async def attempt(_by_wakeup: bool) -> None:
        nonlocal tries
        # Read again after a wait: the boot server marked the cleaner's callback meanwhile.
        current = body if tries == 0 else await ctx.kube.get(INSTANCES, name, namespace)
        tries += 1
        if current is not None:
            await _deprovision_and_let_go(ctx, current)

    await capfleet.patience.wait_out(attempt, ctx.attempts.callback(namespace, name), patience)


async def _deprovision_and_let_go(ctx: Context, body: Mapping[str, Any]) -> None:
    instance = kinds.BAREMETAL_INSTANCE.parse(body)
    await secretholds.release(ctx.kube, holder_of(instance), lambda: _deprovision(ctx, instance, body))


def holder_of(instance: BaremetalInstance) -> secretholds.Holder:
    return secretholds.Holder(INSTANCES, instance.metadata)


async def _deprovision(ctx: Context, instance: BaremetalInstance, body: Mapping[str, Any]) -> None:
    meta = instance.metadata
    if pausing.moving(meta):
        return
    if markers.detached(meta) or not markers.touched(meta):
        # Nothing to undo, or a person said to leave the BMC: deletion never waits for a BMC here.
        ctx.forget(meta)
        return
    if pausing.annotated(meta):
        raise errors.Waiting("paused: the server is powered off once the object is unpaused", reason="Paused")
    status = InstanceStatus(ctx, body)
    async with ctx.lock(meta):
        clean = markers.cleans(meta, instance.spec)
        try:
            target = await open_bmc(ctx, instance)
        except (errors.InvalidSpec, errors.DependencyMissing) as exc:
            # The server was acted on: it may be running what the cluster put on it. Deleting the object
            # without powering it off (and cleaning it) would release it as it is, so the deletion waits
            # and says what would let it go on.
            blocked = errors.Waiting(deletion_blocked(exc, clean), reason=DELETION_BLOCKED)
            await status.failed(blocked)
            raise blocked from exc
        try:
            await _undo(Pass(ctx, target, instance, status, boot_mark=markers.CLEANING_BOOTED, clean=clean))
        finally:
            await target.close()
    ctx.forget(meta)


DELETION_BLOCKED = "DeletionBlocked"


def deletion_blocked(cause: errors.CapfleetError, clean: bool) -> str:
    """Why a touched server's deletion cannot go on, and the two ways out."""
    work = "powered off and cleaned" if clean else "powered off"
    return (
        f"the server must be {work} before it is released, but its BMC cannot be used: {cause.reason}: "
        f"{cause.message}; fix the spec or its Secret, or annotate {markers.DETACHED}=true to delete it "
        "leaving the server as it is"
    )


async def _undo(run: Pass) -> None:
    timeout = run.timeout_seconds
    if run.clean and phases.cleaning_expired(run.marks, timeout_seconds=timeout, now=datetime.now(UTC)):
        await run.status.cleaning_timed_out(timeout)
    final = await drive(run, deprovisioning_decision)
    if final.action == "wait":
        raise CleaningInProgress("waiting for the cleaner to call back", reason="Cleaning")
