"""What a HybridMachine's children should be: pure functions from the machine, its cluster and facts.

The glue's reconcile only gathers facts (the Machine, the cluster, allocated addresses, the claimed
device) and writes objects; every decision about a child's spec is made here, where it is unit-tested:
which labels pick a hypervisor, which NetBox device may be claimed, what network configuration the
machine boots with, which MAC a NIC gets. Each child's spec is built as its typed model, so a misspelt
or misplaced field is a type error here rather than a field the API server refuses.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capfleet import errors
from capfleet.api.baremetal import BMC, DEFAULT_PROVISIONING_ATTEMPTS, BaremetalInstanceSpec
from capfleet.api.base import (
    DNS_LABEL_PATTERN,
    IFNAME_MAX,
    ConnectionSecretReference,
    GuestInterface,
    LabelSelector,
    LocalObjectReference,
    SecretKeyReference,
    TypedLocalObjectReference,
)
from capfleet.api.capi import IPAddressClaimSpec, TypedReference
from capfleet.api.hybrid_clusters import FailureDomainSpec, HybridClusterSpec
from capfleet.api.hybrid_machines import HybridMachineSpec, MachineInterface, VMMachine
from capfleet.api.libvirt import CloudInit, LibvirtVMSpec, VMDisk, VMInterface
from capfleet.api.netbox import (
    DeviceClaim,
    DeviceInterface,
    NetboxDeviceSelector,
    NetboxDeviceSpec,
    NetboxDeviceStatus,
    NetboxVirtualMachineSpec,
    VirtualMachineInterface,
)
from capi_machine_glue import names

BOOTSTRAP_DATA_KEY = "value"
CONTROL_PLANE_ENDPOINT_HOST = "control-plane-endpoint-host"
CONTROL_PLANE_ENDPOINT_PORT = "control-plane-endpoint-port"


@dataclass(frozen=True)
class Allocation:
    """An address allocated to one interface, as the IPAddress reports it."""

    address: str
    prefix: int
    gateway: str | None = None

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefix}"

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.address).version


Allocations = Mapping[str, Sequence[Allocation]]
"""The addresses allocated to a machine, by interface name."""


@dataclass(frozen=True)
class MachineFacts:
    """What the glue learnt about a HybridMachine from CAPI: where it belongs and what it boots with."""

    namespace: str
    name: str
    cluster: str
    data_secret: str
    failure_domain: str | None = None
    group: str | None = None
    """The owning MachineSet or control plane: VMs of one group are spread over hypervisors."""
    joined: bool = False
    """The Machine's Node joined: its bootstrap data has done its work."""


@dataclass(frozen=True)
class ClaimPlan:
    name: str
    interface: str
    spec: IPAddressClaimSpec


def failure_domain(cluster: HybridClusterSpec, name: str | None) -> FailureDomainSpec | None:
    """The declared failure domain `name`; InvalidSpec when the cluster declares others but not it."""
    if name is None:
        return None
    for domain in cluster.failure_domains:
        if domain.name == name:
            return domain
    if cluster.failure_domains:
        known = ", ".join(d.name for d in cluster.failure_domains)
        raise errors.InvalidSpec(
            f"failure domain {name} is not declared on the HybridCluster (declared: {known})",
            reason="UnknownFailureDomain",
        )
    return None


def merged_labels(*selectors: Mapping[str, str] | None) -> dict[str, str]:
    """All label requirements together; two different values for one key can never match."""
    merged: dict[str, str] = {}
    for selector in selectors:
        for key, value in (selector or {}).items():
            if merged.get(key, value) != value:
                raise errors.InvalidSpec(
                    f"label {key} is required to be both {merged[key]} and {value}",
                    reason="ConflictingSelectors",
                )
            merged[key] = value
    return merged


