"""The operator's HTTP server for the servers it network-boots: iPXE scripts, NoCloud seeds, callbacks,
the deploy ramdisk and (when enabled) cached images.

Started at operator startup (aiohttp). Instances are found by MAC and by token through kopf indexes
(`Served` entries, kept current by kopf's watch), so a request never lists the API. A seed is served only
while its attempt is open, under that attempt's token, to the address that fetched the attempt's per-MAC
script, and its user-data once: a second fetch, or any request from another address, is refused with a
Warning Event, since it means someone else on the provisioning network asked. The guest's progress
(seed fetched, deployed or failed with a reason; on deletion, the cleaner called back) is written as
annotations on the instance, which triggers its reconcile: the HTTP server records, the reconcile decides.

It listens on a TCP address, or on a UNIX socket behind the boot front (`front`), the credential-free
process that faces the provisioning network; then the requester's address comes in the front's
`X-Capfleet-Requester` header, which only the front can set (nothing else reaches the socket).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import kopf
from aiohttp import web

from baremetal_provision import booting, markers, ramdisk_args, reports
from baremetal_provision.contexts import ATTEMPTS_KEY, INSTANCES, TOKENS_KEY, OpenedAttempts
from baremetal_provision.front import REQUESTER_HEADER
from baremetal_provision.imagecache import ImageCache
from baremetal_provision.served import Served, bound_mark, served_of
from baremetal_provision.settings import BaremetalSettings
from capfleet import events, metrics, reconciling, resources
from capfleet.api.baremetal import Image, OSProfile
from capfleet.kube import Conflict, Kube, KubeError

log = logging.getLogger(__name__)
SEED_FILES = {"user-data", "meta-data", "network-config"}


@dataclass
class Lookup:
    """The operator-wide memo (for the API client), kopf's two indexes of served instances, the settings
    and the image cache (when enabled)."""

    memo: kopf.Memo
    by_mac: kopf.Index[str, Served]
    by_token: kopf.Index[str, Served]
    settings: BaremetalSettings
    images: ImageCache | None = None

    def find(self, index: kopf.Index[str, Served], key: str) -> Served | None:
        store = index.get(key)
        return next(iter(store), None) if store is not None else None

    async def find_current(self, index: kopf.Index[str, Served], key: str) -> Served | None:
        """The instance of `key`; read from the API server when its index entry shows no attempt open, or
        when the index has no token `key` but this process opened an attempt with it (`OpenedAttempts`).

        The index follows the watch, a moment behind the API server: the operator opens the boot window,
        then powers the server on, and a server that is on at once (or an index behind a busy watch) can
        ask before the index has seen the window. Refusing then would send the server to its empty disk
        until the attempt times out. (Anyone on the provisioning network who knows a MAC can make it read
        once per request, as binding an open attempt to its address already does.)"""
        served = self.find(index, key)
        if served is not None and (served.attempt_open or served.cleaning):
            return served
        if served is not None:
            namespace, name, token = served.namespace, served.name, served.token
        else:
            # A token the index has not seen: one this process just opened, if any.
            opened = self.attempts.instance_of(key) if index is self.by_token else None
            if opened is None:
                return None
            (namespace, name), token = opened, key
        try:
            body = await self.kube.get(INSTANCES, name, namespace)
        except KubeError as exc:
            log.warning("cannot read %s/%s: %s", namespace, name, exc)
            return served
        current = served_of(body, self.tokens) if body is not None else None
        return current if current is not None and token in ("", current.token) else served

    @property
    def attempts(self) -> OpenedAttempts:
        return reconciling.from_memo(self.memo, ATTEMPTS_KEY, OpenedAttempts)

    @property
    def tokens(self) -> markers.Tokens:
        """What tokens are derived from, read when a request needs it: the key is loaded once the API
        client exists, after this server starts (nothing is indexed, so nothing served, before)."""
        return reconciling.from_memo(self.memo, TOKENS_KEY, markers.Tokens)

    @property
    def kube(self) -> Kube:
        """The API client, read when a request needs it: the runtime creates it after this server starts."""
        return reconciling.from_memo(self.memo, reconciling.KUBE_KEY, Kube)

    def requester(self, request: web.Request) -> str | None:
        """Who sent `request`: the peer, or behind the front (a UNIX socket), the address it relayed."""
        relayed = request.headers.get(REQUESTER_HEADER) if self.settings.boot_socket else None
        return relayed or request.remote or None

    def base(self, request: web.Request, served: Served | None = None) -> str:
        own = served.spec.boot_server_url if served is not None else None
        return booting.base_url(own or self.settings.boot_url or f"{request.scheme}://{request.host}")

    def ramdisk(self, base: str) -> OSProfile:
        return booting.ramdisk_profile(*self.settings.deploy_ramdisk(base))

    def tls(self) -> booting.BootTLS | None:
        """The boot front's TLS base and CA for the deploy ramdisk, when configured (the CA file is read
        each time: a renewed certificate may come with a new CA)."""
        url, ca_file = self.settings.boot_tls_url, self.settings.boot_tls_ca_file
        if not url or not ca_file:
            return None
        with open(ca_file) as pem:
            return booting.BootTLS(url, ramdisk_args.ca_arg(pem.read()))

    @property
    def recorder(self) -> events.Recorder:
        return reconciling.from_memo(self.memo, reconciling.EVENTS_KEY, events.Recorder)

    async def claim(
        self, served: Served, key: str, value: str, requester: str | None = None
    ) -> tuple[bool, str | None, dict[str, Any] | None]:
        """Set the mark `key` of the current attempt to `value` unless it is set (or, with `requester`, the
        attempt is bound to another address): a patch conditional on the instance's resourceVersion, so of
        two requests at once only one sets it. Whether this call set it, the mark's value (None when unset,
        or the instance is gone or in another attempt), and the instance as last read."""
        while True:
            body = await self.kube.get(INSTANCES, served.name, served.namespace)
            current = served_of(body, self.tokens) if body is not None else None
            if body is None or current is None or current.token != served.token:
                return False, None, body
            marks = markers.annotations_of(body["metadata"])
            if marks.get(key):
                return False, marks[key], body
            if requester is not None and marks.get(bound_mark(served.cleaning), requester) != requester:
                return False, None, body
            version = body["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": version, "annotations": {key: value}}}
            try:
                await self.kube.patch(INSTANCES, served.name, patch, served.namespace)
            except Conflict:
                continue  # changed since read: read again
            return True, value, body

    async def claim_user_data(
        self, served: Served, requester: str | None
    ) -> tuple[bool, dict[str, Any] | None]:
        """Mark the user-data of the current attempt fetched, once, by the address the attempt is bound to
        (if any). Whether this fetch is the one, and the instance as last read (None when it is gone)."""
        first, _, body = await self.claim(served, markers.SEED_FETCHED, markers.now(), requester or "")
        return first, body

    async def refused(self, request: web.Request, served: Served) -> bool:
        """Whether `request` comes from another address than the one its attempt is bound to; if so, the
        refusal is logged and reported (a Warning Event on the instance)."""
        requester = self.requester(request)
        if served.requester is None or requester == served.requester:
            return False
        message = (
            f"refused {request.path.split('/')[1]} to {requester or 'an unknown address'}: this provisioning "
            f"attempt is bound to {served.requester}, which fetched its boot script; if the server did not "
            "move, someone else on the provisioning network asked"
        )
        body = await self.kube.get(INSTANCES, served.name, served.namespace)
        await self.report_refusal(served, body, "BootRequestRefused", message)
        return True

    async def report_refusal(
        self, served: Served, instance: dict[str, Any] | None, reason: str, message: str
    ) -> None:
        """Log a refused request and report it as a Warning Event on the instance, when it still exists."""
        log.warning("%s/%s: %s", served.namespace, served.name, message)
        if instance is not None:
            await self.recorder.transition(instance, "Warning", reason, message)

    async def mark(self, served: Served, key: str, value: str | None = None) -> None:
        patch = {"metadata": {"annotations": {key: value or markers.now()}}}
        await self.kube.patch(INSTANCES, served.name, patch, served.namespace)


LOOKUP = web.AppKey("lookup", Lookup)


def text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


async def boot_ipxe(request: web.Request) -> web.Response:
    return text(booting.boot_script(request.app[LOOKUP].base(request)))


async def ipxe(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    mac = booting.normalize_mac(request.query.get("mac", ""))
    served = await lookup.find_current(lookup.by_mac, mac) if mac else None
    if served is None:
        return text(booting.exit_script("no instance for this MAC"), 404)
    base = lookup.base(request, served)
    try:
        return await script_for(lookup, served, base, request)
    except (OSError, ValueError) as exc:
        log.warning("cannot write the boot script of %s/%s: %s", served.namespace, served.name, exc)
        return text(booting.exit_script("the boot server cannot write this server's script"), 500)


async def script_for(lookup: Lookup, served: Served, base: str, request: web.Request) -> web.Response:
    """The per-MAC script of an instance found by its MAC, as its state says."""
    mac = served.spec.boot_mac_address
    if served.cleaning:
        if not await bind(lookup, served, request):
            return text(booting.exit_script("the cleaning is bound to another address"), 403)
        log.info("serving the cleaning script of %s/%s to %s", served.namespace, served.name, mac)
        script = booting.cleaning_script(served.spec, lookup.ramdisk(base), base, served.token, lookup.tls())
        return text(script)
    if served.called_back:
        return text(booting.exit_script("provisioned; booting from disk"))
    if served.exhausted or served.failure_reported:
        return text(booting.exit_script("provisioning failed; not booting the deployer again now"))
    if not served.attempt_open:
        return text(booting.exit_script("no provisioning attempt is open for this MAC"))
    if not await bind(lookup, served, request):
        return text(booting.exit_script("this attempt is bound to another address"), 403)
    if served.spec.os is not None:
        log.info("serving the installer script of %s/%s to %s", served.namespace, served.name, mac)
        return text(booting.install_script(served.spec.os, base, served.token))
    log.info("serving the deploy script of %s/%s to %s", served.namespace, served.name, mac)
    script = booting.deploy_script(
        served.spec,
        lookup.ramdisk(base),
        base,
        served.token,
        cached=lookup.images is not None,
        tls=lookup.tls(),
    )
    return text(script)


async def bind(lookup: Lookup, served: Served, request: web.Request) -> bool:
    """Bind the attempt (or the cleaning) to the address asking for its script, unless it is bound already;
    whether that is the address asking (always, when the address is unknown: then nothing is bound)."""
    requester = lookup.requester(request)
    if requester is None:
        return True
    try:
        _, bound, _ = await lookup.claim(served, bound_mark(served.cleaning), requester)
    except KubeError as exc:
        log.warning("cannot bind the attempt of %s/%s: %s", served.namespace, served.name, exc)
        raise web.HTTPServiceUnavailable() from exc
    if bound in (None, requester):
        return True
    return not await lookup.refused(request, dataclasses.replace(served, requester=bound))


async def seed(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = await lookup.find_current(lookup.by_token, request.match_info["token"])
    name = request.match_info["file"]
    if served is None or not served.attempt_open or name not in SEED_FILES:
        raise web.HTTPNotFound()
    if await lookup.refused(request, served):
        raise web.HTTPForbidden(text="this attempt is bound to another address")
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
        value = ((secret or {}).get("data") or {}).get(ref.key)
        if value is None:
            raise web.HTTPServiceUnavailable(text="bootstrap data not ready")
        first, instance = await lookup.claim_user_data(served, lookup.requester(request))
    except KubeError as exc:
        log.warning("cannot serve the user-data of %s/%s: %s", served.namespace, served.name, exc)
        raise web.HTTPServiceUnavailable() from exc
    if not first:
        await refuse_refetch(
            request, served, instance, "SeedRefetchRefused", "user-data",
            "the seed is served once per provisioning attempt; if this server did not fetch it, someone "
            "else on the provisioning network did",
        )  # fmt: skip
    return web.Response(body=base64.b64decode(value), content_type="text/plain")


async def callback_key(request: web.Request) -> web.Response:
    """The key the deploy ramdisk signs its callback with: once per attempt (and once for cleaning), to
    the attempt's address; a second fetch is refused with a Warning Event."""
    lookup = request.app[LOOKUP]
    served = await lookup.find_current(lookup.by_token, request.match_info["token"])
    if served is None:
        raise web.HTTPNotFound()
    if served.cleaning and booting.cleans_with_ramdisk(served.spec):
        served = await bound_cleaning(request, served, "cleaning key")
        key, mark = served.cleaning_key, markers.CLEANING_KEY_FETCHED
    elif served.attempt_open and served.spec.image is not None:
        key, mark = served.callback_key, markers.CALLBACK_KEY_FETCHED
    else:
        raise web.HTTPNotFound()
    if await lookup.refused(request, served):
        raise web.HTTPForbidden(text="this attempt is bound to another address")
    bound_to = lookup.requester(request) or ""
    try:
        first, _, instance = await lookup.claim(served, mark, markers.now(), bound_to)
    except KubeError as exc:
        log.warning("cannot serve the callback key of %s/%s: %s", served.namespace, served.name, exc)
        raise web.HTTPServiceUnavailable() from exc
    if not first:
        await refuse_refetch(
            request, served, instance, "CallbackKeyRefetchRefused", "callback key",
            "it is served once; if this server did not fetch it, someone else on the provisioning network "
            "did, and the server's callback will not be taken",
        )  # fmt: skip
    return text(key)


