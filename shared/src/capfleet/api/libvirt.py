"""The kinds libvirt-vm reconciles (group libvirt.capfleet.dev): hypervisors, the VMs placed on them, and
the quotas that bound what a namespace's VMs may take.

Administrators create Hypervisors (cluster-scoped) and VMQuotas (one or more per namespace, as
Kubernetes' ResourceQuota); the glue creates a LibvirtVM for every VM machine and reads its state,
placement and provider ID back from it, and users may create LibvirtVMs of their own. The placement
decision is written to `spec.hypervisorName` so that it survives a lost status and a clusterctl move.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from capfleet.api.base import (
    BASE_IMAGE_GLOB_PATTERN,
    BASE_IMAGE_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_VALUE_MAX,
    NAME_MAX,
    Conditions,
    CustomObject,
    GuestInterface,
    LabelSelector,
    Model,
    SecretKeyReference,
    cel,
    cel_rules,
    immutable_once_set,
    list_map,
)

USER_DATA_LABEL = "libvirt.capfleet.dev/user-data"
"""On a Secret: `"true"` when it holds user-data for LibvirtVMs of its namespace. libvirt-vm reads a VM's
user-data only from such a Secret or from Cluster API's bootstrap data, never from any other Secret
(the cluster's CA keys, a NetBox token) that a user who may create VMs names."""
CAPI_SECRET_TYPE = "cluster.x-k8s.io/secret"
BOOTSTRAP_GROUP = "bootstrap.cluster.x-k8s.io"


class HypervisorConnection(Model):
    """Where libvirtd runs and how to reach it over SSH."""

    host: str = Field(min_length=1, max_length=NAME_MAX, description="SSH host name or address.")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port.")
    user: str = Field(default="root", min_length=1, max_length=64, description="SSH user.")
    socket_path: str = Field(
        default="/var/run/libvirt/libvirt-sock",
        min_length=1,
        max_length=1024,
        description="Path of libvirtd's socket on the host (qemu:///system).",
    )


class SSHKeySecretReference(Model):
    """A Secret holding an SSH private key."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the Secret.")
    namespace: str = Field(min_length=1, max_length=63, description="Namespace of the Secret.")
    key: str = Field(
        default="ssh-privatekey", min_length=1, max_length=NAME_MAX, description="Key of the private key."
    )


class KnownHostsSecretReference(Model):
    """A Secret holding the host's SSH public keys in known_hosts format."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the Secret.")
    namespace: str = Field(min_length=1, max_length=63, description="Namespace of the Secret.")
    key: str = Field(
        default="known_hosts", min_length=1, max_length=NAME_MAX, description="Key of the known_hosts."
    )


class Resources(Model):
    """An amount of compute."""

    vcpus: int = Field(default=0, ge=0, description="Virtual CPUs.")
    memory_mib: int = Field(default=0, ge=0, alias="memoryMiB", description="Memory in MiB.")


class Capacity(Resources):
    """An amount of compute and storage."""

    storage_gib: int = Field(default=0, ge=0, alias="storageGiB", description="Storage pool space in GiB.")


class NetworkAttachment(Model):
    """What a NIC attaches to: a host bridge, a libvirt network, or QEMU user-mode networking."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "[has(self.bridge), has(self.network), has(self.userMode) && self.userMode]"
            ".filter(x, x).size() == 1",
            "exactly one of bridge, network and userMode must be set",
        )
    )

    bridge: str | None = Field(
        default=None, min_length=1, max_length=15, description="Host bridge to attach to."
    )
    network: str | None = Field(
        default=None, min_length=1, max_length=NAME_MAX, description="libvirt network to attach to."
    )
    user_mode: bool = Field(
        default=False,
        description="QEMU user-mode networking: no host bridge, but it reaches what the host reaches.",
    )


class HypervisorNetwork(NetworkAttachment):
    """What VMs may attach to on a hypervisor (a bridge's or network's name may be a shell pattern), and
    which namespaces' VMs may."""

    namespaces: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=list,
        max_length=256,
        description="Namespaces whose VMs may attach to it; every namespace when empty.",
        json_schema_extra={"default": []},
    )


