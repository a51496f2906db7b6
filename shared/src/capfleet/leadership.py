"""Leader election over a `coordination.k8s.io` Lease, so an operator can run as two replicas.

kopf's own peering is no hand-over: peers of equal priority all pause, and a killed peer's entry keeps a
survivor paused for the peering's lifetime. capfleet's operators do what client-go's controllers do
instead: every replica tries to hold one Lease (`capfleet-<operator>` in the operator's namespace); the
holder renews it every `retry_period` and runs kopf; the others serve their liveness endpoint and wait.
A standby takes the Lease once it has seen no renewal for `duration` by its own clock (never comparing
clocks across machines). A holder that could not renew within `renew_deadline` (shorter than `duration`,
so before anyone may take over) exits at once, as controller-runtime's managers do, and its Deployment
restarts it as a standby. A holder that stops cleanly gives the Lease up, so the standby starts at once.

The decisions are pure functions of the Lease as read (`observe`, `may_take`, `claim`); `LeaderElector`
does the I/O. With `--leader-label`, the holder's pod carries LEADER_LABEL while it leads, so a Service can
send traffic (baremetal-provision's boot server, which only the holder runs) to the leader alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from capfleet.kube import Conflict, Kube, KubeError
from capfleet.resources import LEASES, PODS

logger = logging.getLogger("capfleet.leadership")
LEADER_LABEL = "capfleet.dev/leader"


async def label_pod(kube: Kube, namespace: str, pod: str, leading: bool) -> None:
    """Put LEADER_LABEL on this replica's pod (`leading`) or take it off: a standby starting in a pod
    that led before a crash takes off what the crashed process left."""
    patch = {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}}
    if await kube.patch(PODS, pod, patch, namespace) is None:
        raise KubeError(404, "NotFound", f"pod {namespace}/{pod} (POD_NAME) does not exist")


@dataclass(frozen=True)
class Timings:
    """client-go's defaults: a standby takes over at most `duration` + `retry_period` after the last renewal
    it saw."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")


@dataclass(frozen=True)
class Observation:
    """What a replica last saw of the Lease, and when by its own monotonic clock it saw it change."""

    holder: str | None
    renewed: str | None
    seen_at: float