def device_selector(spec: HybridMachineSpec, domain: FailureDomainSpec | None) -> NetboxDeviceSelector:
    """The NetBox device selector: the machine's, narrowed by its failure domain's."""
    assert spec.baremetal is not None
    own = spec.baremetal.device_selector.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    if domain is None or domain.device_selector is None:
        return NetboxDeviceSelector.model_validate(own)
    extra = domain.device_selector.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    merged = dict(own)
    for key, value in extra.items():
        if key == "tags":
            merged["tags"] = sorted({*own.get("tags", []), *value})
        elif key == "customFields":
            merged["customFields"] = merged_labels(own.get("customFields"), value)
        elif key in own and own[key] != value:
            raise errors.InvalidSpec(
                f"device selector {key} is {own[key]} on the machine and {value} in failure domain"
                f" {domain.name}",
                reason="ConflictingSelectors",
            )
        else:
            merged[key] = value
    return NetboxDeviceSelector.model_validate(merged)


def claim_spec(pool: TypedLocalObjectReference, cluster: str) -> IPAddressClaimSpec:
    """An IPAddressClaim's spec: an address from `pool` for the CAPI cluster `cluster`."""
    reference = TypedReference(api_group=pool.api_group, kind=pool.kind, name=pool.name)
    return IPAddressClaimSpec(pool_ref=reference, cluster_name=cluster)


def address_claims(spec: HybridMachineSpec, facts: MachineFacts) -> list[ClaimPlan]:
    """One IPAddressClaim per pool of each interface, in interface order."""
    return [
        ClaimPlan(
            name=names.address_claim(facts.name, interface.name, index),
            interface=interface.name,
            spec=claim_spec(pool, facts.cluster),
        )
        for interface in spec.network.interfaces
        for index, pool in enumerate(interface.ip_pool_refs)
    ]


def _default_interface(interfaces: Sequence[MachineInterface]) -> str | None:
    for interface in interfaces:
        if interface.default:
            return interface.name
    return interfaces[0].name if interfaces else None


def _gateway(
    interface: MachineInterface, default: str | None, allocations: Sequence[Allocation]
) -> str | None:
    if interface.name != default:
        return None
    return next((a.gateway for a in allocations if a.gateway), None)


def guest_name(interface: str) -> str | None:
    """The guest's name for a NIC: the HybridMachine interface's, when Linux and cloud-init can use it
    (a short DNS label); otherwise None, and the guest names it by position (eth<index>)."""
    fits = len(interface) <= IFNAME_MAX and re.fullmatch(DNS_LABEL_PATTERN, interface) is not None
    return interface if fits else None


def guest_interface(
    interface: MachineInterface,
    mac: str,
    default: str | None,
    nameservers: Sequence[str],
    allocations: Sequence[Allocation],
) -> GuestInterface:
    """One NIC as the guest configures it, by the same rules for VMs and servers: named after its
    interface, with its allocated addresses (DHCP without any), the gateway and nameservers on the
    default interface only."""
    return GuestInterface(
        name=guest_name(interface.name),
        mac_address=mac.lower(),
        addresses=[a.cidr for a in allocations],
        gateway=_gateway(interface, default, allocations),
        nameservers=list(nameservers) if interface.name == default else [],
    )


def guest_interfaces(
    spec: HybridMachineSpec, cluster: HybridClusterSpec, macs: Mapping[str, str], allocations: Allocations
) -> list[GuestInterface]:
    """The machine's NICs in interface order; `macs` gives each interface's MAC by interface name."""
    default = _default_interface(spec.network.interfaces)
    return [
        guest_interface(nic, macs[nic.name], default, cluster.nameservers, allocations.get(nic.name, ()))
        for nic in spec.network.interfaces
    ]


def vm_interface(interface: MachineInterface, guest: GuestInterface) -> VMInterface:
    """A VM's NIC: the guest's view of it, attached to a bridge, a libvirt network or user-mode networking."""
    return VMInterface(
        name=guest.name,
        mac_address=guest.mac_address,
        addresses=guest.addresses,
        gateway=guest.gateway,
        nameservers=guest.nameservers,
        bridge=interface.bridge,
        network=None if interface.bridge else interface.network,
        user_mode=not (interface.bridge or interface.network),
    )


