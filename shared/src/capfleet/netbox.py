"""Connecting to NetBox, and the one place where NetBox's answers become capfleet errors.

ipam-address and netbox-device both reach NetBox through a connection Secret (`url`, `token`, optional
`caBundle`). pynetbox is synchronous and untyped: calls run in NetBox's own threads (`LANE`) through
`call`, which also times them for the backend metrics and maps every failure (HTTP status, DRF error
body, timeout, refused connection) to a `CapfleetError` with a reason a person can act on. The token
never appears in a message, a log line or a repr.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynetbox
import requests

from capfleet import cafiles, errors, lanes, metrics

T = TypeVar("T")
DEFAULT_TIMEOUT = 10.0
UNAVAILABLE = "NetBoxUnavailable"
AUTHENTICATION_FAILED = "AuthenticationFailed"
REJECTED = "NetBoxRejected"
LANE = lanes.Lane("netbox", threads=8)
"""At most eight NetBox calls of a process at once: NetBox's own workers are few, more would wait there."""


@dataclass(frozen=True)
class Connection:
    url: str
    token: str = field(repr=False)
    ca_bundle: str | None = field(default=None, repr=False)


def connection_from_secret(secret: Mapping[str, Any]) -> Connection:
    """The connection a Secret describes; `InvalidSpec`-like errors name the missing key, never values."""
    data = secret.get("data") or {}
    name = f"{secret['metadata'].get('namespace')}/{secret['metadata']['name']}"

    def value(key: str) -> str | None:
        raw = data.get(key)
        return base64.b64decode(raw).decode().strip() if raw else None

    url, token = value("url"), value("token")
    if not url or not token:
        missing = [key for key, found in (("url", url), ("token", token)) if not found]
        raise errors.DependencyMissing(f"Secret {name} has no {' or '.join(missing)}", reason="SecretInvalid")
    if not url.startswith(("https://", "http://")):
        raise errors.DependencyMissing(
            f"Secret {name}: url must start with https:// or http://", reason="SecretInvalid"
        )
    return Connection(url=url.rstrip("/"), token=token, ca_bundle=value("caBundle"))


class _TimeoutSession(requests.Session):
    """pynetbox has no timeout option; every request of this session gets one."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.default_timeout = timeout

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.default_timeout)
        return super().request(method, url, *args, **kwargs)


def open_api(connection: Connection, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """A pynetbox API object with TLS verification on (against `caBundle` when given) and timeouts."""
    api = pynetbox.api(connection.url, token=connection.token)
    session = _TimeoutSession(timeout)
    if connection.ca_bundle:
        session.verify = cafiles.ca_file(connection.ca_bundle)
    api.http_session = session
    return api


def _detail(exc: pynetbox.RequestError) -> str:
    body = exc.error
    if isinstance(body, dict):
        if "detail" in body:
            return str(body["detail"])
        return "; ".join(
            f"{key}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for key, v in body.items()
        )
    return str(body)[:300]


class Exhausted(errors.CapfleetError):
    """NetBox's 409 from available-ips: the prefix or range has no free address."""

    default_reason = "PoolExhausted"


def translate(exc: Exception) -> errors.CapfleetError:
    """A NetBox failure as a capfleet error: status and NetBox's own message, never the token."""
    if isinstance(exc, pynetbox.AllocationError):
        return Exhausted("NetBox has no free address in the prefix or range")
    if isinstance(exc, pynetbox.RequestError):
        status = exc.req.status_code
        detail = _detail(exc)
        if status in {401, 403}:
            return errors.BackendRejected(
                f"NetBox refused the token ({status}): {detail}", reason=AUTHENTICATION_FAILED
            )
        if status >= 500 or status == 429:
            return errors.BackendUnavailable(f"NetBox answered {status}: {detail}", reason=UNAVAILABLE)
        return errors.BackendRejected(f"NetBox rejected the request ({status}): {detail}", reason=REJECTED)
    if isinstance(exc, requests.exceptions.SSLError):
        return errors.BackendRejected(
            f"TLS verification of NetBox failed: {type(exc).__name__}", reason="TLSError"
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return errors.BackendUnavailable("NetBox did not answer in time", reason=UNAVAILABLE)
    if isinstance(exc, requests.exceptions.ConnectionError):
        return errors.BackendUnavailable("NetBox is unreachable (connection failed)", reason=UNAVAILABLE)
    if isinstance(exc, pynetbox.ContentError):
        return errors.BackendUnavailable("NetBox answered something that is not JSON", reason=UNAVAILABLE)
    raise exc


async def call(operation: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a pynetbox call in NetBox's lane, timed (from when a thread takes it up, not from when it was
    asked: the wait for a thread is the process's, not NetBox's), with failures translated."""

    def timed() -> T:
        with metrics.backend_call("netbox", operation):
            try:
                return fn(*args, **kwargs)
            except (
                pynetbox.AllocationError,
                pynetbox.RequestError,
                pynetbox.ContentError,
                requests.exceptions.RequestException,
            ) as exc:
                raise translate(exc) from exc

    return await LANE.run(timed)