def holder_identity() -> str:
    """This replica's name in the Lease: the pod's host name and a random suffix, as client-go does."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def observe(lease: dict[str, Any] | None, previous: Observation | None, now: float) -> Observation:
    """The observation after reading `lease`: its clock restarts whenever the holder or renewal changed."""
    spec = (lease or {}).get("spec") or {}
    holder, renewed = spec.get("holderIdentity") or None, spec.get("renewTime")
    if previous is not None and (previous.holder, previous.renewed) == (holder, renewed):
        return previous
    return Observation(holder, renewed, now)


def may_take(observation: Observation, me: str, now: float, duration: float) -> bool:
    """Whether `me` may write itself into the Lease: it is free, ours, or unrenewed for `duration`."""
    if observation.holder in (None, me):
        return True
    return now - observation.seen_at >= duration


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(lease: dict[str, Any], me: str, timings: Timings, moment: datetime) -> dict[str, Any]:
    """The merge patch that takes or renews `lease` for `me`, valid only against the version read."""
    spec = lease.get("spec") or {}
    stamp = micro_time(moment)
    taking = spec.get("holderIdentity") != me
    patch_spec: dict[str, Any] = {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(timings.duration)),
        "renewTime": stamp,
    }
    if taking:
        patch_spec["acquireTime"] = stamp
        transitions = int(spec.get("leaseTransitions") or 0)
        patch_spec["leaseTransitions"] = transitions + 1 if spec.get("holderIdentity") else transitions
    return {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": patch_spec}


def new_lease(name: str, me: str, timings: Timings, moment: datetime) -> dict[str, Any]:
    stamp = micro_time(moment)
    return {
        "apiVersion": LEASES.api_version,
        "kind": LEASES.kind,
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": me,
            "leaseDurationSeconds": max(1, round(timings.duration)),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


class LeadershipLost(Exception):
    """The Lease could not be renewed within the renew deadline: another replica may take it now."""


class LeaderElector:
    """Takes, holds and gives up one Lease for one replica.

    `renewed` is when the last successful write of the Lease *began*: a standby's clock can only have
    started after that, so this replica stops acting `renew_deadline` after it, never later. A watchdog
    thread ends the process at that moment even if the event loop is blocked.
    """

    def __init__(
        self, kube: Kube, namespace: str, name: str, me: str | None = None, timings: Timings = Timings()
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.me = me or holder_identity()
        self.timings = timings
        self.renewed: float | None = None
        self._observation: Observation | None = None
        self._holding = threading.Event()

    @property
    def held_by_another(self) -> bool:
        return self._observation is not None and self._observation.holder not in (None, self.me)

    async def try_take(self) -> bool:
        """One attempt to take or renew the Lease; False when another holds it or the attempt failed."""
        began = time.monotonic()
        try:
            lease = await self.kube.get(LEASES, self.name, self.namespace)
            if lease is None:
                body = new_lease(self.name, self.me, self.timings, datetime.now(UTC))
                await self.kube.create(LEASES, body, self.namespace)
                self._observation = observe(body, None, began)
            else:
                now = time.monotonic()
                self._observation = observe(lease, self._observation, now)
                if not may_take(self._observation, self.me, now, self.timings.duration):
                    return False
                patch = claim(lease, self.me, self.timings, datetime.now(UTC))
                if await self.kube.patch(LEASES, self.name, patch, self.namespace) is None:
                    return False  # deleted since read
        except Conflict:
            return False  # another replica wrote first; read again next time
        except KubeError as exc:
            logger.warning("leader election: lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self.renewed = began
        return True

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        logger.info("leader election: %s waits for lease %s/%s", self.me, self.namespace, self.name)
        while not await self._attempt(self.timings.renew_deadline):  # noqa: ASYNC110 - the protocol polls
            await asyncio.sleep(self.timings.retry_period)
        logger.info("leader election: %s holds lease %s/%s", self.me, self.namespace, self.name)

    async def hold(self) -> None:
        """Renew the Lease every retry period; raise `LeadershipLost` once another replica holds it or a
        renew deadline passed without a renewal."""
        self._holding.set()
        watchdog = threading.Thread(target=self._watch, name="leader-election-watchdog", daemon=True)
        watchdog.start()
        while True:
            await asyncio.sleep(self.timings.retry_period)
            if await self._attempt(self._deadline() - time.monotonic()):
                continue
            if self.held_by_another:
                raise LeadershipLost(f"lease {self.namespace}/{self.name} is held by {self._observation}")
            if time.monotonic() >= self._deadline():
                raise LeadershipLost(f"{self.me} could not renew lease {self.namespace}/{self.name} in time")

    async def release(self) -> None:
        """Give the Lease up if this replica still holds it, so a standby need not wait for it to expire.
        Call it once `hold` has ended: from here on nothing renews, and the watchdog stands down."""
        self._holding.clear()
        for _ in range(2):  # a renewal that was in flight may have changed it since read
            try:
                lease = await self.kube.get(LEASES, self.name, self.namespace)
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.me:
                    return
                patch = {
                    "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                    "spec": {"holderIdentity": None},
                }
                await self.kube.patch(LEASES, self.name, patch, self.namespace)
                return
            except Conflict:
                continue
            except KubeError as exc:
                logger.warning(
                    "leader election: lease %s/%s not released: %s", self.namespace, self.name, exc
                )
                return

    def _deadline(self) -> float:
        return (self.renewed or 0.0) + self.timings.renew_deadline

    async def _attempt(self, limit: float) -> bool:
        """`try_take`, given up after `limit` seconds (an API server that hangs)."""
        try:
            async with asyncio.timeout(max(0.0, limit)):
                return await self.try_take()
        except TimeoutError:
            return False

    def _watch(self) -> None:
        """Ends the process at the renew deadline even when the event loop cannot run `hold`."""
        while self._holding.is_set():
            left = self._deadline() - time.monotonic()
            if left <= 0:
                logger.error(
                    "leader election: no renewal of %s/%s in time; exiting", self.namespace, self.name
                )
                logging.shutdown()
                os._exit(1)
            time.sleep(min(left, self.timings.retry_period) + 0.05)
