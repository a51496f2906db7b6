"""The glue's settings keep their variable names, its context comes from memo, and what wakes each of its
objects: a child by ownerReference, a CAPI Machine its HybridMachine, a Cluster every object of it."""

from __future__ import annotations

from typing import Any

import pytest

from capfleet import errors, events, kube, reconciling, resources
from capfleet.api import kinds
from capfleet.controller.caches import WatchCache
from capfleet.controller.engine import Engine, Key
from capfleet.controller.watching import CACHE_KEY
from capi_machine_glue import handlers
from capi_machine_glue.contexts import CHILDREN, Context
from capi_machine_glue.deletions import ChildrenRemaining
from capi_machine_glue.settings import GlueSettings

KEY = Key("ns", "m")


def test_settings_keep_their_variable_names() -> None:
    assert GlueSettings.load({}) == GlueSettings(
        resync_seconds=600.0, settle_seconds=0.5, deletion_poll_seconds=2.0
    )
    loaded = GlueSettings.load(
        {
            "CAPFLEET_GLUE_RESYNC_SECONDS": "600",
            "CAPFLEET_GLUE_SETTLE_SECONDS": "0",
            "CAPFLEET_GLUE_DELETION_POLL_SECONDS": "0.5",
        }
    )
    assert loaded == GlueSettings(resync_seconds=600.0, settle_seconds=0.0, deletion_poll_seconds=0.5)
    with pytest.raises(ValueError, match="CAPFLEET_GLUE_RESYNC_SECONDS"):
        GlueSettings.load({"CAPFLEET_GLUE_RESYNC_SECONDS": "soon"})


def test_the_context_comes_from_what_startup_put_in_memo() -> None:
    client = kube.Kube.__new__(kube.Kube)
    memo: dict[str, Any] = {
        reconciling.KUBE_KEY: client,
        reconciling.EVENTS_KEY: events.Recorder(client),
        reconciling.SETTINGS_KEY: GlueSettings(resync_seconds=5.0),
    }
    with pytest.raises(RuntimeError, match="no WatchCache"):
        Context.from_memo(memo, reads=client)
    memo[CACHE_KEY] = WatchCache()
    ctx = Context.from_memo(memo, reads=client)
    assert ctx.settings.resync_seconds == 5.0
    assert ctx.cache is memo[CACHE_KEY]
    assert ctx.reads is client


def test_deletion_polls_at_the_setting_then_backs_off() -> None:
    remaining = ChildrenRemaining("waiting", poll_seconds=0.5)
    assert [remaining.delay(retry) for retry in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1", **extra}}


def keys_of(engine: Engine[Context]) -> set[Key]:
    taken = set()
    while (key := engine.queue.schedule.take()) is not None:
        taken.add(key)
        engine.queue.done(key)
    return taken


def test_what_wakes_a_hybrid_machine() -> None:
    engine = Engine(handlers.MACHINE_CONTROLLER)
    cluster_label = {"cluster.x-k8s.io/cluster-name": "c1"}
    for name, labels in [("m", cluster_label), ("other", {"cluster.x-k8s.io/cluster-name": "c2"})]:
        engine.seen(kinds.HYBRID_MACHINE.resource, "ADDED", meta(name, labels=labels))
    assert keys_of(engine) == {KEY, Key("ns", "other")}
    owned = meta("m-eth0-0", ownerReferences=[{"kind": "HybridMachine", "name": "m"}])
    for child in CHILDREN:
        engine.seen(child, "MODIFIED", owned)
        assert keys_of(engine) == {KEY}, child.kind
    machine = {
        **meta("m-abc"),
        "spec": {"clusterName": "c1", "infrastructureRef": {"kind": "HybridMachine", "name": "m"}},
    }
    engine.seen(resources.CAPI_MACHINES, "MODIFIED", machine)
    assert keys_of(engine) == {KEY}
    engine.seen(resources.CAPI_CLUSTERS, "MODIFIED", meta("c1"))
    assert keys_of(engine) == {KEY}, "every machine of that cluster, and only those"
    engine.seen(kinds.HYBRID_CLUSTER.resource, "MODIFIED", meta("c1-infra", labels=cluster_label))
    assert keys_of(engine) == {KEY}
    engine.seen(resources.IP_ADDRESSES, "MODIFIED", meta("m-eth0-0"))
    assert keys_of(engine) == set(), "an IPAddress is only cached: its claim's change wakes the machine"


def test_what_wakes_a_hybrid_cluster_and_that_one_managed_elsewhere_is_left_alone() -> None:
    engine = Engine(handlers.CLUSTER_CONTROLLER)
    owner = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1"}]
    engine.seen(kinds.HYBRID_CLUSTER.resource, "ADDED", meta("c1-infra", ownerReferences=owner))
    managed = {"cluster.x-k8s.io/managed-by": "someone"}
    engine.seen(
        kinds.HYBRID_CLUSTER.resource, "ADDED", meta("theirs", ownerReferences=owner, annotations=managed)
    )
    assert keys_of(engine) == {Key("ns", "c1-infra")}
    engine.seen(resources.CAPI_CLUSTERS, "MODIFIED", meta("c1"))
    assert keys_of(engine) == {Key("ns", "c1-infra")}
    vip = meta("c1-infra-endpoint", ownerReferences=[{"kind": "HybridCluster", "name": "c1-infra"}])
    engine.seen(resources.IP_ADDRESS_CLAIMS, "MODIFIED", vip)
    assert keys_of(engine) == {Key("ns", "c1-infra")}


def test_the_glues_intervals_come_from_its_settings() -> None:
    memo = {reconciling.SETTINGS_KEY: GlueSettings(resync_seconds=42.0, settle_seconds=0.25)}
    tuned = handlers.tuned(memo, handlers.MACHINE_CONTROLLER)  # type: ignore[arg-type]
    assert (tuned.resync_seconds, tuned.settle_seconds) == (42.0, 0.25)
    assert errors.Waiting("x").delay(0) is not None
