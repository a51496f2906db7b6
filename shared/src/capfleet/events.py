"""Kubernetes Events for state transitions, posted by the operator itself.

kopf can turn log lines into Events, but then every retry of a failing handler posts another Event.
capfleet switches that off and posts an Event when a condition changes status or reason, so Events read
as a timeline of transitions and a stuck object does not flood the API.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
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


class Recorder:
    """Posts an Event when an object's (type, reason) changes, judged by what this process last posted.

    Handlers often see an object older than the status they just wrote, so comparing with the object
    would post the same transition twice. The memory is bounded and starts empty after a restart (one
    repeated Event at most).
    """

    def __init__(self, kube: Kube, capacity: int = 20_000) -> None:
        self._kube = kube
        self._capacity = capacity
        self._last: OrderedDict[str, tuple[str, str]] = OrderedDict()

    async def transition(
        self, obj: Mapping[str, Any], event_type: EventType, reason: str, message: str
    ) -> None:
        uid = _uid(obj)
        if self._last.get(uid) == (event_type, reason):
            return
        self._last[uid] = (event_type, reason)
        self._last.move_to_end(uid)
        while len(self._last) > self._capacity:
            self._last.popitem(last=False)
        await post(self._kube, obj, event_type, reason, message)

    def forget(self, obj: Mapping[str, Any], event_type: EventType, reason: str) -> None:
        """Forget that (`event_type`, `reason`) was the last transition posted for `obj`, so it is posted
        again when it happens again: an operator that posts only some transitions (Ready, not each step
        towards it) says so when one it does not post has happened in between."""
        uid = _uid(obj)
        if self._last.get(uid) == (event_type, reason):
            del self._last[uid]


def _uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("uid") or obj["metadata"]["name"])


async def post(kube: Kube, obj: Mapping[str, Any], event_type: EventType, reason: str, message: str) -> None:
    """Post an Event; a failure is logged, never raised: Events are for people, not for correctness."""
    event = build(obj, event_type, reason, message, kube.field_manager)
    try:
        await kube.create(resources.EVENTS, event, event["metadata"]["namespace"])
    except KubeError as exc:
        log.warning("could not post event %s for %s: %s", reason, obj["metadata"]["name"], exc)
