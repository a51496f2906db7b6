"""Kubernetes Events for state transitions, posted by the operator itself.

kopf can turn log lines into Events, but then every retry of a failing handler posts another Event.
capfleet switches that off and posts an Event when a condition changes status or reason, so Events read
as a timeline of transitions and a stuck object does not flood the API.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from capfleet import resources
from capfleet.kube import Kube, KubeError

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
_MAX_MESSAGE = 1024


def build(
    obj: Mapping[str, Any], event_type: EventType, reason: str, message: str, component: str
) -> dict[str, Any]:
    """A core/v1 Event about `obj` (pure, for tests)."""
    meta = obj["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:_MAX_MESSAGE],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": None,
        "count": 1,
    }


async def post(kube: Kube, obj: Mapping[str, Any], event_type: EventType, reason: str, message: str) -> None:
    """Post an Event; a failure is logged, never raised: Events are for people, not for correctness."""
    event = build(obj, event_type, reason, message, kube.field_manager)
    try:
        await kube.create(resources.EVENTS, event, event["metadata"]["namespace"])
    except KubeError as exc:
        log.warning("could not post event %s for %s: %s", reason, obj["metadata"]["name"], exc)
