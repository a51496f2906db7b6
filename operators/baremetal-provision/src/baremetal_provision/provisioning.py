"""Reconciling one BaremetalInstance through its BMC: provision, expire, deprovision.

Level-triggered: each trigger (creation, an edit, the guest's marks written by `serving`, a restart, the
deadline timer) observes the BMC, lets `phases.decide` choose one action, carries it out and observes
again until the instance waits for its guest. The power cycle that network-boots the server is recorded
in an annotation right after it happens, so a restart never repeats it. One lock per instance keeps the
timer and the change handlers from driving the same BMC at once.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from baremetal_provision import booting, markers, phases, reporting
from baremetal_provision.backends import bmc
from baremetal_provision.settings import Settings
from capfleet import errors, events, pausing, resources
from capfleet.kube import Kube

MAX_STEPS = 8
FINISHING = {"boot_from_disk", "expire"}


@dataclass
class Context:
    kube: Kube
    recorder: events.Recorder
    settings: Settings

    def connect(self, address: str, credentials: bmc.Credentials, verify: bool) -> bmc.BMC:
        return bmc.connect(
            address, credentials, verify=verify, ipmi_cipher_suite=self.settings.ipmi_cipher_suite
        )

    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, meta: Mapping[str, Any]) -> asyncio.Lock:
        return self.locks.setdefault(f"{meta.get('namespace')}/{meta['name']}", asyncio.Lock())


def _decoded(data: Mapping[str, str], key: str) -> str | None:
    value = data.get(key)
    return base64.b64decode(value).decode() if value else None


async def credentials(kube: Kube, namespace: str, spec: Mapping[str, Any]) -> bmc.Credentials:
    """username/password (and optional caBundle) from the BMC credentials Secret."""
    name = spec["bmc"]["credentialsSecretRef"]["name"]
    secret = await kube.get(resources.SECRETS, name, namespace)
    if secret is None:
        raise errors.DependencyMissing(
            f"BMC credentials Secret {name} not found", reason="CredentialsMissing"
        )
    data = secret.get("data") or {}
    username, password = _decoded(data, "username"), _decoded(data, "password")
    if not username or password is None:
        raise errors.InvalidSpec(
            f"Secret {name} needs keys username and password", reason="CredentialsInvalid"
        )
    return bmc.Credentials(username, password, _decoded(data, "caBundle"))


async def open_bmc(ctx: Context, body: Mapping[str, Any]) -> bmc.BMC:
    spec = body.get("spec") or {}
    address = spec["bmc"]["address"]
    bmc.parse_address(address)  # bad input is refused before any Secret or BMC is read
    creds = await credentials(ctx.kube, body["metadata"]["namespace"], spec)
    return ctx.connect(address, creds, not spec["bmc"].get("disableCertificateVerification", False))


async def wait_for_power(target: bmc.BMC, wanted: bmc.PowerState, within: float) -> bool:
    """Poll the BMC until the server's power state is `wanted`; False when `within` seconds pass first."""
    deadline = time.monotonic() + within
    while (await target.facts()).power_state != wanted:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(1.0)
    return True


async def _mark(ctx: Context, meta: Mapping[str, Any], key: str, value: str) -> None:
    patch = {"metadata": {"annotations": {key: value}}}
    await ctx.kube.patch(reporting.RESOURCE, meta["name"], patch, meta["namespace"])


async def ensure_token(ctx: Context, meta: Mapping[str, Any]) -> None:
    if not markers.annotations_of(meta).get(markers.TOKEN_SECRET):
        await _mark(ctx, meta, markers.TOKEN_SECRET, markers.new_token_secret())


def check_spec(spec: Mapping[str, Any]) -> None:
    if booting.normalize_mac(str(spec.get("bootMACAddress", ""))) is None:
        raise errors.InvalidSpec(f"invalid boot MAC {spec.get('bootMACAddress')!r}", reason="InvalidBootMAC")
    bmc.parse_address(str(spec["bmc"]["address"]))


async def reconcile(ctx: Context, body: Mapping[str, Any]) -> None:
    """Move the instance towards Provisioned (or Failed at its deadline); raises to retry."""
    meta, spec = body["metadata"], body.get("spec") or {}
    reporter = reporting.Reporter(ctx.kube, ctx.recorder, body)
    if pausing.hands_off(meta):
        await reporter.paused()
        return
    async with ctx.lock(meta):
        try:
            check_spec(spec)
            await ensure_token(ctx, meta)
            target = await open_bmc(ctx, body)
            try:
                await _drive(ctx, target, meta, spec, reporter)
            finally:
                await target.close()
        except errors.CapfleetError as exc:
            await reporter.failed(exc)
            raise


