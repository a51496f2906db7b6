"""kopf handlers of the baremetal-provision operator: decorators and typed arguments only, logic lives
elsewhere.

BaremetalInstances are provisioned (provisioning.reconcile) on every change, including the marks the
HTTP server (serving) writes when a guest fetches its seed or calls back; a daemon checks the deadline of
each instance waiting for its installer (and rebuilds a lost status), a timer resyncs provisioned
instances with their BMC (power state, `spec.online`); deletion cleans (if asked) and powers the server
off. Two indexes find an instance by its boot MAC and by its token for the HTTP server, which starts
with the operator where the settings say (`capfleet.runtime.run` puts them in memo before any startup
handler runs), with the image cache when they enable it; the key the tokens are derived from is loaded
once the runtime has its API client (`load_token_key`, run's `connected`).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import kopf

from baremetal_provision import deadlines, imagecache, markers, provisioning, serving, tokenkey
from baremetal_provision.contexts import ATTEMPTS_KEY, LOCKS_KEY, TOKENS_KEY, Context, OpenedAttempts
from baremetal_provision.served import Served, served_of
from baremetal_provision.settings import BaremetalSettings
from capfleet import reconciling, runtime
from capfleet.api import kinds
from capfleet.kube import Kube

IDENTITY = runtime.Identity("baremetal-provision", quiet_marks=markers.QUIET_MARKS)
"""The baremetal-provision operator's identity keeps its marks apart from the other operators'."""

INSTANCES = kinds.BAREMETAL_INSTANCE.resource.watch
runtime.count_phases(kinds.BAREMETAL_INSTANCE.resource)
DEADLINE_CHECK_SECONDS = 5.0
CANCELLATION_TIMEOUT = 10.0
RESYNC_SECONDS = 60.0
BOOT_SERVER_KEY = "boot_server"
IMAGE_CACHE_KEY = "image_cache"


def _served(body: kopf.Body, memo: kopf.Memo) -> Served | None:
    return served_of(body, reconciling.from_memo(memo, TOKENS_KEY, markers.Tokens))


@kopf.index(*INSTANCES)
async def instances_by_mac(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Served]:
    served = _served(body, memo)
    return {served.spec.boot_mac_address: served} if served is not None else {}


@kopf.index(*INSTANCES)
async def instances_by_token(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Served]:
    served = _served(body, memo)
    return {served.token: served} if served is not None and served.token else {}


async def load_token_key(memo: kopf.Memo) -> None:
    """At startup, once the API client exists and before any object is indexed: the key every token is
    derived from (`tokenkey`), made when missing; a Secret that holds no usable key stops the operator."""
    settings = reconciling.from_memo(memo, reconciling.SETTINGS_KEY, BaremetalSettings)
    kube = reconciling.from_memo(memo, reconciling.KUBE_KEY, Kube)
    try:
        namespace = tokenkey.namespace_of(settings.token_key_namespace, os.environ)
        memo[TOKENS_KEY] = markers.Tokens(await tokenkey.load(kube, namespace))
    except tokenkey.TokenKeyError as exc:
        raise kopf.PermanentError(str(exc)) from None


@kopf.on.startup()
async def start_boot_server(memo: kopf.Memo, **kwargs: Any) -> None:
    settings = reconciling.from_memo(memo, reconciling.SETTINGS_KEY, BaremetalSettings)
    # kopf logs whole objects at debug level: an earlier release's token secret annotation must not show.
    markers.redact_logs(logging.getLogger())
    # In the operator-wide memo at startup: kopf gives each object a shallow copy of it.
    memo[LOCKS_KEY] = {}
    memo[ATTEMPTS_KEY] = OpenedAttempts()
    # kopf passes its indexes by name; its startup handler type does not declare them.
    by_mac, by_token = kwargs["instances_by_mac"], kwargs["instances_by_token"]
    images = imagecache.open_cache(
        settings.image_cache_dir, settings.image_cache_max_gib, settings.image_source_cidrs
    )
    memo[IMAGE_CACHE_KEY] = images
    lookup = serving.Lookup(memo, by_mac, by_token, settings, images)
    memo[BOOT_SERVER_KEY] = await serving.start(serving.application(lookup), settings)


@kopf.on.cleanup()
async def stop_boot_server(memo: kopf.Memo, **_: Any) -> None:
    runner = memo.get(BOOT_SERVER_KEY)
    if runner is not None:
        await runner.cleanup()
    images = memo.get(IMAGE_CACHE_KEY)
    if images is not None:
        await images.close()


@kopf.on.resume(*INSTANCES)
@kopf.on.create(*INSTANCES)
@kopf.on.update(*INSTANCES)
@runtime.reconciler("BaremetalInstance")
async def provision(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await provisioning.reconcile(Context.from_memo(memo), body)


def in_flight(body: kopf.Body, **_: Any) -> bool:
    return provisioning.in_flight(body)


def provisioned(body: kopf.Body, **_: Any) -> bool:
    return provisioning.needs_resync(body)


@kopf.daemon(*INSTANCES, when=in_flight, cancellation_timeout=CANCELLATION_TIMEOUT)
async def expire(body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    await deadlines.watch(body, stopped, functools.partial(attend, body, memo), DEADLINE_CHECK_SECONDS)


@runtime.reconciler("BaremetalInstance")
async def attend(body: kopf.Body, memo: kopf.Memo) -> None:
    await provisioning.reconcile(Context.from_memo(memo), body)


@kopf.timer(*INSTANCES, interval=RESYNC_SECONDS, idle=RESYNC_SECONDS, when=provisioned)
@runtime.reconciler("BaremetalInstance")
async def resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await provisioning.reconcile(Context.from_memo(memo), body)


@kopf.on.delete(*INSTANCES)
@runtime.reconciler("BaremetalInstance")
@runtime.releases_at_once(IDENTITY)
async def deprovision(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await provisioning.deprovision(Context.from_memo(memo), body)
