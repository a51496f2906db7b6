"""The aiohttp application: routing under /api/, authentication, error rendering and the fault middleware.

Routing follows NetBox's URL scheme: /api/<app>/<model>/ (list, create, bulk update, bulk delete),
/api/<app>/<model>/<id>/ (retrieve, update, delete) and the available-ips actions of prefixes and ranges.
As in Django with APPEND_SLASH, a GET without the trailing slash is redirected and a write without it fails.
"""

from __future__ import annotations

import logging
import platform
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from capfleet_e2e.netbox import dcim, extras, ipam, virtualization
from capfleet_e2e.netbox.auth import authenticate, authorize
from capfleet_e2e.netbox.available import allocate, list_available
from capfleet_e2e.netbox.config import ServerConfig
from capfleet_e2e.netbox.errors import ApiError, ValidationFailed, detail
from capfleet_e2e.netbox.faults import Faults, admin_routes, faults_middleware
from capfleet_e2e.netbox.spec import ModelSpec, Registry
from capfleet_e2e.netbox.store import Database
from capfleet_e2e.netbox.views import (
    Api,
    bulk_destroy,
    bulk_update,
    create,
    destroy,
    list_objects,
    not_allowed,
    respond,
    retrieve,
    update,
)

log = logging.getLogger(__name__)
REGISTRY = Registry([*extras.SPECS, *ipam.SPECS, *dcim.SPECS, *virtualization.SPECS])
API_KEY = web.AppKey("api", Api)
APPS = ("circuits", "core", "dcim", "extras", "ipam", "plugins", "tenancy", "users", "virtualization", "vpn")
AVAILABLE_IPS = {"ipam.prefix", "ipam.iprange"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_middleware(config: ServerConfig) -> Any:
    """ApiError/ValidationFailed → DRF-style JSON; anything else → NetBox's API 500 body."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except ValidationFailed as failure:
            response = respond(failure.errors, status=400)
        except ApiError as error:
            response = respond(error.body, status=error.status, headers=error.headers)
        except web.HTTPException:
            raise
        except Exception as error:
            log.error(
                "NetBox test server error on %s %s\n%s", request.method, request.path, traceback.format_exc()
            )
            body = {
                "error": str(error),
                "exception": type(error).__name__,
                "netbox_version": config.version,
                "python_version": platform.python_version(),
            }
            response = respond(body, status=500)
        if request.path.startswith("/api/"):
            response.headers["API-Version"] = config.api_version
        return response

    return middleware


def auth_middleware(config: ServerConfig) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api"):
            authorize(authenticate(config, request.headers.get("Authorization")), request.method)
        return await handler(request)

    return middleware


def model_for(api: Api, parts: list[str]) -> ModelSpec:
    spec = api.registry.by_path.get("/".join(parts[:2]))
    if spec is None or (spec.min_version and not api.config.at_least(spec.min_version)):
        raise detail(404, "Not found.")
    return spec


async def dispatch(request: web.Request) -> web.StreamResponse:
    api = request.app[API_KEY]
    if not request.path.endswith("/"):
        if request.method in ("GET", "HEAD"):
            query = f"?{request.query_string}" if request.query_string else ""
            raise web.HTTPMovedPermanently(f"{request.path}/{query}")
        return web.Response(status=500, text="<h1>Server Error (500)</h1>", content_type="text/html")
    parts = [p for p in request.path.split("/")[2:] if p]
    base = f"{request.scheme}://{request.host}/api"
    method = request.method
    if not parts:
        return respond({app: f"{base}/{app}/" for app in (*APPS, "status")})
    if parts == ["status"]:
        return respond(status_body(api.config))
    if len(parts) == 1:
        enabled = [s for s in api.registry.enabled(api.config) if s.path.startswith(f"{parts[0]}/")]
        return respond({s.path.split("/")[1]: f"{base}/{s.path}/" for s in enabled})
    spec = model_for(api, parts)
    rest = parts[2:]
    if not rest:
        actions = {"GET": list_objects, "POST": create, "PUT": bulk_update, "PATCH": bulk_update}
        if method == "DELETE":
            return await bulk_destroy(api, spec, request)
        if method not in actions:
            raise not_allowed(method)
        return await actions[method](api, spec, request)
    if not rest[0].isdigit():
        raise detail(404, "Not found.")
    pk = int(rest[0])
    if len(rest) == 1:
        if method == "GET":
            return await retrieve(api, spec, pk, request)
        if method in ("PUT", "PATCH"):
            return await update(api, spec, pk, request)
        if method == "DELETE":
            return await destroy(api, spec, [pk], request)
        raise not_allowed(method)
    if rest[1:] == ["available-ips"] and spec.label in AVAILABLE_IPS:
        if method == "GET":
            return await list_available(api, spec.label, pk, request)
        if method == "POST":
            return await allocate(api, spec.label, pk, request)
        raise not_allowed(method)
    raise detail(404, "Not found.")


def status_body(config: ServerConfig) -> dict[str, Any]:
    return {
        "django-version": "5.2",
        "installed-apps": {},
        "netbox-version": config.version,
        "netbox-full-version": config.version,
        "plugins": {},
        "python-version": platform.python_version(),
        "rq-workers-running": 1,
    }


def make_app(
    config: ServerConfig, db: Database, faults: Faults, outage: Callable[[float], None]
) -> web.Application:
    app = web.Application(
        middlewares=[faults_middleware(faults), error_middleware(config), auth_middleware(config)]
    )
    app[API_KEY] = Api(config, REGISTRY, db)
    app.add_routes(admin_routes(faults, config.admin_secret, outage))
    app.router.add_route("*", "/api", dispatch)
    app.router.add_route("*", "/api/{tail:.*}", dispatch)
    return app
