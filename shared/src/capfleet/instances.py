"""Which management cluster made something outside Kubernetes: its instance name.

NetBox and hypervisors can be shared by several management clusters, whose objects may well have the same
namespace and name. Everything capfleet creates or claims out there records the instance name of the
management cluster that did it, so that no cluster adopts, or deletes, another's. The name is configured
(`CAPFLEET_INSTANCE_NAME`) or, by default, derived from the UID of the cluster's kube-system namespace:
unique per management cluster without anyone having to choose one. Each object records the name it acted
under (an annotation, before acting), so a restart, a reconfiguration or `clusterctl move` to a cluster
with another name keeps it the owner of what it made.
"""

from __future__ import annotations

from capfleet import errors, resources
from capfleet.kube import Kube

DERIVED = "auto"
"""CAPFLEET_INSTANCE_NAME's value (like empty) for a name derived from the management cluster."""


def derived(cluster_uid: str) -> str:
    """The default instance name of a management cluster, from its kube-system namespace's UID."""
    return "capfleet-" + cluster_uid.replace("-", "")[:12]


def is_derived(configured: str) -> bool:
    return configured in {"", DERIVED}


async def resolve(kube: Kube, configured: str) -> str:
    """The configured instance name, or the one derived from this cluster (RBAC: `get` on namespace
    kube-system)."""
    if not is_derived(configured):
        return configured
    namespace = await kube.get(resources.NAMESPACES, "kube-system")
    if namespace is None:
        raise errors.DependencyMissing("namespace kube-system not found", reason="NoClusterIdentity")
    return derived(namespace["metadata"]["uid"])
