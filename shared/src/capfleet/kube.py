"""A small typed client for the few verbs the fleet uses, on kubernetes-asyncio.

The generated kubernetes-asyncio classes return untyped models and raise one `ApiException` for every
failure. Operators need to decide, on purpose, what a 404 or a 409 means in each place: a missing child
is to be created, a child that already exists was created by an earlier attempt, an update conflict is
retried. This module makes those outcomes explicit (a `None`, a boolean, or a named exception) and is the
only place that talks HTTP to the apiserver for capfleet code; kopf keeps its own connection.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from capfleet.resources import Resource

Obj = dict[str, Any]
Propagation = Literal["Foreground", "Background", "Orphan"]

_JSON = {200: "object", 201: "object", 202: "object"}
_MERGE_PATCH = "application/merge-patch+json"
_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_APPLY_PATCH = "application/apply-patch+yaml"
# Unknown or duplicate fields are refused, not silently pruned: a misspelt key is an error, not a no-op.
_STRICT = {"fieldValidation": "Strict"}
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)
"""No call waits longer: a list of thousands of objects takes seconds, a hung API server forever."""


class KubeError(Exception):
    """An apiserver answer that the caller did not expect; carries the HTTP status and Status message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class AlreadyExists(KubeError):
    """409 on create: an object of that name exists."""


class Conflict(KubeError):
    """409 on update: the object changed since it was read (stale resourceVersion)."""


class Invalid(KubeError):
    """422 or 400: the apiserver rejected the object (schema or CEL validation, an unknown field)."""


class Forbidden(KubeError):
    """403: RBAC does not allow the request."""


def _error(exc: ApiException, *, creating: bool = False) -> KubeError:
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    message = str(body.get("message") or exc.reason or "")
    reason = str(body.get("reason") or exc.reason or "")
    status = int(exc.status or 0)
    if status == 409:
        return (AlreadyExists if creating else Conflict)(status, reason, message)
    if status in (400, 422):
        return Invalid(status, reason, message)
    if status == 403:
        return Forbidden(status, reason, message)
    return KubeError(status, reason, message)


def proxy_from_environment(configuration: client.Configuration) -> None:
    """Route to the API server through the proxy the environment names for it (`HTTPS_PROXY`, unless
    `NO_PROXY` exempts it), looked up once here."""
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(URL(configuration.host or ""))
    except LookupError:
        return
    if auth is not None:  # aiohttp's proxy request takes the credentials from the URL
        proxy = proxy.with_user(auth.login).with_password(auth.password)
    configuration.proxy = str(proxy)


def _stop_reading_the_environment(api: client.ApiClient) -> None:
    """kubernetes_asyncio opens its session with `trust_env`, so aiohttp looked up `.netrc` and the proxy
    variables again for every request, each in a thread of the default executor: two thread hops per
    request, and a `.netrc` entry for the API server's host failed every request (Basic auth beside the
    bearer token). The proxy is resolved once (`proxy_from_environment`); `.netrc` is not for the API
    server, whose credentials are the kubeconfig's. aiohttp offers no setter: a test fails if this
    attribute stops meaning what it does."""
    session = api.rest_client.pool_manager
    session._trust_env = False


