"""The CAPI contract's waits, in its order: cluster infrastructure, control plane (workers), bootstrap data.

Each wait is a condition with a reason, so a machine that does nothing says why. These read only CAPI's
objects (Cluster, Machine), as every infrastructure provider must: the HybridCluster's own status is not
what CAPI considers provisioned until the Cluster says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import conditions
from capfleet.conditions import Update
from capi_machine_glue.summaries import BOOTSTRAP, CLUSTER_INFRASTRUCTURE, CONTROL_PLANE

CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
HYBRID_CLUSTER_KIND = "HybridCluster"
INFRASTRUCTURE_GROUP = "infrastructure.cluster.x-k8s.io"

Obj = Mapping[str, Any]


def _initialization(obj: Obj) -> Mapping[str, Any]:
    return (obj.get("status") or {}).get("initialization") or {}


def infrastructure_ref(cluster: Obj) -> str | None:
    """The name of the Cluster's HybridCluster, if its infrastructure is one."""
    ref = (cluster.get("spec") or {}).get("infrastructureRef") or {}
    if (
        ref.get("kind") != HYBRID_CLUSTER_KIND
        or ref.get("apiGroup", INFRASTRUCTURE_GROUP) != INFRASTRUCTURE_GROUP
    ):
        return None
    name = ref.get("name")
    return str(name) if name else None


def cluster_infrastructure(cluster_name: str, cluster: Obj | None, hybrid_cluster: Obj | None) -> Update:
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
    if not _initialization(cluster).get("infrastructureProvisioned"):
        return Update.false(
            CLUSTER_INFRASTRUCTURE,
            "WaitingForClusterInfrastructure",
            f"Cluster {cluster_name}'s infrastructure is not provisioned yet",
        )
    return Update.true(CLUSTER_INFRASTRUCTURE, "Provisioned")


def is_control_plane(machine: Obj) -> bool:
    return CONTROL_PLANE_LABEL in ((machine.get("metadata") or {}).get("labels") or {})


def control_plane_initialized(machine: Obj, cluster: Obj) -> Update:
    """True at once for control-plane machines; workers wait for the Cluster's control plane."""
    if is_control_plane(machine):
        return Update.true(CONTROL_PLANE, "ControlPlaneMachine", "this machine is part of the control plane")
    initialized = bool(_initialization(cluster).get("controlPlaneInitialized")) or conditions.is_true(
        conditions.parse((cluster.get("status") or {}).get("conditions")), "ControlPlaneInitialized"
    )
    if not initialized:
        return Update.false(
            CONTROL_PLANE,
            "WaitingForControlPlaneInitialized",
            "the cluster's control plane is not initialized",
        )
    return Update.true(CONTROL_PLANE, "Initialized")


def data_secret_name(machine: Obj) -> str | None:
    name = ((machine.get("spec") or {}).get("bootstrap") or {}).get("dataSecretName")
    return str(name) if name else None


def bootstrap_data(machine: Obj) -> Update:
    name = data_secret_name(machine)
    if name is None:
        return Update.false(
            BOOTSTRAP, "WaitingForBootstrapData", "the Machine's bootstrap data secret is not set yet"
        )
    return Update.true(BOOTSTRAP, "Available", f"Secret {name}")


def machine_group(machine: Obj) -> str | None:
    """The Machine's controller (MachineSet or control plane), the natural anti-affinity group."""
    for ref in (machine.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None


def failure_domain(machine: Obj) -> str | None:
    value = (machine.get("spec") or {}).get("failureDomain")
    return str(value) if value else None
