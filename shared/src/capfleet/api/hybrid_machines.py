"""The CAPI InfraMachine kinds users write (group infrastructure.cluster.x-k8s.io), reconciled by the glue.

HybridMachine implements Cluster API's v1beta2 InfraMachine contract (providerID, addresses,
`status.initialization.provisioned`, failure domain) for two kinds of machine: a libvirt VM (`spec.vm`)
or a bare-metal server claimed from NetBox (`spec.baremetal`). HybridMachineTemplate is what
MachineDeployments and control planes clone it from.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from capfleet.api.baremetal import Image, OSProfile, RootDeviceHints
from capfleet.api.base import (
    BASE_IMAGE_PATTERN,
    LABEL_VALUE_MAX,
    NAME_MAX,
    Conditions,
    CustomObject,
    LabelSelector,
    Model,
    NoStatus,
    ObjectTemplateMeta,
    TypedLocalObjectReference,
    cel_rules,
    immutable_once_set,
    list_map,
)
from capfleet.api.hybrid_clusters import Initialization
from capfleet.api.netbox import DeviceSelector


class MachineDisk(Model):
    """A VM disk; the first is the boot disk."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=LABEL_VALUE_MAX,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Disk name; derived from its position if unset.",
    )
    size_gib: int = Field(alias="sizeGiB", ge=1, le=65536, description="Size in GiB.")
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=NAME_MAX,
        pattern=BASE_IMAGE_PATTERN,
        description=(
            "Base image volume in the hypervisor's storage pool, one the Hypervisor lists in "
            "`spec.baseImages`; an empty disk if unset."
        ),
    )


class VMMachine(Model):
    """A machine that is a libvirt VM."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            ("has(self.disks[0].image)", "the first disk is the boot disk and needs an image")
        )
    )

    vcpus: int = Field(ge=1, le=256, description="Virtual CPUs.")
    memory_mib: int = Field(alias="memoryMiB", ge=64, le=4194304, description="Memory in MiB.")
    disks: list[MachineDisk] = Field(
        min_length=1, max_length=8, description="Disks; the first is the boot disk."
    )
    hypervisor_selector: LabelSelector | None = Field(
        default=None, description="Labels a Hypervisor must carry, besides the cluster's selector."
    )
    anti_affinity_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=NAME_MAX,
        description="VMs sharing this key are spread over hypervisors;"
        " the owning MachineSet or control plane if unset.",
    )


class BaremetalMachine(Model):
    """A machine that is a bare-metal server claimed from NetBox."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            ("has(self.image) != has(self.osProfile)", "exactly one of image and osProfile"),
            ("!has(self.rootDeviceHints) || has(self.image)", "rootDeviceHints need image"),
        )
    )

    device_selector: DeviceSelector = Field(
        default_factory=DeviceSelector,
        description="Which free NetBox device to claim.",
        json_schema_extra={"default": {}},
    )
    boot_interface: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="NetBox interface whose MAC network-boots;"
        " the first non-management interface with a MAC if unset.",
    )
    image: Image | None = Field(
        default=None,
        description="The OS image capfleet's deploy ramdisk writes to the server's disk; or give osProfile.",
    )
    root_device_hints: RootDeviceHints | None = Field(
        default=None, description="Which disk gets the image; the first disk if unset."
    )
    os_profile: OSProfile | None = Field(
        default=None, description="A custom installer to network-boot instead of the deploy ramdisk."
    )
    cleaning: Literal["metadata", "disabled"] | None = Field(
        default=None,
        description=(
            "On deprovisioning: wipe disk metadata by network-booting the cleaner, or not. Unset: metadata"
            " with image, disabled with osProfile."
        ),
    )
    max_provisioning_attempts: int | None = Field(
        default=None, ge=1, le=10, description="Deployments tried before giving up; 3 if unset."
    )


