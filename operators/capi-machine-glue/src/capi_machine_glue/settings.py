"""capi-machine-glue's own options, read once at startup (`runtime.run`) from environment variables.

All are intervals of the glue's controllers (`handlers`): the resync is a safety net (a change brings an
object back at once), the settle time how long an object's key waits for the changes that follow the one
that enqueued it, the deletion poll how soon deletion looks again for children their operators still hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling


@dataclass(frozen=True)
class GlueSettings(reconciling.Settings):
    resync_seconds: float = reconciling.setting(600.0, env="CAPFLEET_GLUE_RESYNC_SECONDS")
    """How often an object is reconciled when nothing changed: a safety net, changes bring it back at
    once. Such a reconcile reads every object from the API server (about ten GETs per machine), so a short
    resync multiplies the glue's requests by the machines waiting."""
    settle_seconds: float = reconciling.setting(0.5, env="CAPFLEET_GLUE_SETTLE_SECONDS")
    """How long an object's key, enqueued by a change, waits for the changes that follow it, so they cost
    one reconcile (0: at once). Each reconcile that finds something new writes the status."""
    deletion_poll_seconds: float = reconciling.setting(2.0, env="CAPFLEET_GLUE_DELETION_POLL_SECONDS")
    """How soon deletion first checks again whether the children are gone (then less often)."""
