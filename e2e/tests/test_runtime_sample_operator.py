"""The shared operator runtime, proven through a minimal operator run as users run operators.

The sample operator (`capfleet_e2e.sample`) reconciles a test CRD on the real control plane: it must write
Ready with a reason and the observed generation, honour the CAPI paused annotation, serve `/metrics` with
the shared families and `/healthz`, and make no API writes while idle; two replicas under leader election
hand over on a crash and on a clean stop; the secure `/metrics` answers only the callers RBAC allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet import leadership, ownership, pausing, resources, selfsigned
from capfleet.kube import Kube
from capfleet.leadership import LEADER_LABEL
from capfleet.resources import Resource
from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.operators import OperatorProcess
from capfleet_e2e.processes import free_port
from capfleet_e2e.sample import CRD_PATH
from capfleet_e2e.sample.handlers import IDENTITY
from capfleet_e2e.sample.reconciling import RELEASE_WRITES_LABEL
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

SAMPLES = Resource("sample.capfleet.dev", "v1alpha1", "samples", "Sample")
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
IDLE_WINDOW_SECONDS = 30
# What kopf logs when a replica ran the sample's handler.
HANDLED = "Handler 'reconcile_sample' succeeded"


@pytest.fixture
async def sample_crd(kube: Kube) -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    await kube.create_or_get(resources.CUSTOM_RESOURCE_DEFINITIONS, crd)

    async def established() -> bool:
        found = await kube.get(resources.CUSTOM_RESOURCE_DEFINITIONS, crd["metadata"]["name"])
        conds = ((found or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    await eventually("the Sample CRD to be established", established)


def sample(message: str) -> dict[str, Any]:
    """The Sample s1 with `message`."""
    return {
        "apiVersion": SAMPLES.api_version,
        "kind": "Sample",
        "metadata": {"name": "s1"},
        "spec": {"message": message},
    }


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == type_), None)


async def wait_reconciled(
    kube: Kube, namespace: str, generation: int, type_: str = "Ready"
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await kube.get(SAMPLES, "s1", namespace)
        found = condition(obj, type_)
        return obj if found and found.get("observedGeneration") == generation else None

    return await eventually(f"{type_} at generation {generation}", probe)


def read_url(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


def operator_writes(events: list[dict[str, Any]]) -> list[str]:
    """Write requests made by the operator (kopf's connection or capfleet's client), as `verb uri`."""
    return [
        f"{e['verb']} {e['requestURI']}"
        for e in events
        if e.get("verb") in WRITE_VERBS
        and (
            e.get("userAgent", "").startswith("kopf/") or e.get("userAgent", "").startswith("capfleet-sample")
        )
    ]


@pytest.mark.usefixtures("sample_crd")
async def test_sample_operator_reconciles_pauses_and_stays_idle(
    control_plane: Cluster, kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    operator = run_operator("capfleet_e2e.sample", namespaces=[namespace])
    await kube.create(SAMPLES, sample("hi"), namespace)

    reconciled = await wait_reconciled(kube, namespace, generation=1)
    ready = condition(reconciled, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")
    assert reconciled["status"]["echo"] == "hi"

    await kube.patch(SAMPLES, "s1", {"spec": {"message": "second"}}, namespace)
    assert (await wait_reconciled(kube, namespace, generation=2))["status"]["echo"] == "second"

    # Paused: the operator records that it saw generation 3 as paused, and leaves everything else alone.
    await kube.patch(
        SAMPLES, "s1", {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: "true"}}}, namespace
    )
    await kube.patch(SAMPLES, "s1", {"spec": {"message": "while paused"}}, namespace)
    paused = await wait_reconciled(kube, namespace, generation=3, type_="Paused")
    paused_condition = condition(paused, "Paused") or {}
    assert (paused_condition.get("status"), paused_condition.get("reason")) == ("True", "Paused")
    assert paused["status"]["echo"] == "second"

    await kube.patch(
        SAMPLES, "s1", {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: None}}}, namespace
    )

    async def resumed() -> dict[str, Any] | None:
        obj = await kube.get(SAMPLES, "s1", namespace)
        return obj if (obj or {}).get("status", {}).get("echo") == "while paused" else None

    unpaused = await eventually("reconciliation to resume after unpausing", resumed)
    assert (condition(unpaused, "Paused") or {}).get("reason") == "NotPaused"

    # The runtime's endpoints.
    health = await asyncio.to_thread(read_url, f"http://127.0.0.1:{operator.health_port}/healthz")
    assert json.loads(health)["operator"] == "sample"
    exposition = await asyncio.to_thread(operator.metrics)
    for family in (
        "capfleet_reconciles_total",
        "capfleet_reconcile_duration_seconds",
        "capfleet_backend_call_duration_seconds",
        "capfleet_objects",
        "capfleet_operator_info",
    ):
        assert f"# TYPE {family.removesuffix('_total')}" in exposition, family
    assert 'capfleet_reconciles_total{kind="Sample",result="success"}' in exposition
    assert 'capfleet_objects{kind="Sample",phase="Ready"} 1.0' in exposition

    if not isinstance(control_plane, ControlPlane):
        pytest.skip("idle writes are counted from the local control plane's audit log")
    # Idle: nothing changes for 30 s, so the operator must not write anything. The window itself is the
    # measurement; the audit log is read after it.
    active, offset = control_plane.audit_events()
    assert operator_writes(active), "the filter must see the operator's writes while it was busy"
    started = time.monotonic()
    await asyncio.sleep(IDLE_WINDOW_SECONDS)
    events, _ = control_plane.audit_events(offset)
    assert time.monotonic() - started >= IDLE_WINDOW_SECONDS
    assert operator_writes(events) == []
    assert operator.component is not None
    assert operator.component.process.poll() is None, "the operator is still running"


@pytest.mark.usefixtures("sample_crd")
async def test_a_deletion_handler_that_wrote_to_its_object_gets_its_finalizer_removed_at_the_first_try(
    control_plane: Cluster, kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("refused patches are counted from the local control plane's audit log")
    run_operator("capfleet_e2e.sample", namespaces=[namespace])
    writes = 5
    labelled = sample("bye")
    labelled["metadata"]["labels"] = {RELEASE_WRITES_LABEL: str(writes)}
    await kube.create(SAMPLES, labelled, namespace)
    reconciled = await wait_reconciled(kube, namespace, generation=1)
    assert reconciled["metadata"].get("finalizers") == [IDENTITY.finalizer]

    _, offset = control_plane.audit_events()
    await kube.delete(SAMPLES, "s1", namespace)

    async def gone() -> bool:
        return await kube.get(SAMPLES, "s1", namespace) is None

    await eventually("the Sample to be deleted", gone)
    events, _ = control_plane.audit_events(offset)
    on_it = [
        e
        for e in events
        if e.get("verb") == "patch"
        and (e.get("objectRef") or {}).get("name") == "s1"
        and f"{e['verb']} {e['requestURI']}" in operator_writes(events)
    ]
    status_writes = [e for e in on_it if (e.get("objectRef") or {}).get("subresource") == "status"]
    assert len(status_writes) == writes, "the release wrote to its object while kopf queued the events"
    # kopf's merge-patch of the released-at annotation, then its finalizer's removal: nothing refused.
    main = [e["responseStatus"]["code"] for e in on_it if e not in status_writes]
    assert main == [200, 200]


def handled_by(process: OperatorProcess) -> Counter[str]:
    """How many times the operator ran the sample's handler, per object name (from its JSON log)."""
    counts: Counter[str] = Counter()
    for line in process.log().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("message") == HANDLED + ".":
                counts[record["object"]["name"]] += 1
    return counts


