"""The console's web application: routes, sign-in, and the thin handlers behind each page.

Every page but sign-in needs a session; every call a page makes goes through `Acting` as the session's
user, so a user without RBAC on a namespace sees an empty page with the API server's refusal, and a form
they may not use fails the same way. Pages are rendered on the server (Jinja2, autoescaped); the cluster
page refreshes its tree every few seconds with a little script, and works without it.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import jinja2
from aiohttp import web

from capfleet import resources, tables, tree
from capfleet.api import kinds
from capfleet.kube import Kube, KubeError
from capfleet.securemetrics import token_review
from capfleet_console import views, vmform
from capfleet_console.acting import Acting, Credentials, Identity, impersonable
from capfleet_console.sessions import COOKIE, Session, Sessions, cookie_options, lifetime_of
from capfleet_console.settings import ConsoleSettings

HERE = Path(__file__).parent
VMS_PER_PAGE = 100  # a page is one list call with `limit`; the API server pages with `continue`
VMS, QUOTAS = kinds.LIBVIRT_VM.resource, kinds.VM_QUOTA.resource
HYPERVISORS, SERVERS, DEVICES = (
    kinds.HYPERVISOR.resource,
    kinds.BAREMETAL_INSTANCE.resource,
    kinds.NETBOX_DEVICE.resource,
)
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SETTINGS: web.AppKey[ConsoleSettings] = web.AppKey("settings", ConsoleSettings)
SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
REVIEWER: web.AppKey[Kube] = web.AppKey("reviewer", Kube)
CREDENTIALS: web.AppKey[Credentials] = web.AppKey("credentials", Credentials)
HTTP: web.AppKey[aiohttp.ClientSession] = web.AppKey("http", aiohttp.ClientSession)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)


def build(settings: ConsoleSettings, reviewer: Kube, credentials: Credentials) -> web.Application:
    """The application; `reviewer` (the console's own client) only asks TokenReviews."""
    app = web.Application(middlewares=[security_headers])
    app[SETTINGS], app[SESSIONS], app[REVIEWER], app[CREDENTIALS] = (
        settings,
        Sessions(),
        reviewer,
        credentials,
    )
    app[TEMPLATES] = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    app.cleanup_ctx.append(http_session)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/signin", signin_page)
    app.router.add_post("/signin", signin)
    app.router.add_post("/signout", signout)
    app.router.add_get("/", root)
    app.router.add_get("/vms", signed_in(vms_page))
    app.router.add_post("/vms", signed_in(create_vm))
    app.router.add_post("/vms/{namespace}/{name}/{action:start|stop|delete}", signed_in(vm_action))
    app.router.add_get("/hypervisors", signed_in(hypervisors_page))
    app.router.add_get("/servers", signed_in(servers_page))
    app.router.add_get("/clusters", signed_in(clusters_page))
    app.router.add_get("/clusters/{namespace}/{name}", signed_in(cluster_page))
    app.router.add_static("/static", HERE / "static")
    return app


async def http_session(app: web.Application) -> Any:
    async with aiohttp.ClientSession() as session:
        app[HTTP] = session
        yield


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    response.headers.update(SECURITY_HEADERS)
    return response


async def root(_: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/vms")


def signed_in(handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]) -> Handler:
    """The handler with the request's session; sign-in first without one, and a form needs its token."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        session = request.app[SESSIONS].find(request.cookies.get(COOKIE))
        if session is None:
            raise web.HTTPSeeOther("/signin")
        if request.method == "POST":
            form = await request.post()
            if not session.accepts(str(form.get("form_token", ""))):
                raise web.HTTPForbidden(text="this form has expired: reload the page and try again")
        return await handler(request, session)

    return wrapper


def acting(request: web.Request, session: Session) -> Acting:
    return Acting(request.app[HTTP], request.app[CREDENTIALS], session.identity)


def render(request: web.Request, template: str, session: Session | None, **context: Any) -> web.Response:
    environment = request.app[TEMPLATES]
    page = environment.get_template(template).render(
        session=session, path=request.path, form_token=session.form_token if session else "", **context
    )
    return web.Response(text=page, content_type="text/html")


def namespace_of(request: web.Request) -> str:
    return request.query.get("namespace") or request.app[SETTINGS].namespace


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def signin_page(request: web.Request) -> web.Response:
    return render(request, "signin.html", None, problem="")


async def signin(request: web.Request) -> web.Response:
    """A bearer token in, a session out: the API server says who the token is (a TokenReview)."""
    form = await request.post()
    token = str(form.get("token", "")).strip()
    identity = await review(request.app[REVIEWER], token) if token else None
    lifetime = lifetime_of(token, time.time())
    if identity is None or lifetime <= 0:
        response = render(request, "signin.html", None, problem="The API server did not accept that token.")
        response.set_status(401)
        return response
    settings = request.app[SETTINGS]
    identity = impersonable(identity, settings.group_list())
    session_id, _ = request.app[SESSIONS].open(identity, lifetime)
    response = web.HTTPSeeOther("/vms")
    response.set_cookie(COOKIE, session_id, **cookie_options(settings.secure_cookies, lifetime))
    raise response


async def review(reviewer: Kube, token: str) -> Identity | None:
    answer = await reviewer.create(resources.TOKEN_REVIEWS, token_review(token))
    status = answer.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") or not user.get("username"):
        return None
    return Identity(user["username"], tuple(user.get("groups") or ()))


async def signout(request: web.Request) -> web.Response:
    request.app[SESSIONS].close(request.cookies.get(COOKIE))
    response = web.HTTPSeeOther("/signin")
    response.del_cookie(COOKIE, path="/")
    raise response


async def listed(api: Acting, resource: Any, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
    """The objects, or none and the API server's refusal to show to the user."""
    try:
        return await api.list(resource, namespace), ""
    except KubeError as error:
        return [], f"{error.reason or error.status}: {error.message}"


async def quota_bar(api: Acting, namespace: str) -> list[views.QuotaItem]:
    found, _ = await listed(api, QUOTAS, namespace)
    bar: list[views.QuotaItem] = views.quota_bar(found)
    return bar


async def vm_page(
    api: Acting, namespace: str, scope: str, user: str, after: str
) -> tuple[list[dict[str, Any]], str, str]:
    """One page of the namespace's VMs (the user's own, selected by the API server, for "mine"), the next
    page's token, and the API server's refusal if any."""
    selector = f"{tables.CREATOR_LABEL}={tables.creator_label(user)}" if scope == "mine" else ""
    try:
        found, next_page = await api.list_page(
            VMS, namespace, limit=VMS_PER_PAGE, after=after, selector=selector
        )
    except KubeError as error:
        return [], "", f"{error.reason or error.status}: {error.message}"
    return found, next_page, ""


async def vms_page(
    request: web.Request, session: Session, problems: dict[str, str] | None = None
) -> web.Response:
    api, namespace = acting(request, session), namespace_of(request)
    scope = request.query.get("scope", "mine")
    after = request.query.get("continue", "")
    (found, next_page, refused), quota = await asyncio.gather(
        vm_page(api, namespace, scope, session.identity.user, after), quota_bar(api, namespace)
    )
    shown = views.mine(found, session.identity.user) if scope == "mine" else found
    table = tables.vms(shown, datetime.datetime.now(datetime.UTC))
    rows = [
        {"cells": row, "health": health, "name": row[1], "waiting": _waiting_message(vm)}
        for row, health, vm in zip(table.rows, table.health, sorted(shown, key=_key), strict=True)
    ]
    response = render(
        request,
        "vms.html",
        session,
        namespace=namespace,
        scope=scope,
        header=table.header,
        rows=rows,
        refused=refused,
        next_page=next_page,
        page_size=VMS_PER_PAGE,
        quota=quota,
        images=request.app[SETTINGS].image_list(),
        problems=problems or {},
        form=dict(await request.post()) if problems else {},
    )
    if problems:
        response.set_status(422)
    return response


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (str(obj["metadata"].get("namespace", "")), str(obj["metadata"]["name"]))


def _waiting_message(vm: Mapping[str, Any]) -> str:
    """The message of a VM's Ready condition when it is not Ready (QuotaExceeded names the numbers)."""
    ready = tables.ready_condition(vm)
    return ready.message or "" if ready is not None and ready.status != "True" else ""


async def create_vm(request: web.Request, session: Session) -> web.Response:
    settings, namespace = request.app[SETTINGS], namespace_of(request)
    form = {k: str(v) for k, v in (await request.post()).items()}
    wanted, problems = vmform.parse(form, settings.image_list())
    if wanted is None:
        return await vms_page(request, session, problems)
    api, user = acting(request, session), session.identity.user
    try:
        await api.create(resources.SECRETS, vmform.user_data_secret(wanted, user), namespace)
        try:
            vm = await api.create(
                VMS, vmform.libvirt_vm(wanted, namespace, user, settings.vm_interface()), namespace
            )
        except KubeError:
            await api.delete(
                resources.SECRETS, vmform.secret_name(wanted.name), namespace
            )  # nothing half-made
            raise
        await api.patch(resources.SECRETS, vmform.secret_name(wanted.name), vmform.owned_by(vm), namespace)
    except KubeError as error:
        return await vms_page(request, session, {"form": f"{error.reason or error.status}: {error.message}"})
    raise web.HTTPSeeOther(f"/vms?namespace={namespace}&scope=mine")


async def vm_action(request: web.Request, session: Session) -> web.Response:
    namespace, name, action = (request.match_info[k] for k in ("namespace", "name", "action"))
    api = acting(request, session)
    try:
        if action == "delete":
            await api.delete(VMS, name, namespace)
        else:
            await api.patch(
                VMS, name, {"spec": {"powerState": "On" if action == "start" else "Off"}}, namespace
            )
    except KubeError as error:
        return await vms_page(request, session, {"form": f"{error.reason or error.status}: {error.message}"})
    raise web.HTTPSeeOther(f"/vms?namespace={namespace}&scope={request.query.get('scope', 'mine')}")


async def hypervisors_page(request: web.Request, session: Session) -> web.Response:
    api = acting(request, session)
    found, refused = await listed(api, HYPERVISORS, None)
    placed, _ = await listed(api, VMS, None)
    table = tables.hypervisors(found, placed)
    return render(
        request,
        "table.html",
        session,
        title="Hypervisors",
        table=table,
        refused=refused,
        namespace=namespace_of(request),
        quota=await quota_bar(api, namespace_of(request)),
    )


async def servers_page(request: web.Request, session: Session) -> web.Response:
    api, namespace = acting(request, session), namespace_of(request)
    found, refused = await listed(api, SERVERS, namespace)
    devices, _ = await listed(api, DEVICES, namespace)
    table = tables.servers(found, devices, datetime.datetime.now(datetime.UTC))
    return render(
        request,
        "table.html",
        session,
        title="Bare-metal servers",
        table=table,
        refused=refused,
        namespace=namespace,
        quota=await quota_bar(api, namespace),
    )


async def clusters_page(request: web.Request, session: Session) -> web.Response:
    api, namespace = acting(request, session), namespace_of(request)
    found, refused = await listed(api, resources.CAPI_CLUSTERS, namespace)
    return render(
        request,
        "clusters.html",
        session,
        clusters=views.clusters(found),
        refused=refused,
        namespace=namespace,
        quota=await quota_bar(api, namespace),
    )


async def cluster_page(request: web.Request, session: Session) -> web.Response:
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    api = acting(request, session)
    try:
        if await api.get(resources.CAPI_CLUSTERS, name, namespace) is None:
            raise web.HTTPNotFound(text=f"no Cluster {namespace}/{name}")
        text = await tree.cluster_tree(api, namespace, name)
        refused = ""
    except KubeError as error:
        text, refused = "", f"{error.reason or error.status}: {error.message}"
    template = "tree.html" if request.query.get("fragment") else "cluster.html"
    return render(
        request,
        template,
        session,
        name=name,
        namespace=namespace,
        lines=views.tree_lines(text),
        refused=refused,
        quota=await quota_bar(api, namespace),
    )
