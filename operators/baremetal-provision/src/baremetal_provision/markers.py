"""Durable progress marks on a BaremetalInstance: annotations, because status is a cache.

clusterctl move drops status and changes UIDs, and an operator restart forgets everything in memory, so
what provisioning did (the boot window it opened, the power cycle that network-booted the server, the
seed the guest fetched, the installer's callback or reported failure, the failed attempts so far, the
first boot from disk, and on deletion the cleaner's boot and callback) and the per-instance token salt
live in annotations. The reconcile reads them to know where it was, the HTTP server writes the guest's
marks, and the tokens are derived here (`Tokens`): from the salt, which is public, and the operator's token
key, which is not (it lives in a Secret only this operator reads, `tokenkey`), so whoever may read an
instance (a tenant, the console) still cannot derive its tokens or callback keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from capfleet import pausing
from capfleet.api.baremetal import BaremetalInstanceSpec

# Not the operator's kopf prefix (baremetal-provision.capfleet.dev): kopf ignores changes to its own
# annotations, and the guest's marks must trigger the reconcile.
PREFIX = "baremetal.capfleet.dev/"
TOKEN_SALT = PREFIX + "token-salt"
"""Random and public: it makes a re-created instance of the same name get new tokens."""
LEGACY_TOKEN_SECRET = PREFIX + "token-secret"
"""What releases before the token key kept instead of the salt (the tokens' secret itself, readable by
whoever could read the instance): ignored, and removed before the operator's next action."""
BOOT_WINDOW = PREFIX + "boot-window-opened-at"
"""Written before the power-on that network-boots the server: from then until the attempt ends, and only
then, its script, seed and callback are served."""
NETWORK_BOOTED = PREFIX + "network-booted-at"
SEED_FETCHED = PREFIX + "seed-fetched-at"
CALLBACK_KEY_FETCHED = PREFIX + "callback-key-fetched-at"
"""The deploy ramdisk fetched this attempt's callback key (served once: whoever got it signs callbacks)."""
CLEANING_KEY_FETCHED = PREFIX + "cleaning-key-fetched-at"
BOOT_REQUESTER = PREFIX + "boot-requester"
"""The address that fetched this attempt's per-MAC script: its seed, image and callback are served to that
address only (the lease iPXE got, which the deploy ramdisk's DHCP client gets again)."""
CALLED_BACK = PREFIX + "installer-called-back-at"
CLEANING_BOOTED = PREFIX + "cleaning-booted-at"
CLEANING_REQUESTER = PREFIX + "cleaning-requester"
"""The address that fetched the cleaning script: the cleaning key and the `cleaned` callback are taken from
that address only, as a deployment attempt's are from BOOT_REQUESTER's."""
CLEANED = PREFIX + "cleaner-called-back-at"
FAILURE_REPORTED = PREFIX + "deploy-failure"
FAILED_ATTEMPTS = PREFIX + "failed-attempts"
LAST_FAILURE = PREFIX + "last-failure"
DISK_BOOTED = PREFIX + "disk-booted-at"
BMC_TOUCHED = PREFIX + "bmc-first-action-at"
"""Written before the operator's first action on the BMC: an instance without it (and without any later
mark) never changed the server, so its deletion has nothing to undo and needs no BMC."""
DETACHED = PREFIX + "detached"
"""Set by a person, as Metal3's `detached`: the operator leaves the BMC alone, and deletion completes
without it (the way out for a BMC that is gone for good)."""
ATTEMPT_MARKS = (
    BOOT_WINDOW,
    NETWORK_BOOTED,
    BOOT_REQUESTER,
    SEED_FETCHED,
    CALLBACK_KEY_FETCHED,
    CALLED_BACK,
    FAILURE_REPORTED,
)
"""Cleared together when an attempt is counted as failed, so the next one starts afresh."""
OWN_MARKS = (
    BMC_TOUCHED,
    TOKEN_SALT,
    LEGACY_TOKEN_SECRET,
    BOOT_WINDOW,
    NETWORK_BOOTED,
    DISK_BOOTED,
    CLEANING_BOOTED,
)
"""The marks the reconcile writes itself, each followed in the same pass by what comes next, so writing one
need not wake the reconcile again (kopf leaves them out of the changes it handles); the guest's marks,
written by the boot server, a person's (detached, paused), and the failed-attempt count (rare, and a person
may reset it) do wake it."""
UNHEEDED_GUEST_MARKS = (BOOT_REQUESTER, CLEANING_REQUESTER, CALLBACK_KEY_FETCHED, CLEANING_KEY_FETCHED)
"""The guest's marks that only the boot server reads (whom it serves, and that a key was served once): no
phase, action or status follows from them, so they wake no reconcile either (each would cost a kopf
record, a Secret read and a BMC query per mark and machine)."""
QUIET_MARKS = OWN_MARKS + UNHEEDED_GUEST_MARKS


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def count(value: str | None) -> int:
    """A counter annotation's value; 0 when absent or not a count (an edited annotation restarts it)."""
    return int(value) if value and value.isdigit() else 0


