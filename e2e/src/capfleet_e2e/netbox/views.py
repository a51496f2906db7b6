"""The generic REST views every model gets, as NetBox's NetBoxModelViewSet provides them.

List (`{count, next, previous, results}`, limit/offset, `brief`, `fields`, cursor `start` on ≥ 4.6),
retrieve, create (one object or a list, all or nothing), update (PUT/PATCH, If-Match on ≥ 4.6), delete,
and the bulk forms of update and delete on the list URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from capfleet_e2e.netbox.config import ServerConfig
from capfleet_e2e.netbox.deletion import delete_objects
from capfleet_e2e.netbox.errors import ApiError, ValidationFailed, detail
from capfleet_e2e.netbox.filters import apply_filters
from capfleet_e2e.netbox.render import ApiContext, etag
from capfleet_e2e.netbox.spec import ModelSpec, Record, Registry
from capfleet_e2e.netbox.store import Database
from capfleet_e2e.netbox.writes import build

TRUE = ("1", "true", "True")


class Api:
    """The server's state shared by all requests: configuration, models, database and the IP lock."""

    def __init__(self, config: ServerConfig, registry: Registry, db: Database):
        self.config = config
        self.registry = registry
        self.db = db
        self.ip_lock = asyncio.Lock()

    def context(self, request: web.Request) -> ApiContext:
        return ApiContext(self.db, self.registry, self.config, f"{request.scheme}://{request.host}")


def write_lock(api: Api, spec: ModelSpec) -> contextlib.AbstractAsyncContextManager[Any]:
    """IP address writes share available-ips' lock (NetBox's advisory lock); other models need none."""
    return api.ip_lock if spec.ip_lock else contextlib.nullcontext()


def respond(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers)


async def read_json(request: web.Request) -> Any:
    """The JSON body; an empty body is an empty object, as DRF's request.data."""
    text = await request.text()
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        raise detail(400, f"JSON parse error - {error}") from None


def query_lists(request: web.Request) -> dict[str, list[str]]:
    return {key: request.query.getall(key) for key in dict.fromkeys(request.query.keys())}


def page_bounds(request: web.Request, config: ServerConfig) -> tuple[int, int]:
    """NetBox's OptionalLimitOffsetPagination: default PAGINATE_COUNT, limit=0 means MAX_PAGE_SIZE."""
    try:
        limit = int(request.query.get("limit", config.paginate_count))
        limit = config.max_page_size if limit == 0 else min(limit, config.max_page_size)
        if limit < 0:
            raise ValueError
    except ValueError:
        limit = config.paginate_count
    try:
        offset = max(int(request.query.get("offset", 0)), 0)
    except ValueError:
        offset = 0
    return limit, offset


def render_many(ctx: ApiContext, spec: ModelSpec, records: list[Record], request: web.Request) -> list[Any]:
    brief = request.query.get("brief", "") in TRUE
    only = [f.strip() for f in request.query.get("fields", "").split(",") if f.strip()] or None
    return [ctx.render(spec, r, brief=brief, only=only) for r in records]


async def list_objects(api: Api, spec: ModelSpec, request: web.Request) -> web.Response:
    ctx = api.context(request)
    records = sorted(api.db.all(spec.label), key=spec.ordering)
    records = apply_filters(spec, query_lists(request), records, ctx)
    limit, offset = page_bounds(request, api.config)
    if api.config.cursor_pagination and "start" in request.query:
        start = int(request.query["start"]) if request.query["start"].isdigit() else 0
        after = sorted((r for r in records if r["id"] >= start), key=lambda r: r["id"])
        page = after[:limit]
        more = len(after) > limit
        next_url = (
            str(request.url.update_query(start=str(page[-1]["id"] + 1), limit=str(limit))) if more else None
        )
        results = render_many(ctx, spec, page, request)
        return respond({"count": None, "next": next_url, "previous": None, "results": results})
    page = records[offset : offset + limit]
    next_url = None
    if offset + limit < len(records):
        next_url = str(request.url.update_query(limit=str(limit), offset=str(offset + limit)))
    previous_url = None
    if offset > 0:
        previous = request.url.update_query(limit=str(limit))
        previous_url = str(
            previous.without_query_params("offset")
            if offset - limit <= 0
            else previous.update_query(offset=str(offset - limit))
        )
    body: dict[str, Any] = {"count": len(records), "next": next_url, "previous": previous_url}
    return respond({**body, "results": render_many(ctx, spec, page, request)})


