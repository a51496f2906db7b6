"""Durable progress marks on a BaremetalInstance: annotations, because status is a cache.

clusterctl move drops status and changes UIDs, and an operator restart forgets everything in memory, so
what provisioning did (the power cycle that network-booted the server, the seed the guest fetched, the
installer's callback) and the per-instance token secret live in annotations. The reconcile reads them to
know where it was, the HTTP server writes the guest's marks, and the token is derived from them here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# Not the operator's kopf prefix (baremetal-provision.capfleet.dev): kopf ignores changes to its own
# annotations, and the guest's marks must trigger the reconcile.
PREFIX = "baremetal.capfleet.dev/"
TOKEN_SECRET = PREFIX + "token-secret"
NETWORK_BOOTED = PREFIX + "network-booted-at"
SEED_FETCHED = PREFIX + "seed-fetched-at"
CALLED_BACK = PREFIX + "installer-called-back-at"
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def annotations_of(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return meta.get("annotations") or {}


def new_token_secret() -> str:
    return secrets.token_hex(32)


def token(secret: str, namespace: str, name: str) -> str:
    """The seed/callback token: an HMAC of the instance's namespace/name, so it survives a move (same
    annotation, same name) and cannot be guessed without the per-instance secret."""
    digest = hmac.new(secret.encode(), f"{namespace}/{name}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def token_of(meta: Mapping[str, Any]) -> str | None:
    secret = annotations_of(meta).get(TOKEN_SECRET)
    if not secret:
        return None
    return token(secret, str(meta.get("namespace") or ""), str(meta["name"]))


def for_move(meta: Mapping[str, Any]) -> bool:
    return DELETE_FOR_MOVE in annotations_of(meta)
