"""capi-machine-glue's own options, read once at startup (`runtime.run`) from environment variables.

Both are intervals of the reconcile loops (`loops`): the resync is a safety net (changes wake a loop at
once), the deletion poll is how soon deletion looks again for children their operators still hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling


@dataclass(frozen=True)
class GlueSettings(reconciling.Settings):
    resync_seconds: float = reconciling.setting(60.0, env="CAPFLEET_GLUE_RESYNC_SECONDS")
    """How often a loop reconciles without being woken: a safety net, changes wake it at once."""
    deletion_poll_seconds: float = reconciling.setting(2.0, env="CAPFLEET_GLUE_DELETION_POLL_SECONDS")
    """How soon deletion first checks again whether the children are gone (then less often)."""
