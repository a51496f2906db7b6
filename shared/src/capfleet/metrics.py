"""The metric families every operator exports on `/metrics`, and how they are recorded.

Shared families mean one dashboard serves the whole fleet: reconciles by kind and result, reconcile
duration, backend call duration by backend/operation/outcome, objects by phase, how long each step
of an object took, IP pool usage, and the memory the heap trim gave back (deploy/grafana holds the
dashboard over them). Operators record through the helpers here rather than creating their own families.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

import prometheus_client

OPERATOR_INFO = prometheus_client.Info("capfleet_operator", "Which capfleet operator this process runs.")
RECONCILES = prometheus_client.Counter(
    "capfleet_reconciles", "Reconciles by kind and result.", ["kind", "result"]
)
RECONCILE_DURATION = prometheus_client.Histogram(
    "capfleet_reconcile_duration_seconds",
    "Time spent in one reconcile.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BACKEND_CALL_DURATION = prometheus_client.Histogram(
    "capfleet_backend_call_duration_seconds",
    "Time spent in calls to external systems.",
    ["backend", "operation", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RECHECKS = prometheus_client.Counter(
    "capfleet_rechecks",
    "Timer re-checks by kind and outcome: as_listed (the object is as its backend last listed it, nothing "
    "to do) or converged (reconciled in full).",
    ["kind", "outcome"],
)
OBJECTS = prometheus_client.Gauge("capfleet_objects", "Objects by kind and phase.", ["kind", "phase"])
PROVISIONING_DURATION = prometheus_client.Histogram(
    "capfleet_provisioning_duration_seconds",
    "Time from a machine's (network) boot to its installer reporting it provisioned.",
    ["kind"],
    buckets=(5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600),
)

STEP_DURATION = prometheus_client.Histogram(
    "capfleet_step_duration_seconds",
    "How long a step (a condition Ready summarises) took: from the step before it, or the object's "
    "creation, to the step becoming True.",
    ["kind", "step"],
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600),
)

POOL_ADDRESSES = prometheus_client.Gauge(
    "capfleet_pool_addresses",
    "Addresses of an in-cluster IP pool by state (used, free, outOfRange).",
    ["namespace", "pool", "state"],
)
POOL_STATES = ("used", "free", "outOfRange")
HEAP_RETURNED = prometheus_client.Counter(
    "capfleet_heap_returned_bytes",
    "Resident memory freed by Python and given back to the system by the heap trim (capfleet.heap).",
)


def serve(address: str, port: int) -> None:
    """Serve the default registry over HTTP in a background thread."""
    prometheus_client.start_http_server(port, addr=address)


def record_reconcile(kind: str, result: str, seconds: float) -> None:
    RECONCILES.labels(kind=kind, result=result).inc()
    RECONCILE_DURATION.labels(kind=kind).observe(seconds)


def record_pool(namespace: str, pool: str, counts: dict[str, int]) -> None:
    for state in POOL_STATES:
        POOL_ADDRESSES.labels(namespace=namespace, pool=pool, state=state).set(counts.get(state, 0))


def forget_pool(namespace: str, pool: str) -> None:
    for state in POOL_STATES:
        with contextlib.suppress(KeyError):
            POOL_ADDRESSES.remove(namespace, pool, state)


def record_steps(kind: str, durations: dict[str, int]) -> None:
    for step, seconds in durations.items():
        STEP_DURATION.labels(kind=kind, step=step).observe(seconds)


class PhaseCounts:
    """Keeps `capfleet_objects{kind, phase}` equal to how many watched objects are in each phase: every
    watch event moves its object from the phase it was counted under to its new one; deletion uncounts it."""

    def __init__(self, gauge: prometheus_client.Gauge = OBJECTS) -> None:
        self.gauge = gauge
        self.counted: dict[str, tuple[str, str]] = {}

    def observe(self, uid: str, kind: str, phase: str) -> None:
        previous = self.counted.get(uid)
        if previous == (kind, phase):
            return
        if previous is not None:
            self.gauge.labels(*previous).dec()
        self.counted[uid] = (kind, phase)
        self.gauge.labels(kind, phase).inc()

    def forget(self, uid: str) -> None:
        previous = self.counted.pop(uid, None)
        if previous is not None:
            self.gauge.labels(*previous).dec()


PHASES = PhaseCounts()


def record_provisioning(kind: str, seconds: float) -> None:
    PROVISIONING_DURATION.labels(kind=kind).observe(seconds)


@contextmanager
def backend_call(backend: str, operation: str) -> Iterator[None]:
    """Time a call to an external system; the outcome is `ok` or the exception's class name."""
    started = time.monotonic()
    outcome = "ok"
    try:
        yield
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        BACKEND_CALL_DURATION.labels(backend=backend, operation=operation, outcome=outcome).observe(
            time.monotonic() - started
        )
