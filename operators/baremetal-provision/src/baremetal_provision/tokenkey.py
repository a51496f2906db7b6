"""The operator's token key: what every boot token and callback key is derived from, in a Secret only this
operator reads.

A BaremetalInstance carries only a public salt (`markers.TOKEN_SALT`): whoever may read instances (a
tenant, the console, a cluster author) could otherwise derive the tokens that fetch a server's seed (its
bootstrap data) and sign its callbacks. The key lives in one Secret in the operator's own namespace,
created by the operator at startup when it is missing (the first replica to start wins; the others read
it), and read once per process. Deleting the Secret and restarting the operator rotates it: attempts open
at that moment fail their deadline and are retried with new tokens. A `clusterctl move` leaves it behind,
as the target's operator has its own: an attempt the move interrupted is retried the same way.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from pathlib import Path

from capfleet.kube import AlreadyExists, Kube
from capfleet.resources import SECRETS

SECRET_NAME = "capfleet-baremetal-provision-token-key"
FIELD = "key"
KEY_BYTES = 32
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class TokenKeyError(Exception):
    """The key Secret cannot be used (no namespace to keep it in, or a value too short to be a key)."""


def namespace_of(configured: str | None, environ: Mapping[str, str]) -> str:
    """Where the key Secret lives: `CAPFLEET_TOKEN_KEY_NAMESPACE`, else the pod's own namespace."""
    if configured:
        return configured
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        raise TokenKeyError(
            "outside a pod, CAPFLEET_TOKEN_KEY_NAMESPACE (or POD_NAMESPACE) must name the namespace of the "
            f"token key Secret {SECRET_NAME}"
        ) from None


def new_secret() -> dict[str, object]:
    value = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "labels": {"app.kubernetes.io/part-of": "capfleet"}},
        "type": "Opaque",
        "data": {FIELD: value},
    }


def key_of(secret: Mapping[str, object]) -> bytes:
    """The key in the Secret; TokenKeyError naming the Secret when it holds none that is long enough."""
    data = secret.get("data")
    encoded = data.get(FIELD) if isinstance(data, Mapping) else None
    try:
        key = base64.b64decode(str(encoded or ""), validate=True)
    except binascii.Error:
        key = b""
    if len(key) < KEY_BYTES:
        raise TokenKeyError(
            f"Secret {SECRET_NAME} holds no {KEY_BYTES}-byte key under {FIELD!r}: delete it and restart the "
            "operator to have a new one made"
        )
    return key


async def load(kube: Kube, namespace: str) -> bytes:
    """The key, from its Secret in `namespace`, made first when there is none."""
    found = await kube.get(SECRETS, SECRET_NAME, namespace)
    if found is None:
        try:
            found = await kube.create(SECRETS, new_secret(), namespace)
        except AlreadyExists:  # another replica made it first
            found = await kube.get(SECRETS, SECRET_NAME, namespace)
    if found is None:
        raise TokenKeyError(f"Secret {SECRET_NAME} in {namespace} was deleted while the operator started")
    return key_of(found)
