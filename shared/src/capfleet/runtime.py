"""How every capfleet operator starts from its Identity and Options (`capfleet.options`): kopf settings,
metrics, probes, logging, leader election, the heap trim.

Each operator's `__main__` imports its handlers (which register with kopf's default registry) and calls
`run(Identity("<operator>"), <its Settings>)`. Everything that must be the same across the fleet lives
here: each operator's own finalizer, annotation prefix and peering name (so two operators never mistake
each other's marks), the liveness endpoint, the `/metrics` server, structured logging, Events only on
transitions, and the API client, Event recorder and settings kept in kopf's `memo`
(`capfleet.reconciling` reads them back).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import kopf
from aiohttp import web

from capfleet import (
    conditions,
    errors,
    events,
    heap,
    leadership,
    metrics,
    persistence,
    reconciling,
    secretholds,
    securemetrics,
    statuses,
)
from capfleet.kube import Kube, KubeError, in_cluster_server
from capfleet.options import HANDLED_KEY, parse_options, split_address
from capfleet.options import Identity as Identity
from capfleet.options import Options as Options
from capfleet.resources import Resource

P = ParamSpec("P")
R = TypeVar("R")
SettingsT = TypeVar("SettingsT", bound=reconciling.Settings)
Connected = Callable[[kopf.Memo], Awaitable[None]]
"""An operator's startup step that needs the API client (`run`'s `connected`)."""

VERSION = "0.1.0"
"""The source's version. An image built for a release carries its own in CAPFLEET_VERSION (`release()`)."""


def release(environ: Mapping[str, str] = os.environ) -> str:
    """The version this process runs as: the image's CAPFLEET_VERSION (set by the build from its VERSION
    argument, so two builds of one source for two releases tell themselves apart), else the source's."""
    return environ.get("CAPFLEET_VERSION") or VERSION


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def configure(
    settings: kopf.OperatorSettings,
    identity: Identity,
    options: Options,
) -> None:
    """kopf settings that give each operator its own marks and keep idle operators silent."""
    settings.persistence.finalizer = identity.kopf_finalizer
    settings.persistence.progress_storage = persistence.ProgressStorage(prefix=identity.annotation_prefix)
    # kopf's record of what it handled stays an annotation although it costs a patch per handling: kopf
    # then waits until its watch shows that patch before handling the object again, so no handler ever
    # sees the object older than its own writes. Kept in memory instead (tried), the handler ran on a
    # body from before its last pass and wrote a second token and boot window on a BaremetalInstance.
    # What saves those patches is fewer handlings: a quiet mark (one the reconcile wrote itself, or one
    # it never decides on) is left out of what kopf compares, so writing it wakes no handler (and needs
    # no record).
    recorded = kopf.AnnotationsDiffBaseStorage(
        prefix=identity.annotation_prefix,
        key=HANDLED_KEY,
        ignored_fields=[
            *(
                ("metadata", "annotations", mark)
                for mark in (
                    secretholds.HELD_ANNOTATION,
                    secretholds.GRANTS_ANNOTATION,
                    secretholds.LET_GO_ANNOTATION,
                    *identity.quiet_marks,
                )
            ),
            *identity.quiet_fields,
        ],
    )
    settings.persistence.diffbase_storage = recorded
    settings.peering.name = options.shard_name(identity)
    settings.peering.mandatory = False
    settings.peering.standalone = not options.peering
    settings.peering.clusterwide = options.clusterwide
    # Events come from capfleet.events on transitions; kopf would post one per retry.
    settings.posting.enabled = False
    settings.networking.connect_timeout = 10
    selector = options.label_selector()
    if selector is not None:
        # Server-side, on every watch of the operator's objects: one that stops matching (relabelled to
        # another shard) comes as a DELETED event here and an ADDED one there.
        settings.watching.label_selectors[_served] = selector
    settings.watching.server_timeout = 300


def _served(resource: kopf.Resource) -> bool:
    """Not what kopf watches for itself: its peering objects, and the CRDs and namespaces it scans."""
    internal = resource.group in {"kopf.dev", "apiextensions.k8s.io"}
    return not (internal or (resource.group == "" and resource.plural == "namespaces"))


