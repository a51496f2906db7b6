"""The CAPI contract's waits, in its order: cluster infrastructure, control plane (workers), bootstrap data.

Each wait is a condition with a reason, so a machine that does nothing says why. These read only CAPI's
objects (Cluster, Machine), typed, as every infrastructure provider must: the HybridCluster's own status
is not what CAPI considers provisioned until the Cluster says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions
from capfleet.api import capi, kinds
from capfleet.api.hybrid_clusters import HybridCluster
from capfleet.conditions import Update
from capfleet.resources import Resource
from capi_machine_glue.summaries import BOOTSTRAP, CLUSTER_INFRASTRUCTURE, CONTROL_PLANE

CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"


def capi_owner(meta: Mapping[str, Any], resource: Resource) -> str | None:
    """The name of the object's owner of CAPI's kind `resource` (a Machine, a Cluster), if any."""
    for ref in meta.get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("kind") == resource.kind and api_version.startswith(resource.group + "/"):
            return str(ref["name"])
    return None


def infrastructure_ref(cluster: capi.Cluster) -> str | None:
    """The name of the Cluster's HybridCluster, if its infrastructure is one."""
    ref = cluster.spec.infrastructure_ref
    if ref is None or ref.kind != kinds.HYBRID_CLUSTER.kind:
        return None
    group = kinds.INFRASTRUCTURE_GROUP if ref.api_group is None else ref.api_group
    if group != kinds.INFRASTRUCTURE_GROUP:
        return None
    return ref.name or None


def cluster_infrastructure(
    cluster_name: str, cluster: capi.Cluster | None, hybrid_cluster: HybridCluster | None
) -> Update:
    if cluster is None:
        return Update.false(CLUSTER_INFRASTRUCTURE, "WaitingForCluster", f"Cluster {cluster_name} not found")
    if infrastructure_ref(cluster) is None:
        return Update.false(
            CLUSTER_INFRASTRUCTURE,
            "NotAHybridCluster",
            f"Cluster {cluster_name}'s infrastructureRef is not a HybridCluster",
        )
    if hybrid_cluster is None:
        return Update.false(
            CLUSTER_INFRASTRUCTURE,
            "WaitingForHybridCluster",
            f"HybridCluster {infrastructure_ref(cluster)} not found",
        )
    if not cluster.status.initialization.infrastructure_provisioned:
        return Update.false(
            CLUSTER_INFRASTRUCTURE,
            "WaitingForClusterInfrastructure",
            f"Cluster {cluster_name}'s infrastructure is not provisioned yet",
        )
    return Update.true(CLUSTER_INFRASTRUCTURE, "Provisioned")


def is_control_plane(machine: capi.Machine) -> bool:
    return CONTROL_PLANE_LABEL in machine.metadata.labels


def control_plane_initialized(machine: capi.Machine, cluster: capi.Cluster) -> Update:
    """True at once for control-plane machines; workers wait for the Cluster's control plane."""
    if is_control_plane(machine):
        return Update.true(CONTROL_PLANE, "ControlPlaneMachine", "this machine is part of the control plane")
    initialized = bool(cluster.status.initialization.control_plane_initialized) or conditions.is_true(
        conditions.parse(cluster.status.conditions), "ControlPlaneInitialized"
    )
    if not initialized:
        return Update.false(
            CONTROL_PLANE,
            "WaitingForControlPlaneInitialized",
            "the cluster's control plane is not initialized",
        )
    return Update.true(CONTROL_PLANE, "Initialized")


def data_secret_name(machine: capi.Machine) -> str | None:
    return machine.spec.bootstrap.data_secret_name or None


def node_joined(machine: capi.Machine) -> bool:
    """Whether the Machine has its Node (CAPI sets the nodeRef once a Node with its providerID exists)."""
    return machine.status.node_ref is not None


def bootstrap_data(machine: capi.Machine) -> Update:
    name = data_secret_name(machine)
    if name is None:
        return Update.false(
            BOOTSTRAP, "WaitingForBootstrapData", "the Machine's bootstrap data secret is not set yet"
        )
    return Update.true(BOOTSTRAP, "Available", f"Secret {name}")


def machine_group(machine: capi.Machine) -> str | None:
    """The Machine's controller (MachineSet or control plane), the natural anti-affinity group."""
    for ref in machine.metadata.owner_references:
        if ref.controller:
            return f"{ref.kind}/{ref.name}"
    return None


def failure_domain(machine: capi.Machine) -> str | None:
    return machine.spec.failure_domain or None
