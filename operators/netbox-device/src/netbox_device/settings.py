"""The netbox-device operator's options, read once at startup by `capfleet.runtime.run`.

The variable names predate the fleet's `CAPFLEET_<FIELD>` rule and stay as deployments spell them.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling
from capfleet.reconciling import setting


@dataclass(frozen=True)
class NetboxSettings(reconciling.Settings):
    """`instance` names this management cluster in owner values (empty or "auto": derived from the
    cluster's kube-system namespace, see Context.instance); `poll_seconds` is how often a claim waiting
    for a free device looks again; `settle_seconds` is the read-back delay of pre-4.6 claims."""

    instance: str = setting("", env="CAPFLEET_INSTANCE_NAME")
    poll_seconds: float = setting(60.0, env="CAPFLEET_NETBOX_POLL_SECONDS")
    settle_seconds: float = setting(1.0, env="CAPFLEET_NETBOX_SETTLE_SECONDS")
