"""The registry of capfleet's kinds: for each, its REST resource, its model, its owner and how it prints.

Operators find a kind's resource here (`kinds.HYBRID_IPPOOL.resource`) for the typed client and kopf handlers,
and parse objects with its model (`kinds.HYBRID_IPPOOL.parse(body)`); `capfleet.crdgen` reads everything else
(short names, categories, printer columns, owning operator) to write `crds/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, get_args

from capfleet.api import baremetal, hybrid_clusters, hybrid_machines, ipam, libvirt, netbox
from capfleet.api.base import CustomObject, Model, NoStatus
from capfleet.resources import Resource

VERSION = "v1alpha1"
INFRASTRUCTURE_GROUP = "infrastructure.cluster.x-k8s.io"
IPAM_GROUP = "ipam.capfleet.dev"
NETBOX_GROUP = "netbox.capfleet.dev"
LIBVIRT_GROUP = "libvirt.capfleet.dev"
BAREMETAL_GROUP = "baremetal.capfleet.dev"

# The operators, named as their folders under operators/ and crds/.
CAPI_MACHINE_GLUE = "capi-machine-glue"
IPAM_ADDRESS = "ipam-address"
NETBOX_DEVICE_OPERATOR = "netbox-device"
LIBVIRT_VM_OPERATOR = "libvirt-vm"
BAREMETAL_PROVISION = "baremetal-provision"
OPERATORS = (
    CAPI_MACHINE_GLUE,
    IPAM_ADDRESS,
    NETBOX_DEVICE_OPERATOR,
    LIBVIRT_VM_OPERATOR,
    BAREMETAL_PROVISION,
)

CATEGORY = "capfleet"
CAPI_CATEGORY = "cluster-api"

ObjectT = TypeVar("ObjectT", bound=CustomObject[Any, Any])


@dataclass(frozen=True)
class PrinterColumn:
    """A column of `kubectl get`; priority 1 shows only with `-o wide`."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str
    priority: int = 0


@dataclass(frozen=True)
class Kind(Generic[ObjectT]):
    """One capfleet kind and everything the fleet needs to know about it."""

    resource: Resource
    model: type[ObjectT]
    owner: str
    short_names: tuple[str, ...]
    columns: tuple[PrinterColumn, ...] = ()
    capi_contract: bool = False
    """Whether this is a CAPI infrastructure kind, whose CRD carries the contract label."""
    move_hierarchy: bool = False
    """Whether clusterctl move takes every object of this kind and its descendants along (IP pools with
    their addresses: a pool is not owned by a Cluster, yet its addresses belong to moved claims)."""

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def spec(self) -> type[Model]:
        """The model of the kind's spec."""
        return _field_model(self.model, "spec")

    @property
    def status(self) -> type[Model]:
        """The model of the kind's status (`NoStatus` for templates)."""
        return _field_model(self.model, "status")

    @property
    def has_status(self) -> bool:
        return self.status is not NoStatus

    @property
    def categories(self) -> tuple[str, ...]:
        return (CATEGORY, CAPI_CATEGORY) if self.capi_contract else (CATEGORY,)

    def parse(self, body: Mapping[str, Any]) -> ObjectT:
        """The typed object from a whole object's wire form (e.g. kopf's body)."""
        return self.model.model_validate(dict(body))


CLUSTER_NAME_COLUMN = PrinterColumn(
    "Cluster",
    "string",
    ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
    "The CAPI Cluster it belongs to",
)
PROVISIONED_COLUMN = PrinterColumn(
    "Provisioned",
    "boolean",
    ".status.initialization.provisioned",
    "Whether the infrastructure is provisioned",
)
ADDRESS_COUNT_COLUMNS = (
    PrinterColumn("Total", "integer", ".status.ipAddresses.total", "Addresses in the pool"),
    PrinterColumn("Free", "integer", ".status.ipAddresses.free", "Addresses not allocated"),
    PrinterColumn("Used", "integer", ".status.ipAddresses.used", "Addresses allocated"),
)


def _field_model(model: type[CustomObject[Any, Any]], field: str) -> type[Model]:
    """The model class of `field` in a parametrised CustomObject, unwrapped from `X | None`."""
    annotation = model.model_fields[field].annotation
    candidates = [a for a in get_args(annotation) or (annotation,) if a is not type(None)]
    if len(candidates) != 1 or not isinstance(candidates[0], type) or not issubclass(candidates[0], Model):
        raise TypeError(f"{model.__name__}.{field} is not a model: {annotation}")
    return candidates[0]