class MachineInterface(Model):
    """A network interface of a machine and where its addresses come from."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "[has(self.bridge), has(self.network), has(self.userMode) && self.userMode]"
                ".filter(x, x).size() <= 1",
                "at most one of bridge, network and userMode may be set",
            ),
        )
    )

    name: str = Field(
        min_length=1,
        max_length=64,
        description="Interface name: in the guest for a VM, in NetBox for a server.",
    )
    bridge: str | None = Field(default=None, min_length=1, max_length=15, description="Host bridge (VMs).")
    network: str | None = Field(
        default=None, min_length=1, max_length=NAME_MAX, description="libvirt network (VMs)."
    )
    user_mode: bool = Field(
        default=False, description="QEMU user-mode networking (VMs; tests and isolated hosts)."
    )
    ip_pool_refs: list[TypedLocalObjectReference] = Field(
        default_factory=list,
        max_length=4,
        description="IP pools to claim an address from, one per pool (two for dual-stack); DHCP if empty.",
    )
    default: bool = Field(
        default=False, description="Whether the default route and DNS go through this interface."
    )


class MachineNetwork(Model):
    """A machine's network interfaces."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "!has(self.interfaces) || self.interfaces.filter(i, has(i.default) && i.default).size() <= 1",
                "at most one interface may be the default",
            ),
        )
    )

    interfaces: list[MachineInterface] = Field(
        default_factory=list,
        max_length=8,
        description="Interfaces.",
        json_schema_extra=list_map("name"),
    )


_MACHINE_SHAPE_RULES = (
    ("has(self.vm) != has(self.baremetal)", "exactly one of spec.vm and spec.baremetal must be set"),
    (
        "!has(self.vm) || !has(self.network) || !has(self.network.interfaces) || self.network.interfaces.all("
        "i, has(i.bridge) || has(i.network) || (has(i.userMode) && i.userMode))",
        "every interface of a VM needs a bridge, a network or userMode",
    ),
)


class HybridMachineShape(Model):
    """A machine as a template fixes it: a HybridMachineSpec without update rules.

    Templates carry no update rules on purpose: CAPI's topology controller dry-runs changed templates.
    """

    model_config = ConfigDict(json_schema_extra=cel_rules(*_MACHINE_SHAPE_RULES))

    vm: VMMachine | None = Field(default=None, description="Make the machine a libvirt VM.")
    baremetal: BaremetalMachine | None = Field(
        default=None, description="Make the machine a bare-metal server."
    )
    network: MachineNetwork = Field(default_factory=MachineNetwork, description="Network interfaces.")
    provider_id: str | None = Field(
        default=None,
        alias="providerID",
        min_length=1,
        max_length=512,
        description="capfleet://vm/<hypervisor>/<domain> or capfleet://metal/<device>;"
        " set by the glue, then immutable.",
    )
    failure_domain: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Failure domain to use when the owning Machine names none; the Machine's wins.",
    )


class HybridMachineSpec(HybridMachineShape):
    """Desired state of a machine."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            *_MACHINE_SHAPE_RULES,
            ("has(self.vm) == has(oldSelf.vm)", "a machine cannot change between vm and baremetal"),
            immutable_once_set("providerID"),
        )
    )


class MachineAddress(Model):
    """An address of a machine, as CAPI reports it."""

    type: Literal["Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"] = Field(
        description="Kind of address."
    )
    address: str = Field(min_length=1, max_length=256, description="The address.")


class HybridMachineStatus(Model):
    """Observed state of a machine; rebuilt from its children when lost."""

    initialization: Initialization | None = Field(
        default=None, description="Provisioning progress, for CAPI."
    )
    addresses: list[MachineAddress] = Field(
        default_factory=list, max_length=32, description="The machine's addresses."
    )
    failure_domain: str | None = Field(default=None, description="Failure domain the machine is in.")
    hypervisor_name: str | None = Field(default=None, description="Hypervisor the VM runs on.")
    device_id: int | None = Field(default=None, alias="deviceID", description="NetBox id of the server.")
    conditions: Conditions = Field(default_factory=list)


class HybridMachine(CustomObject[HybridMachineSpec, HybridMachineStatus]):
    """A workload cluster machine: a libvirt VM or a bare-metal server from NetBox."""


class HybridMachineTemplateResource(Model):
    """What a HybridMachine is cloned from."""

    metadata: ObjectTemplateMeta | None = Field(
        default=None, description="Labels and annotations of the clone."
    )
    spec: HybridMachineShape = Field(description="Spec of the clone.")


class HybridMachineTemplateSpec(Model):
    """Desired state of a HybridMachineTemplate."""

    template: HybridMachineTemplateResource = Field(description="The HybridMachine to clone.")


class HybridMachineTemplate(CustomObject[HybridMachineTemplateSpec, NoStatus]):
    """A template CAPI clones HybridMachines from (MachineDeployments, control planes)."""
