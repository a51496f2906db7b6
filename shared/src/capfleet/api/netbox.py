"""The kinds netbox-device reconciles (group netbox.capfleet.dev): server claims and VM registrations.

The glue creates a NetboxDevice for every bare-metal machine and reads the claimed server's BMC address
and MACs from its status; it creates a NetboxVirtualMachine for every VM of a cluster that uses NetBox.
`DeviceSelector` is also part of HybridMachine and HybridCluster, which pass it on unchanged.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from capfleet.api.base import (
    CIDR,
    TEXT_MAX,
    Conditions,
    ConnectionSecretReference,
    CustomObject,
    MACAddress,
    Model,
    Slug,
    cel,
    list_map,
)

NETBOX_STATUS_MAX = 50


class DeviceSelector(Model):
    """Which NetBox devices qualify; every criterion given must match, and unset ones match anything."""

    site: Slug | None = Field(default=None, description="Slug of the device's site.")
    role: Slug | None = Field(default=None, description="Slug of the device's role.")
    tags: list[Slug] = Field(
        default_factory=list, max_length=16, description="Slugs of tags the device must carry."
    )
    status: str | None = Field(
        default=None,
        min_length=1,
        max_length=NETBOX_STATUS_MAX,
        description="NetBox status of a free device.",
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=64, description="Exact name of the device."
    )
    serial: str | None = Field(default=None, min_length=1, max_length=50, description="Exact serial number.")
    custom_fields: dict[str, str] = Field(
        default_factory=dict, description="Custom field values the device must have (exact match)."
    )


class NetboxDeviceSelector(DeviceSelector):
    """Which NetBox devices qualify for a claim: free devices are those in `status` with no capfleet owner."""

    status: str | None = Field(
        default="inventory",
        min_length=1,
        max_length=NETBOX_STATUS_MAX,
        description="NetBox status a free device has (default inventory: racked and cabled, not in use)."
        " A claimed device moves to claim.status and goes back to its previous status on release.",
    )


class DeviceClaim(Model):
    """What is written on a device when it is claimed, and undone when it is released."""

    tenant: Slug | None = Field(
        default=None, description="Slug of the tenant assigned to the claimed device."
    )
    status: str = Field(
        default="active",
        min_length=1,
        max_length=NETBOX_STATUS_MAX,
        description="NetBox status of the claimed device.",
    )
    description: str | None = Field(
        default=None,
        max_length=200,
        description="Text written into the device's description and journal entry.",
    )


class NetboxDeviceSpec(Model):
    """Desired state of a device claim."""

    connection_secret_ref: ConnectionSecretReference = Field(
        description="Secret with the NetBox connection (keys url, token, optional caBundle)."
    )
    selector: NetboxDeviceSelector = Field(
        default_factory=NetboxDeviceSelector,
        description="Which free device to claim.",
        json_schema_extra={"default": {}},
    )
    claim: DeviceClaim = Field(
        default_factory=DeviceClaim,
        description="What to write on the device while it is claimed.",
        json_schema_extra={"default": {}},
    )


class DeviceInterface(Model):
    """A network interface of a claimed device."""

    name: str = Field(max_length=64, description="Interface name in NetBox, e.g. eno1.")
    mac_address: MACAddress | None = Field(
        default=None, description="Primary MAC address, when NetBox has one."
    )
    mgmt_only: bool = Field(default=False, description="Whether this is a management (BMC) interface.")


class NetboxDeviceStatus(Model):
    """The claimed device as NetBox describes it; rebuilt from NetBox when lost."""

    device_id: int | None = Field(
        default=None, alias="deviceID", description="NetBox id of the claimed device."
    )
    name: str | None = Field(default=None, description="Name of the device.")
    serial: str | None = Field(default=None, description="Serial number of the device.")
    site: str | None = Field(default=None, description="Slug of the device's site.")
    rack: str | None = Field(default=None, description="Name of the device's rack.")
    bmc_address: str | None = Field(
        default=None,
        description="BMC address: the device's bmc_address custom field when set, else its out-of-band IP.",
    )
    interfaces: list[DeviceInterface] = Field(
        default_factory=list, description="The device's interfaces with their MAC addresses."
    )
    conditions: Conditions = Field(default_factory=list)


class NetboxDevice(CustomObject[NetboxDeviceSpec, NetboxDeviceStatus]):
    """A claim on one free server in NetBox, made atomically and released on deletion."""


class VirtualMachineInterface(Model):
    """A VM's network interface to record in NetBox."""

    name: str = Field(min_length=1, max_length=64, description="Interface name, e.g. eth0.")
    mac_address: MACAddress | None = Field(default=None, description="MAC address of the interface.")
    addresses: list[CIDR] = Field(
        default_factory=list,
        max_length=8,
        description="Addresses with prefix length; ones already in NetBox are linked, not duplicated.",
    )


class NetboxVirtualMachineSpec(Model):
    """Desired state of a VM's NetBox record."""

    model_config = ConfigDict(
        json_schema_extra=cel("has(self.cluster) || has(self.site)", "set cluster or site; NetBox needs one")
    )

    connection_secret_ref: ConnectionSecretReference = Field(
        description="Secret with the NetBox connection (keys url, token, optional caBundle)."
    )
    name: str = Field(min_length=1, max_length=64, description="Name of the VM in NetBox.")
    cluster: str | None = Field(
        default=None, min_length=1, max_length=100, description="Name of the NetBox virtualization cluster."
    )
    role: Slug | None = Field(default=None, description="Slug of the VM's device role.")
    tenant: Slug | None = Field(default=None, description="Slug of the VM's tenant.")
    site: Slug | None = Field(default=None, description="Slug of the VM's site.")
    vcpus: int | None = Field(default=None, ge=1, le=256, description="Virtual CPUs.")
    memory_mib: int | None = Field(default=None, alias="memoryMiB", ge=1, description="Memory in MiB.")
    disk_gib: int | None = Field(default=None, alias="diskGiB", ge=1, description="Total disk size in GiB.")
    status: str = Field(
        default="active", min_length=1, max_length=NETBOX_STATUS_MAX, description="NetBox status of the VM."
    )
    description: str | None = Field(default=None, max_length=TEXT_MAX, description="Description of the VM.")
    interfaces: list[VirtualMachineInterface] = Field(
        default_factory=list,
        max_length=16,
        description="The VM's interfaces; the first IPv4 and IPv6 addresses become the primary ones.",
        json_schema_extra=list_map("name"),
    )


class NetboxVirtualMachineStatus(Model):
    """The VM's NetBox record; rebuilt from NetBox when lost."""

    virtual_machine_id: int | None = Field(
        default=None, alias="virtualMachineID", description="NetBox id of the VM record."
    )
    conditions: Conditions = Field(default_factory=list)


class NetboxVirtualMachine(CustomObject[NetboxVirtualMachineSpec, NetboxVirtualMachineStatus]):
    """A VM registered in NetBox with its interfaces, MACs and addresses; deregistered on deletion."""
