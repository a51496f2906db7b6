"""A small NetBox REST client for tests: seed objects, look at them, and clean up what it created.

It speaks plain REST, so the same seeding code works against the test server and against a real NetBox.
Against a shared real NetBox, `unique()` suffixes names and slugs so parallel runs do not collide, and
`cleanup()` deletes everything the client created, newest first. It sends `Token` for v1 tokens and
`Bearer` for v2 (`nbt_<key>.<secret>`) tokens, as pynetbox does.
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
    suffix: str = ""
    created: list[tuple[str, int]] = field(default_factory=list)

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
        """POST one object and remember it for cleanup()."""
        created: dict[str, Any] = self.call("POST", path, body)
        self.created.append((path, created["id"]))
        return created

    def update(self, path: str, pk: int, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("PATCH", f"{path.strip('/')}/{pk}", body)
        return result

    def delete(self, path: str, pk: int) -> None:
        self.call("DELETE", f"{path.strip('/')}/{pk}")

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.get("status")
        return result

    def unique(self, name: str) -> str:
        """A name (or slug) made unique for this client's run."""
        return f"{name}{self.suffix}"

    def cleanup(self) -> list[str]:
        """Delete what this client created, newest first; returns errors (objects already gone are fine).

        Addresses, ranges and prefixes in VRFs it created go too, however they were made (allocations
        through available-ips, objects an operator under test wrote), since they would block the VRF.
        """
        errors: list[str] = []
        for path, pk in self.created:
            if path.strip("/") == "ipam/vrfs":
                errors.extend(self.sweep_vrf(pk))
        for path, pk in reversed(self.created):
            response = self.request("DELETE", f"{path.strip('/')}/{pk}")
            if response.status not in (204, 404):
                errors.append(f"DELETE {path}/{pk}: {response.status} {response.body}")
        self.created.clear()
        return errors

    def sweep_vrf(self, vrf_id: int) -> list[str]:
        errors: list[str] = []
        for path in ("ipam/ip-addresses", "ipam/ip-ranges", "ipam/prefixes"):
            found = self.request("GET", path, params={"vrf_id": vrf_id, "brief": 1, "limit": 0})
            ids = [{"id": o["id"]} for o in found.body.get("results", [])] if found.status == 200 else []
            response = self.request("DELETE", path, ids) if ids else None
            if response is not None and response.status != 204:
                errors.append(f"DELETE {path} in VRF {vrf_id}: {response.status} {response.body}")
        return errors


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw.decode(errors="replace")
