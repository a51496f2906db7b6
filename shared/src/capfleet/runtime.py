"""How every capfleet operator starts: identity, kopf settings, options, metrics, probes, logging.

Each operator's `__main__` imports its handlers (which register with kopf's default registry) and calls
`run(Identity("<operator>"), <its Settings>)`. Everything that must be the same across the fleet lives
here: each operator's own finalizer, annotation prefix and peering name (so two operators never mistake
each other's marks), the liveness endpoint, the `/metrics` server, structured logging, Events only on
transitions, and the API client, Event recorder and settings kept in kopf's `memo`
(`capfleet.reconciling` reads them back).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import kopf

from capfleet import errors, events, metrics, reconciling
from capfleet.kube import Kube

P = ParamSpec("P")
R = TypeVar("R")
SettingsT = TypeVar("SettingsT", bound=reconciling.Settings)

VERSION = "0.1.0"


@dataclass(frozen=True)
class Identity:
    """Names that keep one operator's marks on shared objects apart from another's."""

    name: str

    @property
    def finalizer(self) -> str:
        return f"{self.name}.capfleet.dev/finalizer"

    @property
    def annotation_prefix(self) -> str:
        return f"{self.name}.capfleet.dev"

    @property
    def peering_name(self) -> str:
        return f"capfleet-{self.name}"

    @property
    def field_manager(self) -> str:
        return f"capfleet-{self.name}"


@dataclass(frozen=True)
class Options:
    """Command-line flags, each with an environment variable for container images."""

    namespaces: tuple[str, ...] = ()
    health_address: str = "0.0.0.0:9440"
    metrics_address: str = "0.0.0.0:8080"
    log_format: str = "plain"
    verbose: bool = False
    standalone: bool = False
    kubeconfig: str | None = None

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Options from flags, falling back to `CAPFLEET_*` variables, then to the defaults."""
    defaults = Options()
    env_namespaces = tuple(ns for ns in environ.get("CAPFLEET_NAMESPACES", "").split(",") if ns)
    parser = argparse.ArgumentParser(description="A capfleet operator.")
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        default=None,
        help="watch only this namespace (repeatable); all namespaces when omitted",
    )
    parser.add_argument(
        "--health-address",
        default=environ.get("CAPFLEET_HEALTH_ADDRESS", defaults.health_address),
        help="host:port of the liveness endpoint (/healthz)",
    )
    parser.add_argument(
        "--metrics-address",
        default=environ.get("CAPFLEET_METRICS_ADDRESS", defaults.metrics_address),
        help="host:port of the Prometheus endpoint (/metrics)",
    )
    parser.add_argument(
        "--log-format",
        choices=["plain", "json"],
        default=environ.get("CAPFLEET_LOG_FORMAT", defaults.log_format),
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", default=environ.get("CAPFLEET_VERBOSE", "") in {"1", "true"}
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        default=environ.get("CAPFLEET_STANDALONE", "") in {"1", "true"},
        help="do not coordinate with other instances through a kopf peering object",
    )
    parser.add_argument("--kubeconfig", default=environ.get("KUBECONFIG") or None)
    args = parser.parse_args(list(argv))
    return Options(
        namespaces=tuple(args.namespaces or env_namespaces),
        health_address=args.health_address,
        metrics_address=args.metrics_address,
        log_format=args.log_format,
        verbose=args.verbose,
        standalone=args.standalone,
        kubeconfig=args.kubeconfig,
    )


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


def configure(settings: kopf.OperatorSettings, identity: Identity, options: Options) -> None:
    """kopf settings that give each operator its own marks and keep idle operators silent."""
    settings.persistence.finalizer = identity.finalizer
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=identity.annotation_prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=identity.annotation_prefix, key="last-handled-configuration"
    )
    settings.peering.name = identity.peering_name
    settings.peering.mandatory = False
    settings.peering.standalone = options.standalone
    settings.peering.clusterwide = options.clusterwide
    # Events come from capfleet.events on transitions; kopf would post one per retry.
    settings.posting.enabled = False
    settings.networking.connect_timeout = 10
    settings.watching.server_timeout = 300


def reconciler(kind: str) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Wrap a handler: record its duration and result, and turn capfleet errors into kopf retries."""

    def decorate(handler: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(handler)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.monotonic()
            result = "error"
            try:
                value = await handler(*args, **kwargs)
                result = "success"
                return value
            except errors.CapfleetError as exc:
                retry = kwargs.get("retry", 0)
                translated = errors.to_kopf(exc, retry if isinstance(retry, int) else 0)
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


def _install(
    registry: kopf.OperatorRegistry,
    identity: Identity,
    options: Options,
) -> None:
    @kopf.on.startup(registry=registry)
    async def start_runtime(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure(settings, identity, options)
        stack = AsyncExitStack()
        memo["runtime_exit_stack"] = stack
        client = await stack.enter_async_context(Kube.connect(identity.field_manager, options.kubeconfig))
        memo[reconciling.KUBE_KEY] = client
        memo[reconciling.EVENTS_KEY] = events.Recorder(client)

    @kopf.on.cleanup(registry=registry)
    async def stop_runtime(memo: kopf.Memo, **_: Any) -> None:
        stack = memo.get("runtime_exit_stack")
        if isinstance(stack, AsyncExitStack):
            await stack.aclose()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if options.kubeconfig is None:
            in_cluster = kopf.login_with_service_account(**kwargs)
            if in_cluster is not None:
                return in_cluster
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.probe(id="operator", registry=registry)
    def probe(**_: Any) -> str:
        return identity.name


def run(
    identity: Identity,
    settings_type: type[SettingsT],
    argv: Sequence[str] | None = None,
    *,
    register: Callable[[SettingsT], None] | None = None,
) -> None:
    """Start the operator whose handlers are already registered with kopf's default registry.

    Its settings are read here, once, and kept in memo for its reconciles; `register` adds the handlers
    whose registration depends on them (timer intervals) before the operator starts.
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
    _install(registry, identity, options)
    # In memo before any startup handler runs, the operator's own included.
    memo = kopf.Memo()
    memo[reconciling.SETTINGS_KEY] = loaded
    metrics.OPERATOR_INFO.info({"operator": identity.name, "version": VERSION})
    metrics.serve(*split_address(options.metrics_address))
    health_host, health_port = split_address(options.health_address)
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=options.clusterwide,
            namespaces=options.namespaces,
            standalone=options.standalone,
            peering_name=identity.peering_name,
            liveness_endpoint=f"http://{health_host}:{health_port}/healthz",
            memo=memo,
        )
    )