@pytest.mark.usefixtures("sample_crd")
async def test_two_shards_split_the_objects_and_one_relabelled_is_handed_over(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    shards = {
        shard: run_operator(
            "capfleet_e2e.sample",
            namespaces=[namespace],
            extra_args=[
                *("--watch-filter", shard, "--log-format", "json"),
                *("--leader-elect", "--leader-election-namespace", namespace),
            ],
        )
        for shard in ("a", "b")
    }
    names = {shard: [f"{shard}{i}" for i in range(1, 4)] for shard in shards}

    async def echoed(name: str, message: str) -> bool:
        obj = await kube.get(SAMPLES, name, namespace)
        return ((obj or {}).get("status") or {}).get("echo") == message

    for shard, objects in names.items():
        for name in objects:
            body = sample("one")
            body["metadata"] = {"name": name, "labels": {ownership.WATCH_FILTER_LABEL: shard}}
            await kube.create(SAMPLES, body, namespace)
    for name in names["a"] + names["b"]:
        await eventually(f"{name} reconciled", functools.partial(echoed, name, "one"))
    for shard, process in shards.items():
        assert set(handled_by(process)) == set(names[shard]), shard

    # Relabelled: shard a's watch sees a1 leave, b's sees it come, and only b serves it from then on.
    before = handled_by(shards["a"])["a1"]
    await kube.patch(SAMPLES, "a1", {"metadata": {"labels": {ownership.WATCH_FILTER_LABEL: "b"}}}, namespace)
    await kube.patch(SAMPLES, "a1", {"spec": {"message": "two"}}, namespace)
    await eventually("a1 reconciled by shard b", lambda: echoed("a1", "two"))
    assert handled_by(shards["b"])["a1"] >= 1
    assert handled_by(shards["a"])["a1"] == before
    assert set(handled_by(shards["a"])) == set(names["a"])
    # Each shard elected itself leader through a Lease of its own.
    for shard in shards:
        lease = await kube.get(resources.LEASES, f"capfleet-sample-{shard}", namespace)
        assert ((lease or {}).get("spec") or {}).get("holderIdentity"), shard


@pytest.mark.usefixtures("sample_crd")
async def test_two_replicas_one_acts_and_the_standby_takes_over_within_the_lease_time(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    elect = ["--leader-elect", "--leader-election-namespace", namespace, "--leader-label"]
    timings = leadership.Timings()
    # Each replica's pod, as the Deployment's would be (no kubelet runs them): the leader labels its own.
    for pod in ("replica-1", "replica-2", "replica-3"):
        body = {"metadata": {"name": pod}, "spec": {"containers": [{"name": "manager", "image": "sample"}]}}
        await kube.create(resources.PODS, body, namespace)

    async def labelled() -> list[str]:
        pods = await kube.list(resources.PODS, namespace)
        return sorted(
            p["metadata"]["name"] for p in pods if (p["metadata"].get("labels") or {}).get(LEADER_LABEL)
        )

    def replica(pod: str) -> OperatorProcess:
        return run_operator(
            "capfleet_e2e.sample", namespaces=[namespace], extra_args=elect, env={"POD_NAME": pod}
        )

    async def holder() -> str | None:
        lease = await kube.get(resources.LEASES, "capfleet-sample", namespace)
        held: str | None = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return held

    async def taken_from(previous: str) -> float:
        """Seconds until a replica other than `previous` holds the Lease."""
        since = time.monotonic()

        async def other() -> str | None:
            now = await holder()
            return now if now not in (None, previous) else None

        await eventually(f"a replica other than {previous} to hold the Lease", other, 60, 0.5)
        return time.monotonic() - since

    first = replica("replica-1")
    leader = await eventually("the first replica to hold the Lease", holder)
    second = replica("replica-2")
    standby = json.loads(await asyncio.to_thread(read_url, f"http://127.0.0.1:{second.health_port}/healthz"))
    assert standby == {"operator": "sample", "standby": True}

    await kube.create(SAMPLES, sample("a"), namespace)
    await wait_reconciled(kube, namespace, generation=1)
    assert await holder() == leader
    assert HANDLED in first.log()
    assert HANDLED not in second.log(), "the standby acted while the leader held the Lease"
    assert await labelled() == ["replica-1"]

    # A crash: the standby waits until it has seen no renewal for a whole Lease duration, no longer.
    first.kill()
    took = await taken_from(leader)
    print(f"\nhand-over after SIGKILL: {took:.1f} s")
    # The last renewal came at most a retry period before the kill, and the standby saw it at most one
    # retry period after it was written.
    assert (
        timings.duration - timings.retry_period - 1 <= took <= timings.duration + 2 * timings.retry_period + 2
    )
    await kube.patch(SAMPLES, "s1", {"spec": {"message": "b"}}, namespace)
    assert (await wait_reconciled(kube, namespace, generation=2))["status"]["echo"] == "b"
    assert HANDLED in second.log()
    # The killed replica's label stays on its pod (its restarted container takes it off as it starts).
    assert await labelled() == ["replica-1", "replica-2"]

    # A clean stop (a rolling update's SIGTERM) gives the Lease up: the next standby starts at once.
    third = replica("replica-3")
    successor = await holder()
    assert successor is not None
    assert second.component is not None
    await asyncio.to_thread(second.component.stop)
    assert second.component.process.returncode == 0
    took = await taken_from(successor)
    print(f"hand-over after SIGTERM: {took:.1f} s")
    assert took <= 2 * timings.retry_period + 2
    await kube.patch(SAMPLES, "s1", {"spec": {"message": "c"}}, namespace)
    assert (await wait_reconciled(kube, namespace, generation=3))["status"]["echo"] == "c"
    assert HANDLED in third.log()
    assert await labelled() == ["replica-1", "replica-3"], "a clean stop takes its label off"


@pytest.mark.usefixtures("sample_crd")
async def test_secure_metrics_answer_only_the_callers_rbac_allows(
    control_plane: Cluster, namespace: str, run_operator: RunOperator, tmp_path: Path
) -> None:
    cert, key = selfsigned.certificate(["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    port = free_port()
    secure = ["--metrics-secure-address", f"127.0.0.1:{port}", "--metrics-cert-dir", str(tmp_path)]
    run_operator("capfleet_e2e.sample", namespaces=[namespace], extra_args=secure)

    kubectl = control_plane.kubectl
    reader = repo_root() / "deploy" / "base" / "metrics-reader.yaml"
    kubectl("apply", "--server-side", "--field-manager=capfleet-tests", "-f", str(reader))
    for account in ("scraper", "stranger"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    binding = f"{namespace}-scraper"
    kubectl(
        "create", "clusterrolebinding", binding, "--clusterrole=capfleet-metrics-reader",
        f"--serviceaccount={namespace}:scraper",
    )  # fmt: skip
    try:
        scraper, stranger = (
            kubectl("create", "token", a, "-n", namespace).strip() for a in ("scraper", "stranger")
        )
        tls = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))  # the endpoint's TLS is verified

        def scrape(token: str | None) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=10, context=tls) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, ""

        assert (await asyncio.to_thread(scrape, None))[0] == 401
        assert (await asyncio.to_thread(scrape, "not-a-token"))[0] == 401
        assert (await asyncio.to_thread(scrape, stranger))[0] == 403
        status, exposition = await asyncio.to_thread(scrape, scraper)
        assert status == 200
        assert 'capfleet_operator_info{operator="sample"' in exposition
    finally:
        kubectl("delete", "clusterrolebinding", binding)