async def refuse_refetch(
    request: web.Request,
    served: Served,
    instance: dict[str, Any] | None,
    reason: str,
    what: str,
    why: str,
) -> NoReturn:
    """Report a second fetch of something served once per attempt (log and Warning Event), then 403."""
    lookup = request.app[LOOKUP]
    asker = lookup.requester(request) or "an unknown address"
    message = f"a second fetch of the {what} from {asker} was refused: {why}"
    await lookup.report_refusal(served, instance, reason, message)
    raise web.HTTPForbidden(text=f"the {what} of this attempt was already fetched")


async def bound_cleaning(request: web.Request, served: Served, what: str) -> Served:
    """`served` as the API server has it now when the index shows no cleaner's address yet (the index
    follows the watch, a moment behind the script's binding); refused (403, logged, a Warning Event) when
    no address fetched the cleaning script at all: the server's own cleaner fetches the script first, so
    an early key fetch or `cleaned` is someone else's attempt to have the disk released unwiped. Only when
    the requester is known (behind the front, or directly): otherwise nothing is bound, as for
    deployments."""
    lookup = request.app[LOOKUP]
    requester = lookup.requester(request)
    if served.requester is not None or requester is None:
        return served
    try:
        body = await lookup.kube.get(INSTANCES, served.name, served.namespace)
    except KubeError as exc:
        log.warning("cannot read %s/%s: %s", served.namespace, served.name, exc)
        raise web.HTTPServiceUnavailable() from exc
    current = served_of(body, lookup.tokens) if body is not None else None
    if current is not None and current.token == served.token and current.requester is not None:
        return current
    message = (
        f"refused the {what} from {requester}: the cleaner has not fetched its boot script yet, so this is "
        "not the server's cleaner; the disk stays to be cleaned"
    )
    await lookup.report_refusal(served, body, "CleanedBeforeCleanerBooted", message)
    raise web.HTTPForbidden(text="the cleaner has not booted")


