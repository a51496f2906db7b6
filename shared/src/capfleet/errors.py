"""Domain errors, and the one place where they become kopf's retry decisions.

Operators raise these from their logic; `capfleet.runtime.reconciler` turns them into
`kopf.TemporaryError` (retry after a delay that grows with the attempt) or `kopf.PermanentError`. Each
error carries a CamelCase `reason` for the condition it produces, so handlers never format condition
reasons by hand and a retry policy is decided here, not at every call site.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import ClassVar

import kopf


class CapfleetError(Exception):
    """Base class: a `reason` for conditions and a retry policy.

    `retry_base` is the first delay in seconds; the delay doubles with each retry up to `retry_cap`.
    A `retry_base` of None means retrying cannot help: only a change to the object can. The delay is
    the upper bound: retries wait a random part of it (`jittered`).
    """

    default_reason: ClassVar[str] = "Error"
    retry_base: ClassVar[float | None] = 5.0
    retry_cap: ClassVar[float] = 300.0

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason

    def delay(self, retry: int) -> float | None:
        """Seconds until the next attempt after `retry` earlier failed ones, or None for no retry."""
        if self.retry_base is None:
            return None
        return float(min(self.retry_base * (2 ** max(retry, 0)), self.retry_cap))


class InvalidSpec(CapfleetError):
    """The object's own spec is wrong (a bad CIDR, an impossible size); only an edit can fix it."""

    default_reason = "InvalidSpec"
    retry_base = None


class DependencyMissing(CapfleetError):
    """Something the object refers to (a Secret, a pool, a hypervisor) does not exist yet."""

    default_reason = "DependencyMissing"
    retry_base = 15.0


class Waiting(CapfleetError):
    """Not an error: the object waits for something else to happen (a free address, a parent's step)."""

    default_reason = "Waiting"
    retry_base = 10.0
    retry_cap = 120.0


class BackendUnavailable(CapfleetError):
    """The external system is down, slow or answered 5xx; retrying with backoff helps."""

    default_reason = "BackendUnavailable"
    retry_base = 2.0
    retry_cap = 120.0


class BackendRejected(CapfleetError):
    """The external system refused the request (bad credentials, missing permission or schema).

    Someone must fix the backend or the credentials; retry slowly so a fix is picked up without a storm.
    """

    default_reason = "BackendRejected"
    retry_base = 60.0
    retry_cap = 600.0


class Conflict(CapfleetError):
    """A concurrent writer won a race; retry soon with fresh data."""

    default_reason = "Conflict"
    retry_base = 1.0
    retry_cap = 10.0


def jittered(seconds: float, draw: Callable[[], float] = random.random) -> float:
    """Between half of `seconds` and all of it ("equal jitter"): objects that failed together (a NetBox
    outage, a restarted API server) do not all retry in the same second."""
    return seconds * (0.5 + 0.5 * draw())


def to_kopf(error: CapfleetError, retry: int) -> kopf.TemporaryError | kopf.PermanentError:
    """The kopf exception that carries out `error`'s retry policy at attempt number `retry`."""
    delay = error.delay(retry)
    text = f"{error.reason}: {error.message}"
    if delay is None:
        return kopf.PermanentError(text)
    return kopf.TemporaryError(text, delay=jittered(delay))
