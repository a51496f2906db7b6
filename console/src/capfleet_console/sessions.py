"""Signed-in sessions: a random id in an HttpOnly cookie, the identity it acts for, a form token.

Kept in the console's memory: a restart signs everyone out, which costs a user one more sign-in and
keeps no identity anywhere else. No token is kept: the TokenReview's answer is all a session needs. A
session ends when its token does (a ServiceAccount or OIDC token carries its expiry, `exp`), and after
eight hours at most: a user whose token was short-lived is not left signed in on the strength of it.
Every form carries the session's form token, and a POST without it is refused (with the SameSite=Strict
cookie, a second guard against another site posting on the user's behalf).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capfleet_console.acting import Identity

COOKIE = "capfleet_session"
LIFETIME_SECONDS = 8 * 3600


def token_expiry(token: str) -> float | None:
    """When a JWT bearer token expires (its `exp`, seconds since the epoch), None for any other token.
    Read without checking the signature: the API server has just accepted the token, and the expiry
    only ever shortens a session."""
    parts = token.split(".")
    if len(parts) != 3:  # header, payload, signature
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def lifetime_of(token: str, now: float, cap: float = LIFETIME_SECONDS) -> float:
    """How long a session opened with `token` at wall-clock `now` lasts: until the token expires, and
    `cap` at most."""
    expires = token_expiry(token)
    return cap if expires is None else max(0.0, min(cap, expires - now))


@dataclass
class Session:
    identity: Identity
    expires: float
    form_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def accepts(self, form_token: str | None) -> bool:
        return bool(form_token) and hmac.compare_digest(self.form_token, str(form_token))


class Sessions:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, lifetime: float = LIFETIME_SECONDS
    ) -> None:
        self._by_id: dict[str, Session] = {}
        self._clock, self._lifetime = clock, lifetime

    def open(self, identity: Identity, lifetime: float | None = None) -> tuple[str, Session]:
        """A new session for `identity`, lasting `lifetime` seconds (`lifetime_of` its token), and never
        longer than the sessions' own lifetime."""
        self._forget_expired()
        session_id = secrets.token_urlsafe(32)
        lasts = self._lifetime if lifetime is None else min(lifetime, self._lifetime)
        session = Session(identity, self._clock() + lasts)
        self._by_id[session_id] = session
        return session_id, session

    def find(self, session_id: str | None) -> Session | None:
        session = self._by_id.get(session_id or "")
        if session is None or session.expires < self._clock():
            return None
        return session

    def close(self, session_id: str | None) -> None:
        self._by_id.pop(session_id or "", None)

    def _forget_expired(self) -> None:
        now = self._clock()
        for session_id in [k for k, s in self._by_id.items() if s.expires < now]:
            del self._by_id[session_id]


def cookie_options(secure: bool, lifetime: float = LIFETIME_SECONDS) -> dict[str, Any]:
    return {
        "httponly": True,
        "samesite": "Strict",
        "secure": secure,
        "path": "/",
        "max_age": int(lifetime),
    }
