"""The deadline of each provisioning attempt, watched by a task that sleeps, one per instance in flight.

Between its network boot and the end of provisioning an instance waits for its installer, with a
deadline; a lost status or a callback not acted on must also be noticed without a change to the object.
A kopf timer did this every 5 s for every instance, each run going through kopf's whole handler machinery
and logged twice, however quiet the instance. The task here wakes as often, checks the object in memory
(no API or BMC call), and calls the reconcile only when the instance needs it and has been quiet for a
whole look (a change is the change handler's to handle).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from baremetal_provision import provisioning
from capfleet.patience import StopFlag


async def watch(
    body: Mapping[str, Any], stopped: StopFlag, attend: Callable[[], Awaitable[None]], look: float
) -> None:
    """Until `stopped`: every `look` seconds, `attend()` to the instance (`body`, kept current by kopf)
    if it needs attention and has not changed since the last look. A retry waits for its delay; a
    refusal (only an edit can fix it) waits for the object to change."""
    seen: str | None = None
    refused: str | None = None
    while not stopped:
        await stopped.wait(look)
        version, seen = seen, body["metadata"].get("resourceVersion")
        if stopped or seen != version or seen == refused or not provisioning.needs_attention(body):
            continue
        try:
            await attend()
        except kopf.TemporaryError as retry:
            await stopped.wait(retry.delay or look)
        except kopf.PermanentError:
            refused = seen
