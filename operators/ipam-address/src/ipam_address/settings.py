"""ipam-address's own options, read once at startup by `capfleet.runtime.run`."""

from __future__ import annotations

from dataclasses import dataclass

from capfleet import reconciling
from capfleet.reconciling import setting


@dataclass(frozen=True)
class IpamSettings(reconciling.Settings):
    """`instance` names this management cluster in the owner values of NetBox IPs (`capfleet.instances`;
    empty or "auto": derived from the cluster's kube-system namespace), so two management clusters
    sharing a NetBox never take each other's addresses."""

    instance: str = setting("", env="CAPFLEET_INSTANCE_NAME")
