"""Calls to the API server as the signed-in user: the console's own credentials plus impersonation.

A user signs in once with a bearer token; the console asks the API server who that is (a TokenReview,
with its own ServiceAccount), keeps only the answer (user name and groups, never the token) and from then
on sends each request with its own credentials and `Impersonate-User` / `Impersonate-Group` headers, so
RBAC judges every call as the user's. One `Impersonate-Group` header per group: the generic client joins
headers into a dict, so this small client speaks HTTP itself (aiohttp, TLS verified against the
cluster's CA).
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client, config
from multidict import CIMultiDict

from capfleet.kube import AlreadyExists, Conflict, Forbidden, Invalid, KubeError
from capfleet.resources import Resource

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass(frozen=True)
class Identity:
    """Who a session acts for, as the API server's TokenReview named them."""

    user: str
    groups: tuple[str, ...] = ()


class Credentials(Protocol):
    """The console's own way into the API server: where it is, TLS, and the Authorization header."""

    host: str
    ssl: ssl.SSLContext

    async def authorization(self) -> Mapping[str, str]: ...


@dataclass
class KubeconfigCredentials:
    """Credentials from a kubeconfig or the pod's ServiceAccount, refreshed as kubernetes-asyncio does."""

    configuration: client.Configuration
    host: str
    ssl: ssl.SSLContext

    @classmethod
    async def load(cls, kubeconfig: str | None, in_cluster: bool) -> KubeconfigCredentials:
        configuration = client.Configuration()
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        return cls(configuration, str(configuration.host), context)

    async def authorization(self) -> Mapping[str, str]:
        settings = (await self.configuration.auth_settings()).get("BearerToken")
        return {settings["key"]: settings["value"]} if settings and settings.get("value") else {}


def impersonable(identity: Identity, allowed_groups: Iterable[str]) -> Identity:
    """`identity` with only the groups the console may impersonate (`CAPFLEET_CONSOLE_GROUPS`, which the
    console's ClusterRole names too): a user in `system:masters` or any other group left out acts as
    themselves without it, so the console never lends a privileged group's rights to a session."""
    allowed = set(allowed_groups)
    return Identity(identity.user, tuple(g for g in identity.groups if g in allowed))


def impersonation_headers(identity: Identity) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("Impersonate-User", identity.user)
    for group in identity.groups:
        headers.add("Impersonate-Group", group)
    return headers


def error_of(status: int, body: str) -> KubeError:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    reason, message = str(answer.get("reason", "")), str(answer.get("message", body[:200]))
    kinds: dict[int, type[KubeError]] = {403: Forbidden, 409: Conflict, 422: Invalid}
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(status, reason, message)
    return kinds.get(status, KubeError)(status, reason, message)


Objects = list[dict[str, Any]]


def whole(answer: Mapping[str, Any], resource: Resource) -> Objects:
    """A list's items, given the apiVersion and kind they do not carry: callers expect whole objects."""
    items: Objects = answer.get("items") or []
    for item in items:
        item.setdefault("apiVersion", resource.api_version)
        item.setdefault("kind", resource.kind)
    return items


class Acting:
    """The API as one user: get, list, create, patch (merge) and delete any `Resource`."""

    def __init__(self, session: aiohttp.ClientSession, credentials: Credentials, identity: Identity) -> None:
        self.session, self.credentials, self.identity = session, credentials, identity

    async def _call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        headers = impersonation_headers(self.identity)
        headers.update(await self.credentials.authorization())
        headers["Accept"] = "application/json"
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        url = self.credentials.host.rstrip("/") + path
        async with self.session.request(
            method, url, data=data, headers=headers, ssl=self.credentials.ssl, timeout=REQUEST_TIMEOUT
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise error_of(response.status, text)
            return json.loads(text) if text else None

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self._call("GET", resource.path(namespace, name))
        except KubeError as error:
            if error.status == 404:
                return None
            raise
        return found

    async def list(self, resource: Resource, namespace: str | None = None) -> Objects:
        return whole(await self._call("GET", resource.path(namespace)), resource)

    async def list_page(
        self, resource: Resource, namespace: str | None, *, limit: int, after: str = "", selector: str = ""
    ) -> tuple[Objects, str]:
        """At most `limit` objects (from the continue token `after`, matching the label `selector`), and the
        token of the next page ("" after the last)."""
        query = {"limit": str(limit), **({"continue": after} if after else {})}
        if selector:
            query["labelSelector"] = selector
        answer = await self._call("GET", resource.path(namespace) + "?" + urllib.parse.urlencode(query))
        return whole(answer, resource), str((answer.get("metadata") or {}).get("continue") or "")

    async def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> Any:
        return await self._call("POST", resource.path(namespace), dict(body))

    async def patch(
        self, resource: Resource, name: str, patch: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        return await self._call(
            "PATCH", resource.path(namespace, name), dict(patch), "application/merge-patch+json"
        )

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None:
        try:
            await self._call("DELETE", resource.path(namespace, name))
        except KubeError as error:
            if error.status != 404:
                raise
