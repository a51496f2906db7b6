"""capi-machine-glue's own options, read once at startup (`runtime.run`) from environment variables.

All are intervals of the reconcile loops (`loops`): the resync is a safety net (changes wake a loop at
once), the settle time how long a woken loop lets a burst of changes gather, the deletion poll how soon
deletion looks again for children their operators still hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling


@dataclass(frozen=True)
class GlueSettings(reconciling.Settings):
    resync_seconds: float = reconciling.setting(600.0, env="CAPFLEET_GLUE_RESYNC_SECONDS")
    """How often a loop reconciles without being woken: a safety net, changes wake it at once. Such a
    reconcile reads every object from the API server (about ten GETs): at a minute, 500 machines waiting
    for servers cost 134 requests per machine in `make bench-fleet N=500`."""
    settle_seconds: float = reconciling.setting(0.5, env="CAPFLEET_GLUE_SETTLE_SECONDS")
    """How long a loop woken by a change waits for the changes that follow it before reconciling once for
    all of them (0: at once). Each reconcile that finds something new writes the status."""
    deletion_poll_seconds: float = reconciling.setting(2.0, env="CAPFLEET_GLUE_DELETION_POLL_SECONDS")
    """How soon deletion first checks again whether the children are gone (then less often)."""
