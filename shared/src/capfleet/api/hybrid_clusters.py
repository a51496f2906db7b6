"""The CAPI InfraCluster kinds users write (group infrastructure.cluster.x-k8s.io), reconciled by the glue.

HybridCluster implements Cluster API's v1beta2 InfraCluster contract: the control-plane endpoint,
`status.initialization.provisioned` and the failure domains as a list. It also holds what every machine
of the cluster shares (NetBox, hypervisor selector, failure domains, bare-metal settings), so the glue
can create a machine's children from the HybridMachine and its cluster alone. HybridClusterTemplate is
what ClusterClass clones it from.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from capfleet.api.baremetal import BMCNetworks
from capfleet.api.base import (
    DNS_SUBDOMAIN_PATTERN,
    HTTPURL,
    Conditions,
    ConnectionSecretReference,
    CustomObject,
    IPAddress,
    LabelSelector,
    LocalObjectReference,
    Model,
    NoStatus,
    ObjectTemplateMeta,
    Slug,
    TypedLocalObjectReference,
    cel_rules,
    immutable_once_set,
    list_map,
)
from capfleet.api.netbox import DeviceSelector


class APIEndpoint(Model):
    """Where the workload cluster's API server is reached."""

    host: str = Field(min_length=1, max_length=512, description="Host name or IP address.")
    port: int = Field(default=6443, ge=1, le=65535, description="Port.")


class NetboxConnection(Model):
    """The NetBox instance a cluster's devices, VMs and addresses are recorded in."""

    connection_secret_ref: ConnectionSecretReference = Field(
        description="Secret with the NetBox connection (keys url, token, optional caBundle)."
    )
    cluster: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="NetBox virtualization cluster the cluster's VMs are recorded in.",
    )
    site: Slug | None = Field(
        default=None, description="Slug of the NetBox site VMs are recorded in (when no cluster is given)."
    )
    tenant: Slug | None = Field(default=None, description="Slug of the NetBox tenant of VMs and servers.")


class FailureDomainSpec(Model):
    """A failure domain machines can be spread over, and what places a machine in it."""

    name: str = Field(min_length=1, max_length=256, description="Name of the failure domain.")
    control_plane: bool = Field(
        default=False, description="Whether control-plane machines may be placed here."
    )
    hypervisor_selector: LabelSelector | None = Field(
        default=None,
        description="Labels of the Hypervisors in this domain (besides their spec.failureDomain).",
    )
    device_selector: DeviceSelector | None = Field(
        default=None, description="Extra criteria for NetBox devices in this domain, e.g. their site."
    )


class ClusterBaremetal(Model):
    """Cluster-wide settings for bare-metal machines."""

    bmc_credentials_secret_ref: LocalObjectReference | None = Field(
        default=None, description="Secret with the BMCs' username and password (keys username, password)."
    )
    bmc_address_template: str | None = Field(
        default=None,
        max_length=512,
        description="Turns a device's bare BMC address from NetBox (a host or an out-of-band IP) into a BMC"
        " URL: {address}, {name} and {serial} are replaced, e.g."
        " redfish+https://{address}/redfish/v1/Systems/1. A NetBox value that already is a URL"
        " (scheme://...) is used as it is; without a template every value must be one.",
    )
    bmc_address_cidrs: BMCNetworks = Field(
        alias="bmcAddressCIDRs",
        description="Networks BMC addresses must be in: a device whose BMC (as NetBox records it) is"
        " elsewhere is not sent the credentials. Any address when empty; set it, since whoever can edit"
        " a device in NetBox chooses where its BMC is.",
    )
    allow_redfish_http: bool = Field(
        default=False,
        alias="allowRedfishHTTP",
        description="Allow redfish+http:// BMC addresses (credentials sent unencrypted); refused unless set.",
    )
    boot_server_url: HTTPURL | None = Field(
        default=None,
        alias="bootServerURL",
        description="Base URL at which this cluster's servers reach baremetal-provision;"
        " the operator's own if unset.",
    )


class HybridClusterShape(Model):
    """A hybrid cluster's infrastructure as a template fixes it: a HybridClusterSpec without update rules."""

    control_plane_endpoint: APIEndpoint | None = Field(
        default=None,
        description="The control-plane endpoint; immutable once set (then by the glue if pooled).",
    )
    control_plane_endpoint_pool_ref: TypedLocalObjectReference | None = Field(
        default=None, description="An IP pool to allocate the control-plane endpoint's address from."
    )
    netbox: NetboxConnection | None = Field(default=None, description="NetBox, if the cluster uses it.")
    hypervisor_selector: LabelSelector | None = Field(
        default=None, description="Labels of the Hypervisors this cluster's VMs may run on."
    )
    failure_domains: list[FailureDomainSpec] = Field(
        default_factory=list,
        max_length=32,
        description="Failure domains machines are spread over.",
        json_schema_extra=list_map("name"),
    )
    nameservers: list[IPAddress] = Field(
        default_factory=list, max_length=8, description="DNS servers for machines."
    )
    domain: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="DNS domain of machine hostnames.",
    )
    baremetal: ClusterBaremetal | None = Field(default=None, description="Settings for bare-metal machines.")


class HybridClusterSpec(HybridClusterShape):
    """Desired state of a hybrid cluster's infrastructure."""

    model_config = ConfigDict(json_schema_extra=cel_rules(immutable_once_set("controlPlaneEndpoint")))


class FailureDomain(Model):
    """A failure domain as CAPI's v1beta2 contract reports it."""

    name: str = Field(min_length=1, max_length=256, description="Name of the failure domain.")
    control_plane: bool | None = Field(
        default=None, description="Whether control-plane machines may be placed here."
    )
    attributes: dict[str, str] = Field(default_factory=dict, description="Free-form attributes.")


class Initialization(Model):
    """CAPI's initialization flags."""

    provisioned: bool | None = Field(default=None, description="The infrastructure is fully provisioned.")


class HybridClusterStatus(Model):
    """Observed state of a hybrid cluster's infrastructure."""

    initialization: Initialization | None = Field(
        default=None, description="Provisioning progress, for CAPI."
    )
    failure_domains: list[FailureDomain] = Field(
        default_factory=list,
        max_length=32,
        description="The failure domains, for CAPI.",
        json_schema_extra=list_map("name"),
    )
    conditions: Conditions = Field(default_factory=list)


class HybridCluster(CustomObject[HybridClusterSpec, HybridClusterStatus]):
    """A workload cluster's infrastructure: its endpoint, NetBox, hypervisors and failure domains."""


class HybridClusterTemplateResource(Model):
    """What a HybridCluster is cloned from."""

    metadata: ObjectTemplateMeta | None = Field(
        default=None, description="Labels and annotations of the clone."
    )
    spec: HybridClusterShape = Field(description="Spec of the clone.")


class HybridClusterTemplateSpec(Model):
    """Desired state of a HybridClusterTemplate."""

    template: HybridClusterTemplateResource = Field(description="The HybridCluster to clone.")


class HybridClusterTemplate(CustomObject[HybridClusterTemplateSpec, NoStatus]):
    """A template CAPI's ClusterClass clones HybridClusters from."""
