"""One benchmark scenario: a provider, one pool, N claims created at once, measured until all are bound.

Each provider runs as a child process under its own ServiceAccount token, so the audit log tells its
requests apart from everyone else's by user name, whatever user agents its libraries send. The clock
starts just before the first claim is created and stops when the last claim has its `status.addressRef`
and the IPAddress it names exists (both seen on watches). The provider is then left until it has been
quiet for a moment, so trailing writes count too, its CPU time and peak RSS are read from /proc, and
only then is it stopped and the outcome checked from fresh lists.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capfleet.kube import Kube
from capfleet.resources import IP_ADDRESS_CLAIMS, IP_ADDRESSES
from capfleet_e2e.bench.measure import ScenarioResult, check_allocations, read_proc, requests_of
from capfleet_e2e.bench.watch import Watch
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.processes import Component, free_port, wait_for

Obj = dict[str, Any]
START_TIMEOUT = 120.0
QUIET_SECONDS = 2.0
QUIET_TIMEOUT = 60.0
FIELD_MANAGER = "capfleet-bench"


@dataclass(frozen=True)
class Provider:
    """What differs between the two sides: the pool object and how the provider process is started."""

    name: str
    description: str
    namespace: str
    pool: Obj
    argv: Callable[[Path, int, int], list[str]]  # (kubeconfig, health port, metrics port) -> argv
    health_path: str = "/healthz"

    @property
    def pool_ref(self) -> Obj:
        group = self.pool["apiVersion"].split("/")[0]
        return {"apiGroup": group, "kind": self.pool["kind"], "name": self.pool["metadata"]["name"]}


class AuditTail:
    """Reads the apiserver's audit log from where the previous read stopped."""

    def __init__(self, control_plane: ControlPlane) -> None:
        self._control_plane = control_plane
        self._offset = 0

    def read(self) -> list[Obj]:
        events, self._offset = self._control_plane.audit_events(self._offset)
        return events


def _http_ok(url: str) -> bool | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return True if response.status == 200 else None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _service_account(cp: ControlPlane, provider: Provider, scratch: Path) -> tuple[Path, str]:
    """A kubeconfig for a cluster-admin ServiceAccount of the provider's own, and its user name."""
    ns, name = provider.namespace, f"bench-{provider.name}"
    cp.kubectl("create", "serviceaccount", name, "-n", ns)
    cp.kubectl(
        "create",
        "clusterrolebinding",
        f"capfleet-bench:{provider.name}",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={ns}:{name}",
    )
    token = cp.kubectl("create", "token", name, "-n", ns, "--duration=24h").strip()
    user = f"system:serviceaccount:{ns}:{name}"
    return write_kubeconfig(scratch / f"{provider.name}.kubeconfig", cp.server, cp.ca_path, user, token), user


def _wait_quiet(tail: AuditTail, username: str, component: Component) -> list[Obj]:
    """Poll the audit log until `username` has made no request for QUIET_SECONDS (or QUIET_TIMEOUT passes).

    Returns that user's events read meanwhile. A provider that never goes quiet is not an error here.
    """
    mine: list[Obj] = []
    last = time.monotonic()
    deadline = last + QUIET_TIMEOUT
    while True:
        component.check_alive()
        new = [e for e in tail.read() if (e.get("user") or {}).get("username") == username]
        now = time.monotonic()
        if new:
            mine += new
            last = now
        if now - last >= QUIET_SECONDS or now >= deadline:
            return mine
        time.sleep(0.2)


async def _create_claims(kubeconfig: Path, provider: Provider, names: list[str], concurrency: int) -> None:
    limit = asyncio.Semaphore(concurrency)
    async with Kube.connect(FIELD_MANAGER, str(kubeconfig)) as kube:

        async def create(name: str) -> None:
            body = {
                "apiVersion": IP_ADDRESS_CLAIMS.api_version,
                "kind": IP_ADDRESS_CLAIMS.kind,
                "metadata": {"name": name},
                "spec": {"poolRef": provider.pool_ref},
            }
            async with limit:
                await kube.create(IP_ADDRESS_CLAIMS, body, provider.namespace)

        await asyncio.gather(*(create(n) for n in names))


