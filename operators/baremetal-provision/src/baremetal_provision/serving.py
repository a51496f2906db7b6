"""The operator's HTTP server for the servers it network-boots: iPXE scripts, NoCloud seeds, callbacks.

Started at operator startup (aiohttp). Instances are found by MAC and by token through kopf indexes
(`Served` entries, kept current by kopf's watch), so a request never lists the API. The guest's progress
(seed fetched, installer called back; on deletion, the cleaner called back) is written as annotations on
the instance, which triggers its reconcile: the HTTP server records, the reconcile decides.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from aiohttp import web

from baremetal_provision import booting, markers
from baremetal_provision.contexts import INSTANCES
from capfleet import metrics, reconciling, resources
from capfleet.api import kinds
from capfleet.api.baremetal import BaremetalInstanceSpec
from capfleet.kube import Kube, KubeError

log = logging.getLogger(__name__)
SEED_FILES = {"user-data", "meta-data", "network-config"}


@dataclass(frozen=True)
class Served:
    """What the HTTP server needs of one instance (an index value)."""

    namespace: str
    name: str
    token: str
    spec: BaremetalInstanceSpec
    seed_fetched: bool
    called_back: bool
    cleaning: bool = False
    """Deleted and being cleaned: the cleaning profile is served, and only the cleaning callback."""
    network_booted_at: str | None = None


def served_of(body: Mapping[str, Any]) -> Served | None:
    """The index entry of an instance: one with a token, not deleted, unless it is being cleaned."""
    instance = kinds.BAREMETAL_INSTANCE.parse(body)
    meta, spec = instance.metadata, instance.spec
    token = markers.token_of(meta)
    cleaning = markers.cleaning_pending(meta, spec)
    if token is None or (meta.get("deletionTimestamp") and not cleaning):
        return None
    found = markers.annotations_of(meta)
    return Served(
        namespace=str(meta["namespace"]),
        name=str(meta["name"]),
        token=token,
        spec=spec,
        seed_fetched=bool(found.get(markers.SEED_FETCHED)),
        called_back=bool(found.get(markers.CALLED_BACK)),
        cleaning=cleaning,
        network_booted_at=found.get(markers.NETWORK_BOOTED),
    )


@dataclass
class Lookup:
    """The operator-wide memo (for the API client) and kopf's two indexes of served instances."""

    memo: kopf.Memo
    by_mac: kopf.Index[str, Served]
    by_token: kopf.Index[str, Served]
    boot_url: str | None

    def find(self, index: kopf.Index[str, Served], key: str) -> Served | None:
        store = index.get(key)
        return next(iter(store), None) if store is not None else None

    @property
    def kube(self) -> Kube:
        """The API client, read when a request needs it: the runtime creates it after this server starts."""
        return reconciling.from_memo(self.memo, reconciling.KUBE_KEY, Kube)

    def base(self, request: web.Request, served: Served | None = None) -> str:
        own = served.spec.boot_server_url if served is not None else None
        return own or self.boot_url or f"{request.scheme}://{request.host}"

    async def mark(self, served: Served, key: str) -> None:
        patch = {"metadata": {"annotations": {key: markers.now()}}}
        await self.kube.patch(INSTANCES, served.name, patch, served.namespace)


LOOKUP = web.AppKey("lookup", Lookup)


def text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


async def boot_ipxe(request: web.Request) -> web.Response:
    return text(booting.boot_script(request.app[LOOKUP].base(request)))


async def ipxe(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    mac = booting.normalize_mac(request.query.get("mac", ""))
    served = lookup.find(lookup.by_mac, mac) if mac else None
    if served is None:
        return text(booting.exit_script("no instance for this MAC"), 404)
    if served.cleaning:
        log.info("serving the cleaning script of %s/%s to %s", served.namespace, served.name, mac)
        profile = booting.cleaning_profile(served.spec)
        return text(booting.cleaning_script(profile, lookup.base(request, served), served.token))
    if served.called_back:
        return text(booting.exit_script("provisioned; booting from disk"))
    log.info("serving the installer script of %s/%s to %s", served.namespace, served.name, mac)
    return text(booting.install_script(served.spec.os, lookup.base(request, served), served.token))


async def seed(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = lookup.find(lookup.by_token, request.match_info["token"])
    name = request.match_info["file"]
    if served is None or served.cleaning or name not in SEED_FILES:
        raise web.HTTPNotFound()
    if name == "meta-data":
        return text(booting.meta_data(served.namespace, served.name, served.spec))
    if name == "network-config":
        config = booting.network_config(served.spec)
        if config is None:
            raise web.HTTPNotFound()
        return text(config)
    ref = served.spec.user_data_secret_ref
    try:
        secret = await lookup.kube.get(resources.SECRETS, ref.name, served.namespace)
    except KubeError as exc:
        log.warning("cannot read the user-data of %s/%s: %s", served.namespace, served.name, exc)
        raise web.HTTPServiceUnavailable() from exc
    value = ((secret or {}).get("data") or {}).get(ref.key)
    if value is None:
        raise web.HTTPServiceUnavailable(text="bootstrap data not ready")
    if not served.seed_fetched:
        await lookup.mark(served, markers.SEED_FETCHED)
    return web.Response(body=base64.b64decode(value), content_type="text/plain")


async def callback(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = lookup.find(lookup.by_token, request.match_info["token"])
    if served is None or served.cleaning:
        raise web.HTTPNotFound()
    await request.read()  # the installer's report; only its arrival matters
    log.info("installer of %s/%s called back", served.namespace, served.name)
    if not served.called_back:
        await lookup.mark(served, markers.CALLED_BACK)
        started = markers.parse_time(served.network_booted_at)
        if started is not None:
            observe_provisioning(started)
    return web.Response(status=204)


async def cleaned(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = lookup.find(lookup.by_token, request.match_info["token"])
    if served is None or not served.cleaning:
        raise web.HTTPNotFound()
    await request.read()
    log.info("cleaner of %s/%s called back", served.namespace, served.name)
    await lookup.mark(served, markers.CLEANED)
    return web.Response(status=204)


def observe_provisioning(started: datetime) -> None:
    seconds = (datetime.now(UTC) - started).total_seconds()
    metrics.record_provisioning("BaremetalInstance", max(seconds, 0.0))


def application(lookup: Lookup, files_dir: str | None) -> web.Application:
    app = web.Application()
    app[LOOKUP] = lookup
    app.router.add_get("/boot.ipxe", boot_ipxe)
    app.router.add_get("/ipxe", ipxe)
    app.router.add_get("/seed/{token}/{file}", seed)
    app.router.add_route("POST", "/callback/{token}", callback)
    app.router.add_get("/callback/{token}", callback)
    app.router.add_route("POST", "/cleaned/{token}", cleaned)
    app.router.add_get("/cleaned/{token}", cleaned)
    if files_dir:
        app.router.add_static("/files/", files_dir)
    return app


async def start(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
