"""Fault injection and a request log, so tests can make "NetBox" slow or failing and count what clients did.

None of this is part of NetBox's API. Rules match requests by method and path prefix and either delay
them, answer them with a given status (before authentication, as a proxy or a dying gunicorn would), or
both, for the next N matching requests or until cleared. Every request to the API is logged, so a test can
assert that a client backed off instead of retrying in a storm.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DEFAULT_FAULT_BODY = {"detail": "Fault injected by the capfleet NetBox proxy."}


@dataclass
class Fault:
    """A rule: requests with this method (None: any) under this path prefix get a delay and/or a status."""

    path_prefix: str = "/api/"
    method: str | None = None
    status: int | None = None
    delay: float = 0.0
    remaining: int | None = None
    body: Any = field(default_factory=lambda: dict(DEFAULT_FAULT_BODY))

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method.upper() == method.upper()) and path.startswith(
            self.path_prefix
        )


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str
    query: str
    status: int
    at: float
    injected: bool
    conditional: bool = False  # sent with If-Match


class Faults:
    """Fault rules and the request log; safe to use from the test's thread while the server runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []
        self._log: list[LoggedRequest] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._rules.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str) -> list[Fault]:
        """The rules that apply to this request, each counting it against its `remaining`."""
        with self._lock:
            matched = [rule for rule in self._rules if rule.matches(method, path)]
            for rule in matched:
                if rule.remaining is not None:
                    rule.remaining -= 1
            self._rules = [r for r in self._rules if r.remaining is None or r.remaining > 0]
            return matched

    def record(self, request: web.Request, status: int, *, injected: bool) -> None:
        entry = LoggedRequest(
            request.method, request.path, request.query_string, status, time.time(), injected,
            conditional="If-Match" in request.headers,
        )  # fmt: skip
        with self._lock:
            self._log.append(entry)

    def requests(self, method: str | None = None, path_prefix: str = "") -> list[LoggedRequest]:
        with self._lock:
            return [
                r
                for r in self._log
                if (method is None or r.method == method.upper()) and r.path.startswith(path_prefix)
            ]

    def count(self, method: str | None = None, path_prefix: str = "") -> int:
        return len(self.requests(method, path_prefix))

    def by_endpoint(self) -> dict[str, int]:
        """Request counts keyed "METHOD /path"."""
        return dict(Counter(f"{r.method} {r.path}" for r in self.requests()))

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def faults_middleware(faults: Faults) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        rules = faults.take(request.method, request.path)
        delay = sum(rule.delay for rule in rules)
        if delay:
            await asyncio.sleep(delay)
        failing = next((rule for rule in rules if rule.status is not None), None)
        if failing is not None and failing.status is not None:
            faults.record(request, failing.status, injected=True)
            return web.json_response(failing.body, status=failing.status)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            faults.record(request, status, injected=False)

    return middleware