def vm_spec(
    spec: HybridMachineSpec, cluster: HybridClusterSpec, facts: MachineFacts, allocations: Allocations
) -> LibvirtVMSpec:
    """The LibvirtVM of a VM machine."""
    vm: VMMachine | None = spec.vm
    assert vm is not None
    domain = failure_domain(cluster, facts.failure_domain)
    labels = merged_labels(
        cluster.hypervisor_selector.match_labels if cluster.hypervisor_selector else None,
        domain.hypervisor_selector.match_labels if domain and domain.hypervisor_selector else None,
        vm.hypervisor_selector.match_labels if vm.hypervisor_selector else None,
    )
    return LibvirtVMSpec(
        hypervisor_selector=LabelSelector(match_labels=labels),
        failure_domain=facts.failure_domain or None,
        anti_affinity_key=vm.anti_affinity_key or facts.group or None,
        vcpus=vm.vcpus,
        memory_mib=vm.memory_mib,
        disks=[
            VMDisk(
                name=disk.name or ("root" if index == 0 else f"disk{index}"),
                size_gib=disk.size_gib,
                source_image=disk.image,
            )
            for index, disk in enumerate(vm.disks)
        ],
        interfaces=[
            vm_interface(nic, guest)
            for nic, guest in zip(
                spec.network.interfaces,
                guest_interfaces(spec, cluster, vm_macs(spec, facts), allocations),
                strict=True,
            )
        ],
        cloud_init=CloudInit(
            user_data_secret_ref=SecretKeyReference(name=facts.data_secret, key=BOOTSTRAP_DATA_KEY),
            hostname=hostname(facts.name, cluster.domain),
            meta_data=cluster_meta_data(cluster),
        ),
        power_state="On",
    )


def vm_macs(spec: HybridMachineSpec, facts: MachineFacts) -> dict[str, str]:
    """Each interface's MAC on a VM: derived from the machine's names, so it survives moves and restarts."""
    return {
        nic.name: names.mac_address(facts.namespace, facts.name, nic.name) for nic in spec.network.interfaces
    }


def cluster_meta_data(cluster: HybridClusterSpec) -> dict[str, str]:
    """NoCloud meta-data keys every machine of the cluster gets besides its own: the control-plane
    endpoint, so that user-data can use it (cloud-init's jinja: `ds.meta_data.control_plane_endpoint_host`)
    when it comes from a pool and no template can name it, as kube-vip's address must."""
    endpoint = cluster.control_plane_endpoint
    if endpoint is None:
        return {}
    return {CONTROL_PLANE_ENDPOINT_HOST: endpoint.host, CONTROL_PLANE_ENDPOINT_PORT: str(endpoint.port)}


def hostname(machine: str, domain: str | None) -> str:
    return f"{machine}.{domain}" if domain else machine


def records_vms(cluster: HybridClusterSpec) -> bool:
    """Whether the cluster's VMs are recorded in NetBox: it needs a NetBox cluster or site to put them in."""
    return cluster.netbox is not None and bool(cluster.netbox.cluster or cluster.netbox.site)


def netbox_vm_spec(
    spec: HybridMachineSpec, cluster: HybridClusterSpec, facts: MachineFacts, allocations: Allocations
) -> NetboxVirtualMachineSpec | None:
    """The NetboxVirtualMachine of a VM machine; None when the cluster records no VMs in NetBox."""
    netbox = cluster.netbox
    if netbox is None or not records_vms(cluster):
        return None
    vm = spec.vm
    assert vm is not None
    macs = vm_macs(spec, facts)
    return NetboxVirtualMachineSpec(
        connection_secret_ref=ConnectionSecretReference(name=netbox.connection_secret_ref.name),
        name=facts.name,
        cluster=netbox.cluster or None,
        site=netbox.site or None,
        tenant=netbox.tenant or None,
        vcpus=vm.vcpus,
        memory_mib=vm.memory_mib,
        disk_gib=sum(d.size_gib for d in vm.disks),
        description=f"capfleet machine {facts.namespace}/{facts.name} of cluster {facts.cluster}",
        interfaces=[
            VirtualMachineInterface(
                name=nic.name,
                mac_address=macs[nic.name],
                addresses=[a.cidr for a in allocations.get(nic.name, ())],
            )
            for nic in spec.network.interfaces
        ],
    )


