"""What a HybridMachine's children should be: pure functions from the machine, its cluster and facts.

The glue's reconcile only gathers facts (the Machine, the cluster, allocated addresses, the claimed
device) and writes objects; every decision about a child's spec is made here, where it is unit-tested:
which labels pick a hypervisor, which NetBox device may be claimed, what network configuration the
server boots with, which MAC a NIC gets.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet import errors
from capfleet.api.hybrid_clusters import FailureDomainSpec, HybridClusterSpec
from capfleet.api.hybrid_machines import HybridMachineSpec, MachineInterface, VMMachine
from capfleet.api.netbox import DeviceInterface, NetboxDeviceStatus
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


@dataclass(frozen=True)
class ClaimPlan:
    name: str
    interface: str
    spec: dict[str, Any]


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


def device_selector(spec: HybridMachineSpec, domain: FailureDomainSpec | None) -> dict[str, Any]:
    """The NetBox device selector: the machine's, narrowed by its failure domain's."""
    assert spec.baremetal is not None
    own = spec.baremetal.device_selector.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    if domain is None or domain.device_selector is None:
        return own
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
    return merged


def address_claims(spec: HybridMachineSpec, facts: MachineFacts) -> list[ClaimPlan]:
    """One IPAddressClaim per pool of each interface, in interface order."""
    plans = []
    for interface in spec.network.interfaces:
        for index, pool in enumerate(interface.ip_pool_refs):
            plans.append(
                ClaimPlan(
                    name=names.address_claim(facts.name, interface.name, index),
                    interface=interface.name,
                    spec={
                        "poolRef": pool.model_dump(by_alias=True),
                        "clusterName": facts.cluster,
                    },
                )
            )
    return plans


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


def vm_spec(
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: MachineFacts,
    allocations: Mapping[str, Sequence[Allocation]],
) -> dict[str, Any]:
    """The LibvirtVM of a VM machine."""
    vm: VMMachine | None = spec.vm
    assert vm is not None
    domain = failure_domain(cluster, facts.failure_domain)
    labels = merged_labels(
        cluster.hypervisor_selector.match_labels if cluster.hypervisor_selector else None,
        domain.hypervisor_selector.match_labels if domain and domain.hypervisor_selector else None,
        vm.hypervisor_selector.match_labels if vm.hypervisor_selector else None,
    )
    default = _default_interface(spec.network.interfaces)
    interfaces = []
    for interface in spec.network.interfaces:
        own = allocations.get(interface.name, ())
        nic: dict[str, Any] = {"macAddress": names.mac_address(facts.namespace, facts.name, interface.name)}
        if interface.bridge:
            nic["bridge"] = interface.bridge
        elif interface.network:
            nic["network"] = interface.network
        else:
            nic["userMode"] = True
        if own:
            nic["addresses"] = [a.cidr for a in own]
            gateway = _gateway(interface, default, own)
            if gateway:
                nic["gateway"] = gateway
        if interface.name == default and cluster.nameservers:
            nic["nameservers"] = list(cluster.nameservers)
        interfaces.append(nic)
    result: dict[str, Any] = {
        "hypervisorSelector": {"matchLabels": labels},
        "vcpus": vm.vcpus,
        "memoryMiB": vm.memory_mib,
        "disks": [
            {
                "name": disk.name or ("root" if index == 0 else f"disk{index}"),
                "sizeGiB": disk.size_gib,
                **({"sourceImage": disk.image} if disk.image else {}),
            }
            for index, disk in enumerate(vm.disks)
        ],
        "interfaces": interfaces,
        "cloudInit": {
            "userDataSecretRef": {"name": facts.data_secret, "key": BOOTSTRAP_DATA_KEY},
            "hostname": hostname(facts.name, cluster.domain),
            "metaData": cluster_meta_data(cluster),
        },
        "powerState": "On",
    }
    if facts.failure_domain:
        result["failureDomain"] = facts.failure_domain
    anti_affinity = vm.anti_affinity_key or facts.group
    if anti_affinity:
        result["antiAffinityKey"] = anti_affinity
    return result


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
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: MachineFacts,
    allocations: Mapping[str, Sequence[Allocation]],
) -> dict[str, Any] | None:
    """The NetboxVirtualMachine of a VM machine; None when the cluster records no VMs in NetBox."""
    netbox = cluster.netbox
    if netbox is None or not records_vms(cluster):
        return None
    vm = spec.vm
    assert vm is not None
    result: dict[str, Any] = {
        "connectionSecretRef": {"name": netbox.connection_secret_ref.name},
        "name": facts.name,
        "vcpus": vm.vcpus,
        "memoryMiB": vm.memory_mib,
        "diskGiB": sum(d.size_gib for d in vm.disks),
        "description": f"capfleet machine {facts.namespace}/{facts.name} of cluster {facts.cluster}",
        "interfaces": [
            {
                "name": interface.name,
                "macAddress": names.mac_address(facts.namespace, facts.name, interface.name),
                "addresses": [a.cidr for a in allocations.get(interface.name, ())],
            }
            for interface in spec.network.interfaces
        ],
    }
    for key in ("cluster", "site", "tenant"):
        value = getattr(netbox, key)
        if value:
            result[key] = value
    return result


def device_spec(spec: HybridMachineSpec, cluster: HybridClusterSpec, facts: MachineFacts) -> dict[str, Any]:
    """The NetboxDevice that claims a bare-metal machine's server."""
    if cluster.netbox is None:
        raise errors.InvalidSpec(
            "bare-metal machines are claimed from NetBox: set spec.netbox on the HybridCluster",
            reason="NetboxRequired",
        )
    claim: dict[str, Any] = {"description": f"capfleet machine {facts.namespace}/{facts.name}"}
    if cluster.netbox.tenant:
        claim["tenant"] = cluster.netbox.tenant
    return {
        "connectionSecretRef": {"name": cluster.netbox.connection_secret_ref.name},
        "selector": device_selector(spec, failure_domain(cluster, facts.failure_domain)),
        "claim": claim,
    }


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
    """The BMC URL of a claimed device: NetBox's value as is, or filled into the cluster's template."""
    address = device.bmc_address
    if not address:
        raise errors.InvalidSpec(
            f"NetBox device {device.name} has no BMC address (custom field bmc_address or out-of-band IP)",
            reason="NoBMCAddress",
        )
    if template is None:
        return address
    return (
        template.replace("{address}", address)
        .replace("{name}", device.name or "")
        .replace("{serial}", device.serial or "")
    )