class Kube:
    """Typed access to any resource described by a `capfleet.resources.Resource`."""

    def __init__(
        self, api: client.ApiClient, field_manager: str, timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT
    ) -> None:
        self._api = api
        self.field_manager = field_manager
        self.timeout = timeout

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, field_manager: str, kubeconfig: str | None = None, *, context: str | None = None
    ) -> AsyncIterator[Kube]:
        """Connect with the in-cluster service account, else the kubeconfig (`KUBECONFIG` by default) and
        its current context, or `context` (naming a context asks for a kubeconfig, even in a pod)."""
        configuration = client.Configuration()
        if kubeconfig is None and context is None and _in_cluster():
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        proxy_from_environment(configuration)
        async with client.ApiClient(configuration=configuration) as api:
            api.user_agent = field_manager
            _stop_reading_the_environment(api)
            yield cls(api, field_manager)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str | None = None,
        creating: bool = False,
    ) -> Obj:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            result = await self._api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                response_types_map=_JSON,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            raise _error(exc, creating=creating) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            # An API server that hangs or drops the connection is an answer too: callers handle it as
            # they handle a 5xx (retry later), instead of waiting on it forever.
            message = f"{method} {path}: {type(exc).__name__} {exc}{self._pool_note()}"
            raise KubeError(0, "Unavailable", message) from exc
        return dict(result or {})

    def _pool_note(self) -> str:
        """How busy the client's connection pool is, for a request that failed: a timeout with every
        connection in use waited for one and never reached the API server, however idle the server.
        aiohttp keeps the count private: nothing when it cannot be read."""
        rest = getattr(self._api, "rest_client", None)
        connector = getattr(getattr(rest, "pool_manager", None), "connector", None)
        acquired, limit = getattr(connector, "_acquired", None), getattr(connector, "limit", None)
        if not isinstance(acquired, set) or not isinstance(limit, int) or not limit:
            return ""
        return f" ({len(acquired)} of {limit} connections in use)"

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            return await self._call("GET", resource.path(namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        """Every matching object, following `continue` tokens page by page."""
        query: dict[str, str] = {"limit": "500"}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        items: list[Obj] = []
        while True:
            page = await self._call("GET", resource.path(namespace), query=query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = token

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        """Create; raises AlreadyExists when the name is taken."""
        return await self._call("POST", resource.path(namespace), body=body, query=_STRICT, creating=True)

    async def create_or_get(
        self, resource: Resource, body: Obj, namespace: str | None = None
    ) -> tuple[Obj, bool]:
        """Create, or return the existing object of that name: `(object, created)`.

        For children with deterministic names: a retry after a crash finds what the first attempt made.
        """
        try:
            return await self.create(resource, body, namespace), True
        except AlreadyExists:
            existing = await self.get(resource, body["metadata"]["name"], namespace)
            if existing is None:  # deleted between the two calls; the next reconcile creates it again
                raise
            return existing, False

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        *,
        strategic: bool = False,
    ) -> Obj | None:
        """JSON merge patch (strategic merge patch for built-in kinds, which adds to and removes from lists
        such as finalizers without replacing them); None when the object does not exist."""
        content_type = _STRATEGIC_MERGE_PATCH if strategic else _MERGE_PATCH
        return await self._patch(resource.path(namespace, name), patch, content_type)

    async def json_patch(
        self, resource: Resource, name: str, operations: Sequence[Obj], namespace: str | None = None
    ) -> Obj | None:
        """RFC 6902 JSON patch (a list of operations, `test` among them); None when the object does not
        exist. A failed `test` is refused as Invalid."""
        return await self._patch(resource.path(namespace, name), operations, _JSON_PATCH)

    async def patch_status(
        self, resource: Resource, name: str, status: Obj, namespace: str | None = None
    ) -> Obj | None:
        """Merge-patch the status subresource; None when the object does not exist."""
        return await self._patch(resource.path(namespace, name, "status"), {"status": status})

    async def _patch(
        self, path: str, patch: Obj | Sequence[Obj], content_type: str = _MERGE_PATCH
    ) -> Obj | None:
        try:
            return await self._call("PATCH", path, body=patch, query=_STRICT, content_type=content_type)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def apply(
        self, resource: Resource, body: Obj, namespace: str | None = None, *, force: bool = True
    ) -> Obj:
        """Server-side apply of the fields in `body`, owned by this client's field manager."""
        query = {**_STRICT, "fieldManager": self.field_manager, "force": "true" if force else "false"}
        path = resource.path(namespace, body["metadata"]["name"])
        return await self._call("PATCH", path, body=body, query=query, content_type=_APPLY_PATCH)

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation: Propagation | None = None,
        uid: str | None = None,
    ) -> Obj | None:
        """Request deletion; the API server's answer (the object as the request left it: still there with a
        deletionTimestamp while finalizers hold it), or None when it was already gone (or replaced, when
        `uid` is given)."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            options["propagationPolicy"] = propagation
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            return await self._call("DELETE", resource.path(namespace, name), body=options)
        except KubeError as exc:
            if exc.status == 404 or (uid and exc.status == 409):
                return None
            raise


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def in_cluster_server(environ: Mapping[str, str]) -> str | None:
    """The API server's URL inside a pod, as client-go's in-cluster config finds it: the `kubernetes`
    Service's address from KUBERNETES_SERVICE_HOST and _PORT, with no DNS lookup (a pod whose cluster DNS
    is down, or that has none, still reaches it). None outside a pod."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