def device_spec(spec: HybridMachineSpec, cluster: HybridClusterSpec, facts: MachineFacts) -> NetboxDeviceSpec:
    """The NetboxDevice that claims a bare-metal machine's server."""
    if cluster.netbox is None:
        raise errors.InvalidSpec(
            "bare-metal machines are claimed from NetBox: set spec.netbox on the HybridCluster",
            reason="NetboxRequired",
        )
    return NetboxDeviceSpec(
        connection_secret_ref=ConnectionSecretReference(name=cluster.netbox.connection_secret_ref.name),
        selector=device_selector(spec, failure_domain(cluster, facts.failure_domain)),
        claim=DeviceClaim(
            tenant=cluster.netbox.tenant or None,
            description=f"capfleet machine {facts.namespace}/{facts.name}",
        ),
    )


def boot_interface(spec: HybridMachineSpec, device: NetboxDeviceStatus) -> DeviceInterface:
    """The NIC that network-boots: the named one, else the first non-management one with a MAC."""
    assert spec.baremetal is not None
    wanted = spec.baremetal.boot_interface
    for interface in device.interfaces:
        if interface.mac_address is None:
            continue
        if interface.name == wanted or (wanted is None and not interface.mgmt_only):
            return interface
    which = f"interface {wanted}" if wanted else "a non-management interface"
    raise errors.InvalidSpec(
        f"NetBox device {device.name} has no {which} with a MAC address", reason="NoBootInterface"
    )


def bmc_url(template: str | None, device: NetboxDeviceStatus) -> str:
    """The BMC URL of a claimed device: NetBox's value as is when it already is a URL (what
    `capfleet netbox-setup` documents for the bmc_address field), else the bare address filled into the
    cluster's template."""
    address = device.bmc_address
    if not address:
        raise errors.InvalidSpec(
            f"NetBox device {device.name} has no BMC address (custom field bmc_address or out-of-band IP)",
            reason="NoBMCAddress",
        )
    if template is None or "://" in address:
        return address
    return (
        template.replace("{address}", address)
        .replace("{name}", device.name or "")
        .replace("{serial}", device.serial or "")
    )


def server_macs(spec: HybridMachineSpec, device: NetboxDeviceStatus) -> dict[str, str]:
    """Each interface's MAC on a server, as NetBox records the claimed device's interface of that name."""
    recorded = {i.name: i.mac_address for i in device.interfaces if i.mac_address}
    macs = {}
    for interface in spec.network.interfaces:
        mac = recorded.get(interface.name)
        if mac is None:
            raise errors.InvalidSpec(
                f"NetBox device {device.name} has no interface {interface.name} with a MAC address",
                reason="UnknownInterface",
            )
        macs[interface.name] = mac
    return macs


def instance_spec(
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: MachineFacts,
    device: NetboxDeviceStatus,
    allocations: Allocations,
) -> BaremetalInstanceSpec:
    """The BaremetalInstance that provisions a claimed server."""
    baremetal = spec.baremetal
    assert baremetal is not None
    assert device.device_id is not None
    settings = cluster.baremetal
    if settings is None or settings.bmc_credentials_secret_ref is None:
        raise errors.InvalidSpec(
            "bare-metal machines need spec.baremetal.bmcCredentialsSecretRef on the HybridCluster",
            reason="NoBMCCredentials",
        )
    return BaremetalInstanceSpec(
        bmc=BMC(
            address=bmc_url(settings.bmc_address_template, device),
            credentials_secret_ref=LocalObjectReference(name=settings.bmc_credentials_secret_ref.name),
            allow_redfish_http=settings.allow_redfish_http,
            address_cidrs=settings.bmc_address_cidrs,
        ),
        boot_mac_address=boot_interface(spec, device).mac_address,
        image=baremetal.image,
        root_device_hints=baremetal.root_device_hints,
        os=baremetal.os_profile,
        user_data_secret_ref=SecretKeyReference(name=facts.data_secret, key=BOOTSTRAP_DATA_KEY),
        interfaces=guest_interfaces(spec, cluster, server_macs(spec, device), allocations),
        meta_data=cluster_meta_data(cluster),
        provider_id=names.metal_provider_id(device.device_id),
        hostname=hostname(facts.name, cluster.domain),
        online=True,
        cleaning=baremetal.cleaning,
        boot_server_url=settings.boot_server_url,
        max_provisioning_attempts=baremetal.max_provisioning_attempts or DEFAULT_PROVISIONING_ATTEMPTS,
    )
