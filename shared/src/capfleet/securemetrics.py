"""`/metrics` over HTTPS for callers that Kubernetes RBAC allows, as controller-runtime's secure metrics.

An operator's metrics tell which objects fail and how often its backends do: no business of anyone who
can reach the pod network. The plain endpoint (`--metrics-address`) therefore listens on loopback by
default, and the Deployments serve `--metrics-secure-address` instead: TLS (a certificate from
`--metrics-cert-dir`, e.g. one cert-manager keeps in a Secret, or a self-signed one made at start), and
each request's bearer token checked with a TokenReview, then a SubjectAccessReview for `get` on the
non-resource URL `/metrics`. Prometheus scrapes with its ServiceAccount's token once that account is bound
to the ClusterRole `capfleet-metrics-reader` (deploy/base). Answers are cached for a minute per token, so a
scrape every 15 s costs the API server two reviews a minute per scraper.

The decisions (`bearer_token`, `token_review`, `access_review`, `TokenCache`) are pure; `decide` and
`serve` do the I/O.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import prometheus_client
from aiohttp import web

from capfleet import selfsigned
from capfleet.kube import Kube, KubeError
from capfleet.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

METRICS_PATH = "/metrics"
CACHE_SECONDS = 60.0

logger = logging.getLogger("capfleet.securemetrics")


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer …` header, or None."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def token_review(token: str) -> dict[str, Any]:
    return {"apiVersion": TOKEN_REVIEWS.api_version, "kind": TOKEN_REVIEWS.kind, "spec": {"token": token}}


def access_review(token_review_answer: dict[str, Any]) -> dict[str, Any] | None:
    """The SubjectAccessReview for `get /metrics` by the TokenReview's user; None when not authenticated."""
    status = token_review_answer.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") or not user.get("username"):
        return None
    return {
        "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
        "kind": SUBJECT_ACCESS_REVIEWS.kind,
        "spec": {
            "user": user["username"],
            "uid": user.get("uid", ""),
            "groups": user.get("groups") or [],
            "extra": user.get("extra") or {},
            "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
        },
    }


class TokenCache:
    """Answers per token (kept as a SHA-256, never the token) for `seconds` of a monotonic clock."""

    def __init__(self, seconds: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self._answers: dict[str, tuple[float, int]] = {}

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> int | None:
        found = self._answers.get(self.key(token))
        if found is None or self.clock() - found[0] >= self.seconds:
            return None
        return found[1]

    def put(self, token: str, status: int) -> None:
        now = self.clock()
        self._answers = {k: v for k, v in self._answers.items() if now - v[0] < self.seconds}
        self._answers[self.key(token)] = (now, status)


async def decide(kube: Kube, token: str | None, cache: TokenCache) -> int:
    """The HTTP status a request with `token` gets: 200, 401 (no valid token) or 403 (not allowed)."""
    if token is None:
        return 401
    cached = cache.get(token)
    if cached is not None:
        return cached
    question = access_review(await kube.create(TOKEN_REVIEWS, token_review(token)))
    if question is None:
        status = 401
    else:
        answer = await kube.create(SUBJECT_ACCESS_REVIEWS, question)
        status = 200 if (answer.get("status") or {}).get("allowed") else 403
    cache.put(token, status)
    return status


def tls_context(cert_dir: str | None, names: list[str]) -> ssl.SSLContext:
    """TLS from `cert_dir`'s tls.crt and tls.key, or a self-signed certificate for `names`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir:
        context.load_cert_chain(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
        return context
    cert, key = selfsigned.made_apart(names)
    with tempfile.TemporaryDirectory(prefix="capfleet-metrics-") as scratch:
        cert_path, key_path = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path)
    return context


@asynccontextmanager
async def serve(kube: Kube, host: str, port: int, tls: ssl.SSLContext) -> AsyncIterator[None]:
    """Serve the default registry at https://host:port/metrics to the callers RBAC allows."""
    cache = TokenCache()

    async def metrics(request: web.Request) -> web.Response:
        try:
            status = await decide(kube, bearer_token(request.headers), cache)
        except KubeError as exc:
            logger.warning("cannot review a /metrics request: %s", exc)
            raise web.HTTPServiceUnavailable() from exc
        if status == 401:
            raise web.HTTPUnauthorized(headers={"WWW-Authenticate": "Bearer"})
        if status == 403:
            raise web.HTTPForbidden()
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get(METRICS_PATH, metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls).start()
    try:
        yield
    finally:
        await runner.cleanup()