class HypervisorSpec(Model):
    """Desired state of a hypervisor: how to reach it and what of it capfleet may use."""

    connection: HypervisorConnection = Field(description="How to reach libvirtd.")
    ssh_key_secret_ref: SSHKeySecretReference = Field(description="Secret with the SSH private key.")
    known_hosts_secret_ref: KnownHostsSecretReference = Field(
        description="Secret with the host's known_hosts entries; the host key is always verified."
    )
    failure_domain: str | None = Field(
        default=None,
        min_length=1,
        max_length=LABEL_VALUE_MAX,
        description="Failure domain the hypervisor is in.",
    )
    storage_pool: str = Field(
        default="default",
        min_length=1,
        max_length=NAME_MAX,
        description="libvirt storage pool that holds base images and VM volumes.",
    )
    base_images: list[
        Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=BASE_IMAGE_GLOB_PATTERN)]
    ] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Volumes of the storage pool that VMs may clone (a disk's `sourceImage`): names, or "
            "shell-style patterns with `*` and `?`. Empty: no VM on this host clones a base image. "
            "Only what is listed is ever cloned, so a tenant's VM cannot copy a volume it was not "
            "given; VMs' own volumes (their names carry `_`) never match."
        ),
        json_schema_extra={"default": []},
    )
    networks: list[HypervisorNetwork] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "What VMs' interfaces may attach to, per namespace. Nothing else is attached: a VM whose "
            "interface names another bridge or network (the provisioning or BMC network) is not placed "
            "on this host."
        ),
        json_schema_extra={"default": []},
    )
    reserved: Resources = Field(
        default_factory=Resources,
        description="Compute kept back for the host itself; never given to VMs.",
        json_schema_extra={"default": {}},
    )


class HypervisorStatus(Model):
    """Observed state of a hypervisor."""

    capacity: Capacity | None = Field(default=None, description="What the host has.")
    allocated: Capacity | None = Field(default=None, description="What capfleet VMs on the host use of it.")
    libvirt_version: str | None = Field(default=None, description="Version of libvirtd.")
    qemu_version: str | None = Field(default=None, description="Version of QEMU.")
    conditions: Conditions = Field(default_factory=list)


class Hypervisor(CustomObject[HypervisorSpec, HypervisorStatus]):
    """A libvirt host that LibvirtVMs are placed on, reached over SSH with a verified host key."""


class VMDisk(Model):
    """A disk of a VM; the first is the boot disk."""

    name: str = Field(
        min_length=1,
        max_length=LABEL_VALUE_MAX,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Disk name.",
    )
    size_gib: int = Field(alias="sizeGiB", ge=1, le=65536, description="Size in GiB.")
    source_image: str | None = Field(
        default=None,
        min_length=1,
        max_length=NAME_MAX,
        pattern=BASE_IMAGE_PATTERN,
        description=(
            "Base image volume in the hypervisor's storage pool to clone, one the Hypervisor lists in "
            "`spec.baseImages`; an empty disk if unset."
        ),
    )
    clone_strategy: Literal["BackingFile", "FullCopy"] = Field(
        default="BackingFile",
        description="How the base image is cloned: a copy-on-write overlay, or a full copy.",
    )


class VMInterface(GuestInterface, NetworkAttachment):
    """A NIC of a VM: on a host bridge, on a libvirt network, or QEMU user-mode networking."""