def etag_header(api: Api, record: Record) -> dict[str, str]:
    return {"ETag": etag(record)} if api.config.etags else {}


async def retrieve(api: Api, spec: ModelSpec, pk: int, request: web.Request) -> web.Response:
    ctx = api.context(request)
    record = ctx.require(spec, pk)
    return respond(render_many(ctx, spec, [record], request)[0], headers=etag_header(api, record))


async def create(api: Api, spec: ModelSpec, request: web.Request) -> web.Response:
    data = await read_json(request)
    ctx = api.context(request)
    async with write_lock(api, spec):
        if isinstance(data, list):
            records = build_all(spec, data, ctx)
            created = [api.db.insert(spec.label, r) for r in records]
            return respond([ctx.render(spec, r) for r in created], status=201)
        record = api.db.insert(spec.label, build(spec, data, ctx, existing=None, partial=False))
        return respond(ctx.render(spec, record), status=201, headers=etag_header(api, record))


def build_all(spec: ModelSpec, items: list[Any], ctx: ApiContext) -> list[Record]:
    """Validate every object of a list before creating any (errors aligned with the request's list)."""
    records: list[Record] = []
    errors: list[dict[str, list[str]]] = []
    for item in items:
        try:
            records.append(build(spec, item, ctx, existing=None, partial=False))
            errors.append({})
        except ValidationFailed as failure:
            errors.append(failure.errors if isinstance(failure.errors, dict) else {})
    if any(errors):
        raise ValidationFailed(errors)
    return records


def check_if_match(api: Api, request: web.Request, record: Record) -> None:
    """NetBox 4.6: a stale If-Match on PUT/PATCH is a 412 carrying the current ETag."""
    header = request.headers.get("If-Match", "").strip()
    if not api.config.etags or not header or header == "*":
        return
    current = etag(record)
    if current not in [tag.strip() for tag in header.split(",")]:
        raise detail(412, "Precondition failed.", headers={"ETag": current})


async def update(api: Api, spec: ModelSpec, pk: int, request: web.Request) -> web.Response:
    data = await read_json(request)
    ctx = api.context(request)
    async with write_lock(api, spec):
        existing = ctx.require(spec, pk)
        check_if_match(api, request, existing)
        record = build(spec, data, ctx, existing=existing, partial=request.method == "PATCH")
        stored = api.db.replace(spec.label, record)
        return respond(ctx.render(spec, stored), headers=etag_header(api, stored))


async def bulk_update(api: Api, spec: ModelSpec, request: web.Request) -> web.Response:
    data = await read_json(request)
    ctx = api.context(request)
    if not isinstance(data, list) or not all(isinstance(d, dict) and "id" in d for d in data):
        raise ValidationFailed({"non_field_errors": ["Bulk update requires a list of objects with an id."]})
    async with write_lock(api, spec):
        records = [
            build(spec, d, ctx, existing=ctx.require(spec, int(d["id"])), partial=request.method == "PATCH")
            for d in data
        ]
        stored = [api.db.replace(spec.label, r) for r in records]
        return respond([ctx.render(spec, r) for r in stored])


async def destroy(api: Api, spec: ModelSpec, pks: list[int], request: web.Request) -> web.Response:
    ctx = api.context(request)
    async with write_lock(api, spec):
        targets = [(spec, ctx.require(spec, pk)) for pk in pks]
        delete_objects(ctx, targets)
    return web.Response(status=204)


async def bulk_destroy(api: Api, spec: ModelSpec, request: web.Request) -> web.Response:
    data = await read_json(request)
    if not isinstance(data, list) or not all(isinstance(d, dict) and "id" in d for d in data):
        raise ValidationFailed({"non_field_errors": ["Bulk delete requires a list of objects with an id."]})
    return await destroy(api, spec, [int(d["id"]) for d in data], request)


def not_allowed(method: str) -> ApiError:
    return detail(405, f'Method "{method}" not allowed.')
