"""The few NetBox requests pynetbox cannot make: reads that return the ETag, writes with If-Match, a
single page of a list (pynetbox follows every page), and a deletion by id in one request (pynetbox reads
the object first).

NetBox ≥ 4.6 sends an ETag with every object and refuses a PUT/PATCH whose If-Match is stale with 412;
that is the compare-and-set device claims rely on. pynetbox hides response headers and sends no
conditional headers, so these go through its own HTTP session (same TLS settings, timeouts and token)
and fail with pynetbox's `RequestError`, which `capfleet.netbox.call` translates like any other failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pynetbox

PRECONDITION_FAILED = 412
NOT_FOUND = 404


class Stale(Exception):
    """The object changed since it was read (NetBox's 412): someone else wrote it first."""


def _headers(api: Any, if_match: str | None = None) -> dict[str, str]:
    token = str(api.token or "")
    scheme = "Bearer" if token.startswith("nbt_") and "." in token else "Token"
    headers = {"Accept": "application/json", "Authorization": f"{scheme} {token}"}
    if if_match:
        headers["If-Match"] = if_match
    return headers


def get_with_etag(api: Any, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """The object at `path` (e.g. "dcim/devices/7") and its ETag; (None, None) when it does not exist."""
    reply = api.http_session.get(f"{api.base_url}/{path.strip('/')}/", headers=_headers(api))
    if reply.status_code == NOT_FOUND:
        return None, None
    if not reply.ok:
        raise pynetbox.RequestError(reply)
    body: dict[str, Any] = reply.json()
    return body, reply.headers.get("ETag")


def patch_if_match(api: Any, path: str, fields: dict[str, Any], etag: str | None) -> dict[str, Any]:
    """PATCH `fields`, only if the object still has `etag`; raises `Stale` on 412."""
    reply = api.http_session.patch(
        f"{api.base_url}/{path.strip('/')}/", json=fields, headers=_headers(api, etag)
    )
    if reply.status_code == PRECONDITION_FAILED:
        raise Stale(path)
    if not reply.ok:
        raise pynetbox.RequestError(reply)
    body: dict[str, Any] = reply.json()
    return body


def get_page(
    api: Any, path: str, params: Mapping[str, Any], limit: int, brief: bool = True
) -> list[dict[str, Any]]:
    """The first `limit` objects at list `path` (e.g. "dcim/devices") matching `params`, in NetBox's brief
    form (id, name, …) unless not `brief`: one request, whatever the list's length."""
    query = {**params, "limit": limit, "ordering": "id"} | ({"brief": "true"} if brief else {})
    reply = api.http_session.get(f"{api.base_url}/{path.strip('/')}/", params=query, headers=_headers(api))
    if not reply.ok:
        raise pynetbox.RequestError(reply)
    results: list[dict[str, Any]] = reply.json().get("results") or []
    return results


def delete(api: Any, path: str) -> None:
    """DELETE the object at `path` (e.g. "ipam/ip-addresses/7"); one that is already gone is fine."""
    reply = api.http_session.delete(f"{api.base_url}/{path.strip('/')}/", headers=_headers(api))
    if reply.status_code != NOT_FOUND and not reply.ok:
        raise pynetbox.RequestError(reply)