HYBRID_CLUSTER = Kind(
    Resource(INFRASTRUCTURE_GROUP, VERSION, "hybridclusters", "HybridCluster"),
    hybrid_clusters.HybridCluster,
    CAPI_MACHINE_GLUE,
    ("hc",),
    (
        CLUSTER_NAME_COLUMN,
        PrinterColumn("Endpoint", "string", ".spec.controlPlaneEndpoint.host", "Control-plane endpoint host"),
        PROVISIONED_COLUMN,
    ),
    capi_contract=True,
)
HYBRID_CLUSTER_TEMPLATE = Kind(
    Resource(INFRASTRUCTURE_GROUP, VERSION, "hybridclustertemplates", "HybridClusterTemplate"),
    hybrid_clusters.HybridClusterTemplate,
    CAPI_MACHINE_GLUE,
    ("hct",),
    capi_contract=True,
)
HYBRID_MACHINE = Kind(
    Resource(INFRASTRUCTURE_GROUP, VERSION, "hybridmachines", "HybridMachine"),
    hybrid_machines.HybridMachine,
    CAPI_MACHINE_GLUE,
    ("hm",),
    (
        CLUSTER_NAME_COLUMN,
        PrinterColumn(
            "Machine", "string", '.metadata.ownerReferences[?(@.kind=="Machine")].name', "The owning Machine"
        ),
        PrinterColumn("ProviderID", "string", ".spec.providerID", "Provider ID of the machine"),
        PROVISIONED_COLUMN,
    ),
    capi_contract=True,
)
HYBRID_MACHINE_TEMPLATE = Kind(
    Resource(INFRASTRUCTURE_GROUP, VERSION, "hybridmachinetemplates", "HybridMachineTemplate"),
    hybrid_machines.HybridMachineTemplate,
    CAPI_MACHINE_GLUE,
    ("hmt",),
    capi_contract=True,
)
HYBRID_IPPOOL = Kind(
    Resource(IPAM_GROUP, VERSION, "hybridippools", "HybridIPPool"),
    ipam.HybridIPPool,
    IPAM_ADDRESS,
    ("hippool",),
    (
        PrinterColumn("Addresses", "string", ".spec.addresses", "Addresses to allocate from", 1),
        *ADDRESS_COUNT_COLUMNS,
    ),
    move_hierarchy=True,
)
NETBOX_IPPOOL = Kind(
    Resource(IPAM_GROUP, VERSION, "netboxippools", "NetboxIPPool"),
    ipam.NetboxIPPool,
    IPAM_ADDRESS,
    ("nbippool",),
    ADDRESS_COUNT_COLUMNS,
    move_hierarchy=True,
)
NETBOX_DEVICE = Kind(
    Resource(NETBOX_GROUP, VERSION, "netboxdevices", "NetboxDevice"),
    netbox.NetboxDevice,
    NETBOX_DEVICE_OPERATOR,
    ("nbdev",),
    (
        PrinterColumn("Device", "string", ".status.name", "Name of the claimed device"),
        PrinterColumn("ID", "integer", ".status.deviceID", "NetBox id of the claimed device"),
        PrinterColumn("Site", "string", ".status.site", "Site of the claimed device"),
        PrinterColumn("BMC", "string", ".status.bmcAddress", "BMC address of the claimed device", 1),
    ),
)
NETBOX_VIRTUAL_MACHINE = Kind(
    Resource(NETBOX_GROUP, VERSION, "netboxvirtualmachines", "NetboxVirtualMachine"),
    netbox.NetboxVirtualMachine,
    NETBOX_DEVICE_OPERATOR,
    ("nbvm",),
    (
        PrinterColumn("VM", "string", ".spec.name", "Name of the VM in NetBox"),
        PrinterColumn("ID", "integer", ".status.virtualMachineID", "NetBox id of the VM"),
    ),
)
HYPERVISOR = Kind(
    Resource(LIBVIRT_GROUP, VERSION, "hypervisors", "Hypervisor", namespaced=False),
    libvirt.Hypervisor,
    LIBVIRT_VM_OPERATOR,
    ("hv",),
    (
        PrinterColumn("Host", "string", ".spec.connection.host", "SSH host of the hypervisor"),
        PrinterColumn("Failure Domain", "string", ".spec.failureDomain", "Failure domain of the hypervisor"),
        PrinterColumn("vCPUs Used", "integer", ".status.allocated.vcpus", "vCPUs allocated to capfleet VMs"),
        PrinterColumn("vCPUs", "integer", ".status.capacity.vcpus", "vCPUs of the host"),
        PrinterColumn(
            "MiB Used", "integer", ".status.allocated.memoryMiB", "Memory allocated to capfleet VMs", 1
        ),
        PrinterColumn("MiB", "integer", ".status.capacity.memoryMiB", "Memory of the host", 1),
        PrinterColumn("Libvirt", "string", ".status.libvirtVersion", "libvirt version", 1),
    ),
)
LIBVIRT_VM = Kind(
    Resource(LIBVIRT_GROUP, VERSION, "libvirtvms", "LibvirtVM"),
    libvirt.LibvirtVM,
    LIBVIRT_VM_OPERATOR,
    ("lvm",),
    (
        PrinterColumn("Hypervisor", "string", ".spec.hypervisorName", "Hypervisor the VM is placed on"),
        PrinterColumn("State", "string", ".status.state", "libvirt state of the domain"),
        PrinterColumn("vCPUs", "integer", ".spec.vcpus", "Virtual CPUs", 1),
        PrinterColumn("MiB", "integer", ".spec.memoryMiB", "Memory in MiB", 1),
    ),
)
VM_QUOTA = Kind(
    Resource(LIBVIRT_GROUP, VERSION, "vmquotas", "VMQuota"),
    libvirt.VMQuota,
    LIBVIRT_VM_OPERATOR,
    ("vmq",),
    (
        PrinterColumn("vCPUs Used", "integer", ".status.used.vcpus", "vCPUs of the namespace's VMs"),
        PrinterColumn("vCPUs", "integer", ".spec.hard.vcpus", "vCPU limit"),
        PrinterColumn("MiB Used", "integer", ".status.used.memoryMiB", "Memory of the namespace's VMs"),
        PrinterColumn("MiB", "integer", ".spec.hard.memoryMiB", "Memory limit"),
        PrinterColumn("GiB Used", "integer", ".status.used.storageGiB", "Disk of the namespace's VMs", 1),
        PrinterColumn("GiB", "integer", ".spec.hard.storageGiB", "Disk limit", 1),
        PrinterColumn("VMs Used", "integer", ".status.used.vms", "VMs in the namespace", 1),
        PrinterColumn("VMs", "integer", ".spec.hard.vms", "VM count limit", 1),
    ),
)
BAREMETAL_INSTANCE = Kind(
    Resource(BAREMETAL_GROUP, VERSION, "baremetalinstances", "BaremetalInstance"),
    baremetal.BaremetalInstance,
    BAREMETAL_PROVISION,
    ("bmi",),
    (
        PrinterColumn("Phase", "string", ".status.phase", "Provisioning phase"),
        PrinterColumn("Power", "string", ".status.powerState", "Power state the BMC reports"),
        PrinterColumn("Boot MAC", "string", ".spec.bootMACAddress", "MAC that network-boots", 1),
        PrinterColumn("BMC", "string", ".spec.bmc.address", "BMC address", 1),
    ),
)

ALL: tuple[Kind[Any], ...] = (
    HYBRID_CLUSTER,
    HYBRID_CLUSTER_TEMPLATE,
    HYBRID_MACHINE,
    HYBRID_MACHINE_TEMPLATE,
    HYBRID_IPPOOL,
    NETBOX_IPPOOL,
    NETBOX_DEVICE,
    NETBOX_VIRTUAL_MACHINE,
    HYPERVISOR,
    LIBVIRT_VM,
    VM_QUOTA,
    BAREMETAL_INSTANCE,
)


def by_kind(kind: str) -> Kind[Any]:
    """The registered kind named `kind` (e.g. "HybridIPPool"); KeyError if capfleet has none."""
    for registered in ALL:
        if registered.kind == kind:
            return registered
    raise KeyError(f"capfleet has no kind {kind!r}")


def owned_by(operator: str) -> tuple[Kind[Any], ...]:
    """The kinds whose CRDs `operator` owns (and ships in crds/<operator>/)."""
    return tuple(k for k in ALL if k.owner == operator)
