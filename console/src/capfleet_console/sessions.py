"""Signed-in sessions: a random id in an HttpOnly cookie, the identity it acts for, a form token.

Kept in the console's memory: a restart signs everyone out, which costs a user one more sign-in and
keeps no identity anywhere else. No token is kept: the TokenReview's answer is all a session needs.
Every form carries the session's form token, and a POST without it is refused (with the SameSite=Strict
cookie, a second guard against another site posting on the user's behalf).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capfleet_console.acting import Identity

COOKIE = "capfleet_session"
LIFETIME_SECONDS = 8 * 3600


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

    def open(self, identity: Identity) -> tuple[str, Session]:
        self._forget_expired()
        session_id = secrets.token_urlsafe(32)
        session = Session(identity, self._clock() + self._lifetime)
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


def cookie_options(secure: bool) -> dict[str, Any]:
    return {
        "httponly": True,
        "samesite": "Strict",
        "secure": secure,
        "path": "/",
        "max_age": LIFETIME_SECONDS,
    }