def annotations_of(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return meta.get("annotations") or {}


def new_token_salt() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Tokens:
    """The tokens and callback keys of instances, derived from the operator's token key and each
    instance's salt (an HMAC, so nothing needs storing): they survive an operator restart and a watch
    replay, cannot be derived without the key, and a re-created instance (a new salt) gets new ones."""

    key: bytes = field(repr=False)

    def _digest(self, salt: str, subject: str) -> bytes:
        return hmac.new(self.key, f"{salt}:{subject}".encode(), hashlib.sha256).digest()

    def token(self, salt: str, namespace: str, name: str, attempt: int | None = 0) -> str:
        """The seed/callback token of one provisioning attempt, so a token seen during a failed attempt
        is dead in the next one. Cleaning (`attempt` None) has a token of its own: the deployments'
        tokens, seen on the provisioning network in their URLs, cannot report a server cleaned."""
        if attempt is None:
            subject = f"{namespace}/{name}/cleaning"
        else:
            subject = f"{namespace}/{name}" if attempt == 0 else f"{namespace}/{name}/attempt-{attempt}"
        return base64.urlsafe_b64encode(self._digest(salt, subject)).decode().rstrip("=")

    def of(self, meta: Mapping[str, Any], cleaning: bool = False) -> str | None:
        """The token of the instance's current attempt, or of its cleaning; None before the operator gave
        it a salt."""
        found = annotations_of(meta)
        salt = found.get(TOKEN_SALT)
        if not salt:
            return None
        attempt = None if cleaning else count(found.get(FAILED_ATTEMPTS))
        return self.token(salt, str(meta.get("namespace") or ""), str(meta["name"]), attempt)

    def callback_key(self, meta: Mapping[str, Any], cleaning: bool = False) -> str | None:
        """The key the deploy ramdisk signs its callbacks with (hex), for the current attempt or for
        cleaning: derived like the token but never in a URL, and served once; None before the instance
        has a salt."""
        found = annotations_of(meta)
        salt = found.get(TOKEN_SALT)
        if not salt:
            return None
        namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
        purpose = "cleaning" if cleaning else f"attempt-{count(found.get(FAILED_ATTEMPTS))}"
        return self._digest(salt, f"{namespace}/{name}/callback-key/{purpose}").hex()


def before_acting(meta: Mapping[str, Any], opens_window: bool) -> dict[str, str | None]:
    """The marks to write, in one patch, before an action on the BMC: before the operator's first, that it
    acted (and the boot window, when that first action is the network boot); the instance's token salt
    whenever it has none (nothing is served before an action), and the removal of an earlier release's
    token secret."""
    stamp = now()
    marks: dict[str, str | None] = {}
    if not touched(meta):
        marks[BMC_TOUCHED] = stamp
        if opens_window:
            marks[BOOT_WINDOW] = stamp
    found = annotations_of(meta)
    if not found.get(TOKEN_SALT):
        marks[TOKEN_SALT] = new_token_salt()
    if LEGACY_TOKEN_SECRET in found:
        marks[LEGACY_TOKEN_SECRET] = None
    return marks


def touched(meta: Mapping[str, Any]) -> bool:
    """Whether the operator ever acted on the server through its BMC."""
    found = annotations_of(meta)
    acted = (
        BMC_TOUCHED,
        BOOT_WINDOW,
        NETWORK_BOOTED,
        CALLED_BACK,
        DISK_BOOTED,
        FAILED_ATTEMPTS,
        CLEANING_BOOTED,
    )
    return any(found.get(key) for key in acted)


def detached(meta: Mapping[str, Any]) -> bool:
    return DETACHED in annotations_of(meta)


def cleans(meta: Mapping[str, Any], spec: BaremetalInstanceSpec) -> bool:
    """Whether deleting this instance network-boots the cleaner (`cleaning: metadata`, the default with an
    image), which a clusterctl move never does."""
    return spec.cleans_metadata and not pausing.moving(meta)


def cleaning_pending(meta: Mapping[str, Any], spec: BaremetalInstanceSpec) -> bool:
    """Deleted, to be cleaned, and the cleaner has not called back yet: its scripts are served."""
    return bool(meta.get("deletionTimestamp")) and cleans(meta, spec) and CLEANED not in annotations_of(meta)


_TOKEN_SECRET_VALUE = re.compile(r"\b[0-9a-f]{64}\b")


def redacted(message: str) -> str:
    """`message` without token secrets (64 hex digits) when it mentions an earlier release's token-secret
    annotation, as kopf's debug logs of whole objects and of the diff that removes it do."""
    if "token-secret" not in message:
        return message
    return _TOKEN_SECRET_VALUE.sub("<redacted>", message)


class RedactTokenSecrets(logging.Filter):
    """A log handler filter that keeps an earlier release's token secrets out of every log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redacted(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_logs(logger: logging.Logger) -> None:
    """Install `RedactTokenSecrets` on every handler of `logger` (the root logger, where kopf logs)."""
    for handler in logger.handlers:
        if not any(isinstance(f, RedactTokenSecrets) for f in handler.filters):
            handler.addFilter(RedactTokenSecrets())
