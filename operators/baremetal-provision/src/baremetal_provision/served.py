"""What the boot server knows of an instance: its index entry (`Served`), built from the object alone.

kopf keeps two indexes of these (by boot MAC and by the current attempt's token); the boot server
(`serving`) answers every request from an entry, reading the object afresh only when the index may be
behind it. Kept apart from the HTTP handlers so the decision of what an instance may be served is a pure
function of its annotations and spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from baremetal_provision import markers
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstanceSpec


@dataclass(frozen=True)
class Served:
    """What the HTTP server needs of one instance (an index value)."""

    namespace: str
    name: str
    token: str
    spec: BaremetalInstanceSpec
    called_back: bool
    cleaning: bool = False
    """Deleted and being cleaned: the cleaning profile is served, and only the cleaning callback."""
    network_booted_at: str | None = None
    requester: str | None = None
    """The address this attempt (or the cleaning) is bound to: the one that fetched its per-MAC script."""
    callback_key: str = ""
    """What the deploy ramdisk's callbacks of this attempt are signed with (served once)."""
    cleaning_key: str = ""
    window_opened: bool = False
    """The operator opened this attempt's boot window (it is about to network-boot the server)."""
    failure_reported: bool = False
    exhausted: bool = False
    """Every provisioning attempt failed: nothing is network-booted any more."""

    @property
    def attempt_open(self) -> bool:
        """Between the operator's network boot and the attempt's end (callback, failure, or the last
        attempt spent): the only time its script, seed and callback are served."""
        ended = self.called_back or self.failure_reported or self.exhausted
        return bool(self.token) and self.window_opened and not ended and not self.cleaning


def bound_mark(cleaning: bool) -> str:
    """The mark naming the address a deployment attempt, or the cleaning, is bound to."""
    return markers.CLEANING_REQUESTER if cleaning else markers.BOOT_REQUESTER


def served_of(body: Mapping[str, Any], tokens: markers.Tokens) -> Served | None:
    """The index entry of an instance not deleted (unless it is being cleaned). One without a token yet
    (token "") serves nothing, but its MAC is known: a server asking by it makes the boot server read the
    instance afresh (`Lookup.find_current`)."""
    instance = kinds.BAREMETAL_INSTANCE.parse(body)
    meta, spec = instance.metadata, instance.spec
    cleaning = bool(tokens.of(meta)) and markers.cleaning_pending(meta, spec)
    if meta.get("deletionTimestamp") and not cleaning:
        return None
    token = tokens.of(meta, cleaning=cleaning) or ""
    found = markers.annotations_of(meta)
    return Served(
        namespace=str(meta["namespace"]),
        name=str(meta["name"]),
        token=token,
        spec=spec,
        called_back=bool(found.get(markers.CALLED_BACK)),
        cleaning=cleaning,
        network_booted_at=found.get(markers.NETWORK_BOOTED),
        requester=found.get(bound_mark(cleaning)),
        callback_key=tokens.callback_key(meta) or "",
        cleaning_key=tokens.callback_key(meta, cleaning=True) or "",
        window_opened=bool(found.get(markers.BOOT_WINDOW) or found.get(markers.NETWORK_BOOTED)),
        failure_reported=bool(found.get(markers.FAILURE_REPORTED)),
        exhausted=markers.count(found.get(markers.FAILED_ATTEMPTS)) >= spec.max_provisioning_attempts,
    )