def api_error(exc: KubeError) -> errors.CapfleetError:
    """The retry an API server answer the handler did not expect calls for: a conflict at once, a refusal
    slowly (someone must fix RBAC), anything else (a 5xx, a 504 from an API server too busy to answer in
    time) as any backend that is unavailable: 2 s, doubling. kopf's own default for an error it does not
    know is a flat 60 s, so one 504 would hold a server's deletion that long."""
    message = f"API server: {exc}"
    if exc.status == 409:
        return errors.Conflict(message)
    if exc.status in (401, 403):
        return errors.BackendRejected(message, reason="APIRefused")
    return errors.BackendUnavailable(message)


def reconciler(kind: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Wrap a handler: record its duration and result, and turn capfleet errors and the API server's
    unexpected answers into kopf retries."""

    def decorate(handler: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(handler)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.monotonic()
            result = "error"
            try:
                value = await handler(*args, **kwargs)
                result = "success"
                return value
            except (errors.CapfleetError, KubeError) as exc:
                retry = kwargs.get("retry", 0)
                error = api_error(exc) if isinstance(exc, KubeError) else exc
                translated = errors.to_kopf(error, retry if isinstance(retry, int) else 0)
                result = "permanent" if isinstance(translated, kopf.PermanentError) else "retry"
                raise translated from exc
            except kopf.TemporaryError:
                result = "retry"
                raise
            except kopf.PermanentError:
                result = "permanent"
                raise
            finally:
                metrics.record_reconcile(kind, result, time.monotonic() - started)

        return wrapper

    return decorate


RELEASED_MEMORY_SECONDS = 600.0


class Released:
    """The UIDs of objects whose deletion handler succeeded in this process, kept for `seconds`."""

    def __init__(self, seconds: float = RELEASED_MEMORY_SECONDS) -> None:
        self.seconds = seconds
        self._at: dict[str, float] = {}

    def add(self, uid: str) -> None:
        now = time.monotonic()
        self._at = {u: at for u, at in self._at.items() if now - at < self.seconds}
        self._at[uid] = now

    def __contains__(self, uid: object) -> bool:
        at = self._at.get(uid) if isinstance(uid, str) else None
        return at is not None and time.monotonic() - at < self.seconds


def releases_at_once(
    identity: Identity,
) -> Callable[[Callable[P, Awaitable[None]]], Callable[P, Awaitable[None]]]:
    """Wrap a deletion handler that writes to its own object, so that kopf removes the finalizer at its
    first try, and the handler never runs again for the object it released.

    kopf removes its finalizer with a JSON patch tested against the resourceVersion it last knew: its own
    merge-patch's answer in that handling cycle, else the body the cycle began with. A deletion handler
    that wrote to its object meanwhile (marks, status, the let-go annotation) makes that test fail, and
    kopf tries again at each watch event queued while the handler ran, one refused patch per write. A
    successful handler therefore ends with an annotation through kopf's patch (when the object was
    released): kopf merge-patches it first, and tests the finalizer's removal against the answer.

    The events still queued are then older than the object's end, and kopf runs a deletion handler again
    for one such event when the watch has not shown the object gone within its consistency timeout (5 s):
    under load, a BaremetalInstance already deleted would be deprovisioned again (its BMC asked, its
    Secret held and let go again). So an object released here is remembered by UID for ten minutes, and its
    handler is not run again in that time (kopf's removal of a finalizer already gone then finds nothing)."""

    def decorate(handler: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
        released = Released()

        @functools.wraps(handler)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
            uid = kwargs.get("uid")
            if uid in released:
                return
            await handler(*args, **kwargs)
            patch = kwargs.get("patch")
            if isinstance(patch, kopf.Patch):
                patch.meta.annotations[identity.released_annotation] = conditions.now_rfc3339()
            if isinstance(uid, str):
                released.add(uid)

        return wrapper

    return decorate


def count_phases(resource: Resource, registry: kopf.OperatorRegistry | None = None) -> None:
    """Count the objects of `resource` by phase in `capfleet_objects` (`statuses.phase_of`), from every
    watch event, so the dashboard shows where machines are without listing them."""

    @kopf.on.event(
        *resource.watch, id=f"count-phase/{resource.plural}", registry=registry or kopf.get_default_registry()
    )
    async def count_phase(event: kopf.RawEvent, body: kopf.Body, uid: str | None, **_: Any) -> None:
        # Async, so the counts are only ever touched from the event loop.
        if not uid:
            return
        if event.get("type") == "DELETED":
            metrics.PHASES.forget(uid)
        else:
            metrics.PHASES.observe(uid, resource.kind, statuses.phase_of(body))


async def _connect(memo: kopf.Memo, identity: Identity, options: Options) -> None:
    """The API client and Event recorder every reconcile uses, in memo until the operator stops."""
    stack = AsyncExitStack()
    memo["runtime_exit_stack"] = stack
    client = await stack.enter_async_context(Kube.connect(identity.field_manager, options.kubeconfig))
    memo[reconciling.KUBE_KEY] = client
    memo[reconciling.EVENTS_KEY] = events.Recorder(client)


def _login(options: Options, **kwargs: Any) -> kopf.ConnectionInfo | None:
    if options.kubeconfig is None:
        in_cluster = kopf.login_with_service_account(**kwargs)
        server = in_cluster_server(os.environ)
        if in_cluster is not None and server is not None:
            # kopf names the API server kubernetes.default.svc, which needs the cluster's DNS;
            # the API client (and client-go) use the Service's address from the environment.
            return dataclasses.replace(in_cluster, server=server)
        if in_cluster is not None:
            return in_cluster
    return kopf.login_with_kubeconfig(**kwargs)


def _install(
    registry: kopf.OperatorRegistry,
    identity: Identity,
    options: Options,
    connected: Connected | None = None,
) -> None:
    @kopf.on.startup(registry=registry)
    async def start_runtime(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure(settings, identity, options)
        if reconciling.KUBE_KEY not in memo:  # not again when `connected` failed and kopf retries
            await _connect(memo, identity, options)
        if connected is not None:
            await connected(memo)

    @kopf.on.cleanup(registry=registry)
    async def stop_runtime(memo: kopf.Memo, **_: Any) -> None:
        stack = memo.get("runtime_exit_stack")
        if isinstance(stack, AsyncExitStack):
            await stack.aclose()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return _login(options, **kwargs)

    @kopf.on.probe(id="operator", registry=registry)
    def probe(**_: Any) -> str:
        return identity.name


def run(
    identity: Identity,
    settings_type: type[SettingsT],
    argv: Sequence[str] | None = None,
    *,
    register: Callable[[SettingsT], None] | None = None,
    connected: Connected | None = None,
) -> None:
    """Start the operator whose handlers are already registered with kopf's default registry.

    Its settings are read here, once, and kept in memo for its reconciles; `register` adds the handlers
    whose registration depends on them (timer intervals) before the operator starts; `connected` runs at
    startup once the API client is in memo, before any object is handled (the operator's own startup
    handlers, registered before the runtime's, run before it has one).
    """
    import sys

    try:
        loaded = settings_type.load(os.environ)
    except ValueError as exc:
        raise SystemExit(f"{identity.name}: bad setting {exc}") from None
    if register is not None:
        register(loaded)
    options = parse_options(sys.argv[1:] if argv is None else argv, os.environ)
    if options.kubeconfig:
        os.environ["KUBECONFIG"] = options.kubeconfig
    kopf.configure(
        verbose=options.verbose,
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.FULL,
        log_refkey="object" if options.log_format == "json" else None,
    )
    logging.getLogger("capfleet").setLevel(logging.DEBUG if options.verbose else logging.INFO)
    # At DEBUG the API client logs whole response bodies, Secrets included (NetBox tokens, SSH keys,
    # BMC passwords): it never logs below INFO, whatever --verbose says.
    logging.getLogger("kubernetes_asyncio").setLevel(logging.INFO)
    registry = kopf.get_default_registry()
    _install(registry, identity, options, connected)
    # In memo before any startup handler runs, the operator's own included.
    memo = kopf.Memo()
    memo[reconciling.SETTINGS_KEY] = loaded
    version = release()
    metrics.OPERATOR_INFO.info({"operator": identity.name, "version": version})
    logging.getLogger("capfleet").info("%s %s starting", identity.name, version)
    metrics.serve(*split_address(options.metrics_address))
    health_host, health_port = split_address(options.health_address)

    async def operate(stop_flag: asyncio.Event | None = None) -> None:
        await kopf.operator(
            registry=registry,
            clusterwide=options.clusterwide,
            namespaces=options.namespaces,
            standalone=not options.peering,
            peering_name=options.shard_name(identity),
            liveness_endpoint=f"http://{health_host}:{health_port}/healthz",
            memo=memo,
            stop_flag=stop_flag,
        )

    async def main() -> None:
        trimming = asyncio.create_task(heap.keep_trimmed())
        try:
            async with _secure_metrics(identity, options):
                await (_lead_then(operate, identity, options) if options.leader_elect else operate())
        finally:
            trimming.cancel()

    asyncio.run(main())


@asynccontextmanager
async def _secure_metrics(identity: Identity, options: Options) -> AsyncIterator[None]:
    """The HTTPS /metrics endpoint, when asked for; on standbys too, so every replica can be scraped."""
    if not options.metrics_secure_address:
        yield
        return
    host, port = split_address(options.metrics_secure_address)
    tls = securemetrics.tls_context(
        options.metrics_cert_dir, [socket.gethostname(), "localhost", "127.0.0.1"]
    )
    async with (
        Kube.connect(f"{identity.field_manager}-metrics", options.kubeconfig) as kube,
        securemetrics.serve(kube, host, port, tls),
    ):
        yield


async def _lead_then(
    operate: Callable[[asyncio.Event], Coroutine[Any, Any, None]], identity: Identity, options: Options
) -> None:
    """Run `operate` only while this replica holds the operator's Lease; stand by until then.

    Losing the Lease ends the process at once (exit 1), before another replica may take it over: kopf's
    handlers in flight are not waited for, as controller-runtime does not wait for reconciles. SIGTERM
    ends a standby at once, and a leader once kopf has stopped, after it gave the Lease up.
    """
    namespace = options.leader_election_namespace or _pod_namespace()
    pod = _pod_name() if options.leader_label else None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # kopf installs its own once it runs
        loop.add_signal_handler(signum, stopping.set)
    async with Kube.connect(f"{identity.field_manager}-leader-election", options.kubeconfig) as kube:
        elector = leadership.LeaderElector(kube, namespace, options.shard_name(identity))
        if pod is not None:
            await leadership.label_pod(kube, namespace, pod, leading=False)
        async with _standby_health(identity, options.health_address):
            acquiring = asyncio.create_task(elector.acquire())
            signalled = asyncio.create_task(stopping.wait())
            await asyncio.wait({acquiring, signalled}, return_when=asyncio.FIRST_COMPLETED)
            for task in (acquiring, signalled):
                task.cancel()
            if not acquiring.done() or acquiring.cancelled():
                return
        if pod is not None:
            await leadership.label_pod(kube, namespace, pod, leading=True)
        holding = asyncio.create_task(elector.hold())
        operator = asyncio.create_task(operate(stopping))
        await asyncio.wait({operator, holding}, return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            lost = holding.exception() if not holding.cancelled() else None
            logging.getLogger("capfleet").error("leader election lost: %s; exiting", lost)
            logging.shutdown()
            os._exit(1)
        holding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holding
        if pod is not None:
            await leadership.label_pod(kube, namespace, pod, leading=False)
        await elector.release()
        operator.result()


def _pod_name() -> str:
    name = os.environ.get("POD_NAME", "")
    if not name:
        raise SystemExit("--leader-label needs POD_NAME (the pod's own name, from the downward API)")
    return name


def _pod_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        raise SystemExit(
            "--leader-elect needs --leader-election-namespace (or POD_NAMESPACE) outside a pod"
        ) from None


@asynccontextmanager
async def _standby_health(identity: Identity, address: str) -> AsyncIterator[None]:
    """A standby's liveness endpoint, on the address kopf's takes once this replica leads."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"operator": identity.name, "standby": True})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app)
    await runner.setup()
    host, port = split_address(address)
    await web.TCPSite(runner, host, port).start()
    try:
        yield
    finally:
        await runner.cleanup()