async def _drive(
    ctx: Context,
    target: bmc.BMC,
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    reporter: reporting.Reporter,
) -> None:
    timeout = int(spec.get("provisioningTimeoutSeconds", 1800))
    online = bool(spec.get("online", True))
    marks = phases.Marks.of(meta)
    disk_requested = False
    for _ in range(MAX_STEPS):
        facts = await target.facts()
        decision = phases.decide(
            facts,
            marks,
            timeout_seconds=timeout,
            now=datetime.now(UTC),
            online=online,
            disk_requested=disk_requested,
        )
        if decision.action not in FINISHING:  # their phase is reported once they are done
            await reporter.phase(decision.phase, facts.power_state, timeout)
        if decision.action == "power_off":
            await target.power_off(force=True)
            await wait_for_power(target, "Off", ctx.settings.power_wait_seconds)
        elif decision.action == "network_boot":
            await target.set_boot_device("pxe", once=True)
            await target.power_on()
            stamp = markers.now()
            await _mark(ctx, meta, markers.NETWORK_BOOTED, stamp)
            marks = replace(marks, network_booted_at=markers.parse_time(stamp))
        elif decision.action == "boot_from_disk":
            await target.set_boot_device("disk", once=False)
            disk_requested = True
        elif decision.action == "power_on":
            await target.power_on()
            await wait_for_power(target, "On", ctx.settings.power_wait_seconds)
        elif decision.action == "shut_down":
            await shut_down(ctx, target)
        elif decision.action == "expire":
            await target.power_off(force=True)
            await target.set_boot_device("disk", once=False)
            await wait_for_power(target, "Off", ctx.settings.power_wait_seconds)
        else:
            return
    raise errors.Waiting("the BMC has not reached the requested state yet", reason="BMCSettling")


async def shut_down(ctx: Context, target: bmc.BMC) -> None:
    """Graceful shutdown; the power is cut when the OS ignores it for `shutdown_seconds`."""
    await target.power_off(force=False)
    if not await wait_for_power(target, "Off", ctx.settings.shutdown_seconds):
        await target.power_off(force=True)
        await wait_for_power(target, "Off", ctx.settings.power_wait_seconds)


def needs_attention(body: Mapping[str, Any]) -> bool:
    """The timer's cheap check (no API or BMC call): a waiting instance ran out of time, or its
    installer's callback has not been acted on yet."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    if status.get("phase") in {"Failed", "Provisioned"}:
        return False
    marks = phases.Marks.of(body["metadata"])
    if not status.get("phase") and marks.network_booted_at is not None:
        return True  # status is a cache: lost (or not written yet), it is rebuilt from the marks and BMC
    if marks.called_back:
        return True
    timeout = int(spec.get("provisioningTimeoutSeconds", 1800))
    left = phases.remaining(marks, timeout_seconds=timeout, now=datetime.now(UTC))
    return left is not None and left <= 0


def needs_resync(body: Mapping[str, Any]) -> bool:
    """A provisioned instance is checked against its BMC now and then: the power state in status follows
    the BMC, and `spec.online` is enforced when someone powered the server on or off behind our back."""
    return (body.get("status") or {}).get("phase") == "Provisioned"


class CleaningInProgress(errors.Waiting):
    """The cleaner runs; its callback (an annotation) wakes the deletion handler before this delay."""

    retry_base = 5.0
    retry_cap = 15.0


async def deprovision(ctx: Context, body: Mapping[str, Any]) -> None:
    """Clean the server if asked (network-boot the cleaner, wait for its callback), power it off
    (gracefully, then forced) and put its boot device back on disk. Raises to be called again while
    the cleaner runs."""
    meta, spec = body["metadata"], body.get("spec") or {}
    if markers.for_move(meta):
        return
    if pausing.annotated(meta):
        raise errors.Waiting("paused: the server is powered off once the object is unpaused", reason="Paused")
    reporter = reporting.Reporter(ctx.kube, ctx.recorder, body)
    async with ctx.lock(meta):
        try:
            target = await open_bmc(ctx, body)
        except errors.InvalidSpec:
            return  # nothing can be reached with this spec; nothing to undo
        try:
            await _undo(ctx, target, meta, spec, reporter)
        finally:
            await target.close()
    ctx.locks.pop(f"{meta.get('namespace')}/{meta['name']}", None)


async def _undo(
    ctx: Context,
    target: bmc.BMC,
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    reporter: reporting.Reporter,
) -> None:
    timeout = int(spec.get("provisioningTimeoutSeconds", 1800))
    marks = phases.Marks.of(meta)
    clean = markers.cleans(meta, spec)
    if clean and phases.cleaning_expired(marks, timeout_seconds=timeout, now=datetime.now(UTC)):
        await reporter.cleaning_timed_out(timeout)
    disk_requested = False
    for _ in range(MAX_STEPS):
        facts = await target.facts()
        now = datetime.now(UTC)
        decision = phases.decide_deprovision(
            facts, marks, clean=clean, timeout_seconds=timeout, now=now, disk_requested=disk_requested
        )
        await reporter.phase(decision.phase, facts.power_state, timeout)
        if decision.action == "power_off":
            await target.power_off(force=True)
            await wait_for_power(target, "Off", ctx.settings.power_wait_seconds)
        elif decision.action == "network_boot":
            await target.set_boot_device("pxe", once=True)
            await target.power_on()
            stamp = markers.now()
            await _mark(ctx, meta, markers.CLEANING_BOOTED, stamp)
            marks = replace(marks, cleaning_booted_at=markers.parse_time(stamp))
        elif decision.action == "wait":
            raise CleaningInProgress("waiting for the cleaner to call back", reason="Cleaning")
        elif decision.action == "shut_down":
            await shut_down(ctx, target)
        elif decision.action == "boot_from_disk":
            await target.set_boot_device("disk", once=False)
            disk_requested = True
        else:
            return
    raise errors.Waiting("the BMC has not reached the requested state yet", reason="BMCSettling")