def network_data(
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    device: NetboxDeviceStatus,
    allocations: Mapping[str, Sequence[Allocation]],
) -> dict[str, Any]:
    """cloud-init network-config v2 for a server: NICs matched by MAC and named as in NetBox."""
    macs = {i.name: i.mac_address for i in device.interfaces if i.mac_address}
    default = _default_interface(spec.network.interfaces)
    ethernets: dict[str, Any] = {}
    for interface in spec.network.interfaces:
        mac = macs.get(interface.name)
        if mac is None:
            raise errors.InvalidSpec(
                f"NetBox device {device.name} has no interface {interface.name} with a MAC address",
                reason="UnknownInterface",
            )
        own = allocations.get(interface.name, ())
        entry: dict[str, Any] = {"match": {"macaddress": mac.lower()}, "set-name": interface.name}
        if own:
            entry["addresses"] = [a.cidr for a in own]
            gateway = _gateway(interface, default, own)
            if gateway:
                default_route = "0.0.0.0/0" if ipaddress.ip_address(gateway).version == 4 else "::/0"
                entry["routes"] = [{"to": default_route, "via": gateway}]
        else:
            entry["dhcp4"] = True
        if interface.name == default and cluster.nameservers:
            entry["nameservers"] = {"addresses": list(cluster.nameservers)}
        ethernets[interface.name] = entry
    return {"version": 2, "ethernets": ethernets}


def instance_spec(
    spec: HybridMachineSpec,
    cluster: HybridClusterSpec,
    facts: MachineFacts,
    device: NetboxDeviceStatus,
    allocations: Mapping[str, Sequence[Allocation]],
) -> dict[str, Any]:
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
    result: dict[str, Any] = {
        "bmc": {
            "address": bmc_url(settings.bmc_address_template, device),
            "credentialsSecretRef": {"name": settings.bmc_credentials_secret_ref.name},
        },
        "bootMACAddress": boot_interface(spec, device).mac_address,
        "os": baremetal.os_profile.model_dump(by_alias=True, exclude_none=True),
        "userDataSecretRef": {"name": facts.data_secret, "key": BOOTSTRAP_DATA_KEY},
        "networkData": network_data(spec, cluster, device, allocations),
        "providerID": names.metal_provider_id(device.device_id),
        "hostname": hostname(facts.name, cluster.domain),
        "online": True,
        "cleaning": baremetal.cleaning,
    }
    if settings.boot_server_url:
        result["bootServerURL"] = str(settings.boot_server_url)
    return result
