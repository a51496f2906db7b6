"""The CAPI waits and the folding of children into step conditions, on plain objects."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from glue_helpers import cluster

from capfleet import conditions, resources
from capfleet.api import capi, kinds
from capfleet.conditions import Update
from capi_machine_glue import gates, summaries
from capi_machine_glue.clusters import failure_domains

CLUSTER: dict[str, Any] = {
    "spec": {
        "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "HybridCluster",
            "name": "h",
        }
    },
    "status": {"initialization": {"infrastructureProvisioned": True}},
}


HYBRID = kinds.HYBRID_CLUSTER.parse(
    {"apiVersion": kinds.HYBRID_CLUSTER.resource.api_version, "kind": "HybridCluster", "spec": {}}
)


def ready(status: str, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_cluster_infrastructure_waits_in_order() -> None:
    cluster = capi.Cluster.parse(CLUSTER)
    assert gates.cluster_infrastructure("c", None, None).reason == "WaitingForCluster"
    assert gates.cluster_infrastructure("c", cluster, None).reason == "WaitingForHybridCluster"
    unprovisioned = capi.Cluster.parse({**CLUSTER, "status": {}})
    assert (
        gates.cluster_infrastructure("c", unprovisioned, HYBRID).reason == "WaitingForClusterInfrastructure"
    )
    assert gates.cluster_infrastructure("c", cluster, HYBRID).status == "True"
    other = {
        "spec": {
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "DockerCluster",
                "name": "d",
            }
        }
    }
    assert gates.cluster_infrastructure("c", capi.Cluster.parse(other), None).reason == "NotAHybridCluster"


def test_workers_wait_for_the_control_plane_and_control_plane_machines_do_not() -> None:
    cluster = capi.Cluster.parse(CLUSTER)
    worker = capi.Machine.parse({"metadata": {"labels": {}}, "spec": {}})
    cp = capi.Machine.parse({"metadata": {"labels": {"cluster.x-k8s.io/control-plane": ""}}, "spec": {}})
    assert gates.control_plane_initialized(cp, cluster).status == "True"
    assert gates.control_plane_initialized(worker, cluster).reason == "WaitingForControlPlaneInitialized"
    by_condition = capi.Cluster.parse(
        {**CLUSTER, "status": {"conditions": [{**ready("True"), "type": "ControlPlaneInitialized"}]}}
    )
    assert gates.control_plane_initialized(worker, by_condition).status == "True"
    by_field = capi.Cluster.parse(
        {**CLUSTER, "status": {"initialization": {"controlPlaneInitialized": True}}}
    )
    assert gates.control_plane_initialized(worker, by_field).status == "True"
    assert gates.bootstrap_data(worker).reason == "WaitingForBootstrapData"
    bootstrapped = capi.Machine.parse({"spec": {"bootstrap": {"dataSecretName": "w-0"}}})
    assert gates.bootstrap_data(bootstrapped) == Update.true("BootstrapDataReady", "Available", "Secret w-0")


def test_the_machine_group_is_its_controller() -> None:
    owners = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"},
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "ms", "controller": True},
    ]
    machine = capi.Machine.parse({"metadata": {"ownerReferences": owners}})
    assert gates.machine_group(machine) == "MachineSet/ms"
    assert gates.capi_owner({"ownerReferences": owners}, resources.CAPI_MACHINES) is None
    owned = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m-0"}]
    assert gates.capi_owner({"ownerReferences": owned}, resources.CAPI_MACHINES) == "m-0"


def test_a_childs_ready_condition_becomes_the_step_with_its_own_reason_and_message() -> None:
    vm = {
        "metadata": {"name": "cp-0"},
        "status": {"conditions": [ready("False", "NoCapacity", "Scheduled: full")]},
    }
    update = summaries.child_ready("VMProvisioned", "LibvirtVM", vm, "Running")
    assert update == Update.false("VMProvisioned", "NoCapacity", "LibvirtVM cp-0: Scheduled: full")
    assert summaries.child_ready("VMProvisioned", "LibvirtVM", None, "Running").reason == "Creating"
    silent = {"metadata": {"name": "cp-0"}}
    assert summaries.child_ready("VMProvisioned", "LibvirtVM", silent, "Running").reason == "Pending"
    done = {"metadata": {"name": "cp-0"}, "status": {"conditions": [ready("True")]}}
    assert summaries.child_ready("VMProvisioned", "LibvirtVM", done, "Running").status == "True"


def test_claims_are_allocated_only_when_every_claim_has_an_address() -> None:
    pool = {"poolRef": {"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"}}
    bound = {
        "metadata": {"name": "a"},
        "spec": pool,
        "status": {"addressRef": {"name": "a"}, "conditions": [ready("True")]},
    }
    unbound = {
        "metadata": {"name": "b"},
        "spec": pool,
        "status": {"conditions": [ready("False", "PoolExhausted", "no free address")]},
    }
    assert summaries.claims_ready([]).reason == "NoPools"
    assert summaries.claims_ready([("a", bound)]).status == "True"
    assert summaries.claims_ready([("a", bound), ("b", unbound)]) == Update.false(
        "AddressesAllocated", "PoolExhausted", "IPAddressClaim b: no free address"
    )
    assert summaries.claims_ready([("c", None)]).reason == "Creating"
    not_yet = {**bound, "status": {"conditions": [ready("True")]}}
    assert summaries.claims_ready([("a", not_yet)]).reason == "Pending"


def test_failure_domains_are_reported_as_the_v1beta2_list() -> None:
    assert failure_domains(cluster()) == [
        {"name": "fd-a", "controlPlane": True, "attributes": {"hypervisor.zone": "a", "site": "dc-a"}}
    ]


def test_the_blocking_step_is_the_first_not_true_after_this_passs_updates() -> None:
    pending = {"type": summaries.ADDRESSES, "status": "Unknown", "reason": "Pending"}
    before = conditions.parse([{**pending, "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    steps = summaries.METAL_STEPS
    done = [Update.true(step, "Done") for step in summaries.WAITING_STEPS]
    assert summaries.blocking_step(before, done, steps) == summaries.ADDRESSES
    assert summaries.blocking_step(before, [*done, Update.true(summaries.ADDRESSES, "Allocated")], steps) == (
        summaries.DEVICE
    )
    everything = [Update.true(step, "Done") for step in steps]
    assert summaries.blocking_step(before, everything, steps) is None


def test_the_grace_for_a_first_report_counts_only_young_children_that_have_not_reported() -> None:
    now = datetime(2026, 1, 1, 0, 1, 0, tzinfo=UTC)

    def child(created: str, reported: bool) -> dict[str, Any]:
        booting = {"type": "Ready", "status": "False", "reason": "Booting", "lastTransitionTime": created}
        ready = [booting] if reported else []
        return {"metadata": {"creationTimestamp": created}, "status": {"conditions": ready}}

    grace = summaries.REPORT_GRACE_SECONDS
    assert grace < 30, "the child created at 00:00:30 is past the grace"
    assert summaries.report_grace_left([child("2026-01-01T00:00:57Z", False)], now) == grace - 3
    assert summaries.report_grace_left([child("2026-01-01T00:00:57Z", True)], now) == 0.0
    assert summaries.report_grace_left([child("2026-01-01T00:00:30Z", False)], now) == 0.0
    young_and_old = [child("2026-01-01T00:00:30Z", False), child("2026-01-01T00:00:59Z", False)]
    assert summaries.report_grace_left(young_and_old, now) == grace - 1
    assert summaries.report_grace_left([], now) == 0.0