class CloudInit(Model):
    """The NoCloud seed the VM boots with."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "!has(oldSelf.removeUserData) || !oldSelf.removeUserData || "
                "(has(self.removeUserData) && self.removeUserData)",
                "removeUserData cannot be undone: the user-data is gone from the hypervisor",
            )
        )
    )

    user_data_secret_ref: SecretKeyReference = Field(
        description=(
            "Secret key holding the user-data: Cluster API's bootstrap data Secret (key `value`), or a "
            'Secret labelled `libvirt.capfleet.dev/user-data: "true"`; no other Secret is read.'
        )
    )
    format: Literal["cloud-config", "ignition"] = Field(
        default="cloud-config", description="Format of the user-data."
    )
    hostname: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="local-hostname in the meta-data.",
    )
    provider_id: str | None = Field(
        default=None,
        alias="providerID",
        max_length=512,
        description="provider-id in the meta-data; capfleet://vm/<hypervisor>/<domain> if unset.",
    )
    meta_data: dict[str, str] = Field(default_factory=dict, description="Extra meta-data keys.")
    remove_user_data: bool | None = Field(
        default=None,
        description=(
            "Once true (capi-machine-glue sets it when the Machine's Node joined), the seed on the "
            "hypervisor keeps its meta-data and network-config but an empty user-data: the bootstrap "
            "secrets (join token, for a control plane the cluster's CA keys) leave the hypervisor's disk. "
            "The instance-id stays, so cloud-init runs nothing again. Cannot be undone."
        ),
    )


class LibvirtVMSpec(Model):
    """Desired state of a VM."""

    model_config = ConfigDict(json_schema_extra=cel_rules(immutable_once_set("hypervisorName")))

    hypervisor_selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="Labels a Hypervisor must carry to be chosen.",
        json_schema_extra={"default": {}},
    )
    failure_domain: str | None = Field(
        default=None,
        min_length=1,
        max_length=LABEL_VALUE_MAX,
        description="Place only on hypervisors of this domain.",
    )
    anti_affinity_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=NAME_MAX,
        description="VMs sharing this key are spread over different hypervisors when possible.",
    )
    hypervisor_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=NAME_MAX,
        description="The Hypervisor the VM is placed on; set once by libvirt-vm, then immutable.",
    )
    vcpus: int = Field(ge=1, le=256, description="Virtual CPUs.")
    memory_mib: int = Field(alias="memoryMiB", ge=64, le=4194304, description="Memory in MiB.")
    disks: list[VMDisk] = Field(
        min_length=1,
        max_length=8,
        description="Disks; the first is the boot disk.",
        json_schema_extra=list_map("name"),
    )
    interfaces: list[VMInterface] = Field(
        default_factory=list,
        max_length=8,
        description="NICs, in guest order.",
        json_schema_extra=list_map("macAddress"),
    )
    cloud_init: CloudInit = Field(description="The NoCloud seed.")
    power_state: Literal["On", "Off"] = Field(default="On", description="Whether the VM should run.")


class LibvirtVMStatus(Model):
    """Observed state of a VM; rebuilt from the domain, found by its deterministic name, when lost."""

    domain_uuid: str | None = Field(
        default=None, alias="domainUUID", description="libvirt UUID of the domain."
    )
    domain_name: str | None = Field(default=None, description="libvirt name of the domain.")
    state: str | None = Field(
        default=None, description="libvirt state of the domain, e.g. running or shutoff."
    )
    hypervisor_name: str | None = Field(default=None, description="The Hypervisor the domain is on.")
    provider_id: str | None = Field(
        default=None, alias="providerID", description="The provider ID written into the VM's meta-data."
    )
    conditions: Conditions = Field(default_factory=list)


class LibvirtVM(CustomObject[LibvirtVMSpec, LibvirtVMStatus]):
    """A VM on a libvirt hypervisor, with disks cloned from a base image and a NoCloud seed."""


class QuotaLimits(Model):
    """Hard limits on what the VMs of a namespace ask for together; a limit left unset does not limit."""

    vcpus: int | None = Field(default=None, ge=0, description="Virtual CPUs of all VMs together.")
    memory_mib: int | None = Field(
        default=None, ge=0, alias="memoryMiB", description="Memory of all VMs together, in MiB."
    )
    storage_gib: int | None = Field(
        default=None,
        ge=0,
        alias="storageGiB",
        description="Disk of all VMs together, in GiB (sizes as asked).",
    )
    vms: int | None = Field(default=None, ge=0, description="Number of VMs.")


class QuotaUsage(Model):
    """What the placed VMs of a namespace ask for together."""

    vcpus: int = Field(default=0, ge=0, description="Virtual CPUs.")
    memory_mib: int = Field(default=0, ge=0, alias="memoryMiB", description="Memory in MiB.")
    storage_gib: int = Field(default=0, ge=0, alias="storageGiB", description="Disk in GiB.")
    vms: int = Field(default=0, ge=0, description="Number of VMs.")


class VMQuotaSpec(Model):
    """Desired state of a quota."""

    hard: QuotaLimits = Field(description="Limits no placement may cross.")


class VMQuotaStatus(Model):
    """Observed state of a quota, counted from the namespace's LibvirtVMs (rebuilt whenever it is lost)."""

    hard: QuotaLimits | None = Field(default=None, description="The limits last enforced.")
    used: QuotaUsage | None = Field(
        default=None, description="What the namespace's placed VMs ask for, deleting ones included."
    )


class VMQuota(CustomObject[VMQuotaSpec, VMQuotaStatus]):
    """Hard limits on the vCPUs, memory, disk and number of the LibvirtVMs of its namespace.

    libvirt-vm checks every quota of a VM's namespace when it places the VM, one placement at a time: a
    VM that would cross a limit waits (Scheduled=False, reason QuotaExceeded, naming the limit and the
    numbers) and is placed once room frees up. Lowering a limit never touches VMs already placed.
    """
