"""Where each Kubernetes resource capfleet touches lives in the API.

The typed client (`capfleet.kube`), the CRD generator and the test harness all need a resource's group,
version, plural and scope; this module is the one place that names them, so a path is never spelled by
hand twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    """A REST resource: `group` is empty for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def watch(self) -> tuple[str, str, str]:
        """kopf's resource arguments: `@kopf.on.create(*resource.watch)`."""
        return (self.group, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path of the collection, or of one object (and its subresource) when `name` is given."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            prefix += f"/namespaces/{quote(namespace, safe='')}"
        path = f"{prefix}/{self.plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
            if subresource is not None:
                path += f"/{subresource}"
        return path


# Core and upstream resources the fleet reads or writes.
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
PODS = Resource("", "v1", "pods", "Pod")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
EVENTS = Resource("", "v1", "events", "Event")
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

CAPI_CLUSTERS = Resource("cluster.x-k8s.io", "v1beta2", "clusters", "Cluster")
CAPI_MACHINES = Resource("cluster.x-k8s.io", "v1beta2", "machines", "Machine")
IP_ADDRESS_CLAIMS = Resource("ipam.cluster.x-k8s.io", "v1beta2", "ipaddressclaims", "IPAddressClaim")
IP_ADDRESSES = Resource("ipam.cluster.x-k8s.io", "v1beta2", "ipaddresses", "IPAddress")
KCPS = Resource("controlplane.cluster.x-k8s.io", "v1beta2", "kubeadmcontrolplanes", "KubeadmControlPlane")
MACHINE_DEPLOYMENTS = Resource("cluster.x-k8s.io", "v1beta2", "machinedeployments", "MachineDeployment")
MACHINE_SETS = Resource("cluster.x-k8s.io", "v1beta2", "machinesets", "MachineSet")
KUBEADM_CONFIGS = Resource("bootstrap.cluster.x-k8s.io", "v1beta2", "kubeadmconfigs", "KubeadmConfig")
