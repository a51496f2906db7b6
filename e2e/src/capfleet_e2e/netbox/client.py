"""A small NetBox REST client for tests: seed objects and look at them, independently of the code under test.

Plain REST over urllib, apart from pynetbox (which the operators use), so seeding does not share their
client code. It sends `Token` for v1 tokens and `Bearer` for v2 (`nbt_<key>.<secret>`) tokens, as pynetbox
does. Nothing is cleaned up: every test gets an empty NetBox database (real.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict

ParamValue = str | int | bool | list[str] | list[int]


class NetboxError(Exception):
    """A NetBox response with status ≥ 400."""

    def __init__(self, method: str, url: str, status: int, body: Any):
        super().__init__(f"{method} {url} → {status}: {body}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    headers: CIMultiDict[str]  # names are case-insensitive, as in HTTP


def authorization(token: str) -> str:
    is_v2 = token.startswith("nbt_") and "." in token
    return f"Bearer {token}" if is_v2 else f"Token {token}"


@dataclass
class NetboxClient:
    url: str
    token: str = field(repr=False)
    timeout: float = 60.0  # real NetBox takes seconds over a bulk write of a hundred objects

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")

    def endpoint(self, path: str) -> str:
        path = path.strip("/")
        path = path[4:] if path.startswith("api/") else path
        return f"{self.url}/api/{path}/" if path else f"{self.url}/api/"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, ParamValue] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One HTTP request; never raises for an HTTP error status."""
        url = path if path.startswith("http") else self.endpoint(path)
        if params:
            url = f"{url}?{urllib.parse.urlencode(params, doseq=True)}"
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Authorization": authorization(self.token), "Accept": "application/json"}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            url, data=data, method=method, headers={**all_headers, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return Response(reply.status, _decode(reply.read()), CIMultiDict(reply.headers.items()))
        except urllib.error.HTTPError as error:
            return Response(error.code, _decode(error.read()), CIMultiDict(error.headers.items()))

    def call(self, method: str, path: str, body: Any = None, **params: ParamValue) -> Any:
        """The decoded body; NetboxError for a status ≥ 400."""
        response = self.request(method, path, body, params)
        if response.status >= 400:
            raise NetboxError(method, path, response.status, response.body)
        return response.body

    def get(self, path: str, **params: ParamValue) -> Any:
        return self.call("GET", path, **params)

    def list_all(self, path: str, **params: ParamValue) -> list[dict[str, Any]]:
        """Every object matching the filters, following `next` links."""
        page = self.call("GET", path, **params)
        results: list[dict[str, Any]] = list(page["results"])
        while page.get("next"):
            page = self.call("GET", page["next"])
            results.extend(page["results"])
        return results

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.call("POST", path, body)
        return created

    def update(self, path: str, pk: int, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("PATCH", f"{path.strip('/')}/{pk}", body)
        return result

    def delete(self, path: str, pk: int) -> None:
        self.call("DELETE", f"{path.strip('/')}/{pk}")

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.get("status")
        return result


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw.decode(errors="replace")