async def _list_outcome(kubeconfig: Path, namespace: str) -> tuple[list[Obj], list[Obj]]:
    async with Kube.connect(FIELD_MANAGER, str(kubeconfig)) as kube:
        claims = await kube.list(IP_ADDRESS_CLAIMS, namespace)
        addresses = await kube.list(IP_ADDRESSES, namespace)
    return claims, addresses


def _all_bound(claims: Watch, addresses: Watch, names: list[str]) -> float | None:
    """The moment the last claim was bound to an existing IPAddress, once all are; else None."""
    last = 0.0
    for name in names:
        claim = claims.ready(name)
        if claim is None:
            return None
        address = addresses.ready(claim[1])
        if address is None:
            return None
        last = max(last, claim[0], address[0])
    return last


def run_scenario(
    cp: ControlPlane,
    tail: AuditTail,
    provider: Provider,
    claims: int,
    concurrency: int,
    timeout: float,
    scratch: Path,
) -> ScenarioResult:
    """Run one provider's scenario; failures end up in `result.error`, never as an exception."""
    result = ScenarioResult(provider.name, provider.description, claims)
    component: Component | None = None
    watches: list[Watch] = []
    try:
        cp.kubectl("create", "namespace", provider.namespace)
        kubeconfig, username = _service_account(cp, provider, scratch)
        cp.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
            stdin=json.dumps(provider.pool),
        )
        tail.read()
        health, metrics = free_port(), free_port()
        component = Component(
            f"bench-{provider.name}", provider.argv(kubeconfig, health, metrics), cp.log_dir
        )
        url = f"http://127.0.0.1:{health}{provider.health_path}"
        wait_for(f"{provider.name} {provider.health_path}", lambda: _http_ok(url), START_TIMEOUT, [component])
        result.startup_requests = requests_of(_wait_quiet(tail, username, component), username).total

        def ready_claim(o: Obj) -> str | None:
            return ((o.get("status") or {}).get("addressRef") or {}).get("name") or None

        def ready_address(o: Obj) -> str | None:
            return (o.get("spec") or {}).get("address") or None

        claim_watch, address_watch = (
            Watch(cp.server, cp.admin_token, cp.ca_path, resource, provider.namespace, ready).start()
            for resource, ready in ((IP_ADDRESS_CLAIMS, ready_claim), (IP_ADDRESSES, ready_address))
        )
        watches = [claim_watch, address_watch]
        names = [f"claim-{i:04d}" for i in range(claims)]
        cpu_before = read_proc(component.pid).cpu_seconds
        began = time.monotonic()
        asyncio.run(_create_claims(cp.kubeconfig, provider, names, concurrency))
        result.create_seconds = time.monotonic() - began
        done = wait_for(
            f"{claims} claims bound by {provider.name}",
            lambda: _all_bound(claim_watch, address_watch, names),
            timeout,
            [component],
        )
        result.seconds_to_all_bound = done - began
        result.claims_per_second = claims / result.seconds_to_all_bound
        events = _wait_quiet(tail, username, component)
        sample = read_proc(component.pid)
        events += tail.read()
        requests = requests_of(events, username)
        result.requests, result.requests_by_verb, result.user_agents = (
            requests.total,
            requests.by_verb,
            requests.user_agents,
        )
        result.requests_per_claim = requests.total / claims
        result.cpu_seconds = sample.cpu_seconds
        result.cpu_burst_seconds = sample.cpu_seconds - cpu_before
        result.peak_rss_mib = sample.peak_rss_bytes / 2**20
    except Exception as e:
        result.error = f"{type(e).__name__}: {e}"
    finally:
        for watch in watches:
            watch.stop()
        if component is not None:
            component.stop()
    try:
        outcome = check_allocations(*asyncio.run(_list_outcome(cp.kubeconfig, provider.namespace)))
    except Exception as e:
        result.error = result.error or f"checking the outcome failed: {type(e).__name__}: {e}"
        return result
    result.bound, result.duplicates = outcome.bound, outcome.duplicates
    result.problems = outcome.problems + (
        [f"{len(outcome.unbound)} claims unbound"] if outcome.unbound else []
    )
    return result