async def signed_body(request: web.Request, served: Served, key: str | None) -> str:
    """The callback's body, when its signature holds under `key` (None: nothing to check); else 403."""
    body = await request.content.read(reports.BODY_MAX)
    if key is not None and not reports.signed(request.query, body, key):
        log.warning(
            "refused a callback for %s/%s from %s: its signature does not hold",
            served.namespace,
            served.name,
            request.app[LOOKUP].requester(request) or "an unknown address",
        )
        raise web.HTTPForbidden(text="the callback's signature does not hold")
    return body.decode(errors="replace")


async def callback(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = await lookup.find_current(lookup.by_token, request.match_info["token"])
    if served is None or served.cleaning or not served.window_opened:
        raise web.HTTPNotFound()
    if await lookup.refused(request, served):
        raise web.HTTPForbidden(text="this attempt is bound to another address")
    body = await signed_body(request, served, served.callback_key if served.spec.image is not None else None)
    report = reports.read(request.query, body, served.token)
    where = f"{served.namespace}/{served.name}"
    if served.called_back or served.failure_reported or served.exhausted:
        log.info("%s called back again (%s); already recorded", where, report.result)
        return web.Response(status=204)
    if report.result == "failed":
        log.warning("deployment of %s failed: %s", where, report.failure)
        await lookup.mark(served, markers.FAILURE_REPORTED, report.failure)
        return web.Response(status=204)
    log.info("%s called back: deployed %s", where, reports.timings(report.facts))
    await lookup.mark(served, markers.CALLED_BACK)
    started = markers.parse_time(served.network_booted_at)
    if started is not None:
        observe_provisioning(started)
    return web.Response(status=204)


async def cleaned(request: web.Request) -> web.Response:
    lookup = request.app[LOOKUP]
    served = await lookup.find_current(lookup.by_token, request.match_info["token"])
    if served is None or not served.cleaning:
        raise web.HTTPNotFound()
    served = await bound_cleaning(request, served, "cleaned callback")
    if await lookup.refused(request, served):
        raise web.HTTPForbidden(text="the cleaning is bound to another address")
    key = served.cleaning_key if booting.cleans_with_ramdisk(served.spec) else None
    body = await signed_body(request, served, key)
    report = reports.read(request.query, body, served.token)
    if report.result == "failed":
        # Deletion must not hang on a disk that cannot be wiped: it goes on, and says so.
        log.warning(
            "cleaner of %s/%s failed, deprovisioning anyway: %s",
            served.namespace,
            served.name,
            report.failure,
        )
    else:
        log.info("cleaner of %s/%s called back", served.namespace, served.name)
    await lookup.mark(served, markers.CLEANED)
    lookup.attempts.callback(served.namespace, served.name).set()
    return web.Response(status=204)


async def image(request: web.Request) -> web.StreamResponse:
    cache, wanted = await _cached_image(request)
    return await cache.image(request, wanted)


async def image_checksum(request: web.Request) -> web.Response:
    cache, wanted = await _cached_image(request)
    return await cache.checksum(wanted)


async def _cached_image(request: web.Request) -> tuple[ImageCache, Image]:
    """The cache and the image of the instance whose token is in the query, when it deploys one."""
    lookup = request.app[LOOKUP]
    served = await lookup.find_current(lookup.by_token, request.query.get("token", ""))
    if lookup.images is None or served is None or not served.attempt_open or served.spec.image is None:
        raise web.HTTPNotFound()
    if await lookup.refused(request, served):
        raise web.HTTPForbidden(text="this attempt is bound to another address")
    return lookup.images, served.spec.image


def observe_provisioning(started: datetime) -> None:
    seconds = (datetime.now(UTC) - started).total_seconds()
    metrics.record_provisioning("BaremetalInstance", max(seconds, 0.0))


def application(lookup: Lookup) -> web.Application:
    settings = lookup.settings
    app = web.Application()
    app[LOOKUP] = lookup
    app.router.add_get("/boot.ipxe", boot_ipxe)
    app.router.add_get("/ipxe", ipxe)
    app.router.add_get("/seed/{token}/{file}", seed)
    app.router.add_route("POST", "/callback/{token}", callback)
    app.router.add_get("/callback/{token}", callback)
    app.router.add_get("/key/{token}", callback_key)
    app.router.add_route("POST", "/cleaned/{token}", cleaned)
    app.router.add_get("/cleaned/{token}", cleaned)
    app.router.add_get("/images/image", image)
    app.router.add_get("/images/sha256", image_checksum)
    if settings.files_dir:
        app.router.add_static("/files/", settings.files_dir)
    if settings.deploy_ramdisk_dir:
        app.router.add_static("/deploy/", settings.deploy_ramdisk_dir)
    return app


async def start(app: web.Application, settings: BaremetalSettings) -> web.AppRunner:
    """Serve `app` on the UNIX socket the settings name (replacing a stale one), else on their TCP address."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site: web.BaseSite
    if settings.boot_socket:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(settings.boot_socket)  # left by a killed predecessor: binding would fail
        site = web.UnixSite(runner, settings.boot_socket)
    else:
        site = web.TCPSite(runner, settings.listen_host, settings.listen_port)
    await site.start()
    return runner
