"""`/api/ipam/prefixes/{id}/available-ips/` and `/api/ipam/ip-ranges/{id}/available-ips/`.

As NetBox 4.x's AvailableIPAddressesView (ipam/api/views.py) and Prefix/IPRange.get_available_ips():

- a prefix's usable addresses exclude, for IPv4, the network and broadcast addresses and, for IPv6, the
  subnet-router anycast (first) address, unless the prefix is a pool or an IPv4 /31, /32 or IPv6 /127, /128;
  addresses taken in the prefix's VRF (any VRF for a global container prefix) and ranges marked populated
  are skipped;
- a range's usable addresses are start..end inclusive, none if it is marked populated;
- GET lists the first `limit` free addresses (default 50, limit=0 → the maximum) as a plain list;
- POST takes one object or a list, finds the free addresses and creates the IPs under one lock (all or
  nothing), each with the parent's mask (unless `prefix_length` is given) and the parent's VRF, whatever
  the body says; 409 "Insufficient resources are available to satisfy the request" when too few are free.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from capfleet_e2e.netbox.errors import ValidationFailed, detail
from capfleet_e2e.netbox.ipam_rules import VRF, net
from capfleet_e2e.netbox.render import ApiContext
from capfleet_e2e.netbox.rules import host, ip_key
from capfleet_e2e.netbox.spec import Record
from capfleet_e2e.netbox.views import Api, page_bounds, read_json, respond
from capfleet_e2e.netbox.writes import build

IP = "ipam.ipaddress"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def free_addresses(first: int, last: int, taken: set[int], blocked: list[tuple[int, int]]) -> Iterator[int]:
    """Integers first..last not in `taken` nor in any blocked (inclusive) interval, in order."""
    current = first
    while current <= last:
        block = next((b for b in blocked if b[0] <= current <= b[1]), None)
        if block is not None:
            current = block[1] + 1
            continue
        if current not in taken:
            yield current
        current += 1


def prefix_free(ctx: ApiContext, prefix: Record) -> Iterator[Address]:
    network = net(prefix["prefix"])
    any_vrf = prefix.get("vrf") is None and prefix["status"] == "container"
    taken = {
        int(host(ip["address"]))
        for ip in ctx.all(IP)
        if (any_vrf or ip.get("vrf") == prefix.get("vrf")) and host(ip["address"]) in network
    }
    blocked = [
        (int(host(r["start_address"])), int(host(r["end_address"])))
        for r in ctx.all("ipam.iprange")
        if r.get("vrf") == prefix.get("vrf")
        and r.get("mark_populated")
        and host(r["start_address"]) in network
        and host(r["end_address"]) in network
    ]
    first, last = int(network.network_address), int(network.broadcast_address)
    whole = prefix["is_pool"] or network.prefixlen >= (31 if network.version == 4 else 127)
    if not whole:
        first += 1
        last -= 1 if network.version == 4 else 0
    for value in free_addresses(first, last, taken, blocked):
        yield ipaddress.ip_address(value)


def range_free(ctx: ApiContext, iprange: Record) -> Iterator[Address]:
    if iprange.get("mark_populated"):
        return
    start, end = ip_key(iprange["start_address"]), ip_key(iprange["end_address"])
    taken = {
        ip_key(ip["address"])[1]
        for ip in ctx.all(IP)
        if ip.get("vrf") == iprange.get("vrf") and start <= ip_key(ip["address"]) <= end
    }
    for value in free_addresses(start[1], end[1], taken, []):
        yield ipaddress.ip_address(value)


def parent_of(api: Api, ctx: ApiContext, kind: str, pk: int) -> tuple[Record, int, Iterator[Address]]:
    """The prefix or range, its mask length and its free addresses."""
    if kind == "ipam.prefix":
        parent = ctx.require(api.registry.by_label[kind], pk)
        return parent, net(parent["prefix"]).prefixlen, prefix_free(ctx, parent)
    parent = ctx.require(api.registry.by_label[kind], pk)
    mask = ipaddress.ip_interface(parent["start_address"]).network.prefixlen
    return parent, mask, range_free(ctx, parent)


def take(addresses: Iterator[Address], count: int) -> list[Address]:
    found: list[Address] = []
    for address in addresses:
        if len(found) == count:
            break
        found.append(address)
    return found


async def list_available(api: Api, kind: str, pk: int, request: web.Request) -> web.Response:
    ctx = api.context(request)
    parent, mask, free = parent_of(api, ctx, kind, pk)
    limit, _ = page_bounds(request, api.config)
    vrf = ctx.get(VRF, parent["vrf"]) if parent.get("vrf") else None
    vrf_brief = ctx.brief(VRF, vrf) if vrf else None
    return respond(
        [{"family": a.version, "address": f"{a}/{mask}", "vrf": vrf_brief} for a in take(free, limit)]
    )


async def allocate(api: Api, kind: str, pk: int, request: web.Request) -> web.Response:
    data = await read_json(request)
    requested: list[Any] = data if isinstance(data, list) else [data]
    bad = [type(item).__name__ for item in requested if not isinstance(item, dict)]
    if bad:
        raise ValidationFailed(
            {"non_field_errors": [f"Invalid data. Expected a dictionary, but got {bad[0]}."]}
        )
    ctx = api.context(request)
    spec = api.registry.by_label[IP]
    async with api.ip_lock:
        parent, mask, free = parent_of(api, ctx, kind, pk)
        addresses = take(free, len(requested))
        if len(addresses) < len(requested):
            raise detail(409, "Insufficient resources are available to satisfy the request")
        records: list[Record] = []
        errors: list[dict[str, list[str]]] = []
        for item, address in zip(requested, addresses, strict=True):
            body = {k: v for k, v in item.items() if k != "prefix_length"}
            body.update(address=f"{address}/{item.get('prefix_length') or mask}", vrf=parent.get("vrf"))
            try:
                records.append(build(spec, body, ctx, existing=None, partial=False))
                errors.append({})
            except ValidationFailed as failure:
                errors.append(failure.errors if isinstance(failure.errors, dict) else {})
        if any(errors):
            raise ValidationFailed(errors if isinstance(data, list) else errors[0])
        created = [api.db.insert(IP, record) for record in records]
    rendered = [ctx.render(spec, record) for record in created]
    return respond(rendered if isinstance(data, list) else rendered[0], status=201)
