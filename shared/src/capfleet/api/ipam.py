"""The two IP pool kinds that ipam-address serves through CAPI's IPAM contract (group ipam.capfleet.dev).

An IPAddressClaim's `spec.poolRef` names one of these; ipam-address allocates from it and writes the
IPAddress. HybridIPPool keeps its addresses in the cluster; NetboxIPPool allocates them from NetBox prefixes
and IP ranges. The glue, and any other CAPI provider, only ever refers to them by kind and name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from capfleet.api.base import (
    ADDRESS_SPEC_MAX,
    CIDR,
    Conditions,
    ConnectionSecretReference,
    CustomObject,
    IPAddress,
    Model,
    Slug,
    cel,
    cel_rules,
)

_HALVES = "self.split('-')"
AddressSpec = Annotated[
    str,
    Field(
        min_length=1,
        max_length=ADDRESS_SPEC_MAX,
        description="An IP address, a CIDR (10.0.0.0/24) or a range of two addresses (10.0.0.10-10.0.0.20).",
        json_schema_extra=cel(
            f"isIP(self) || isCIDR(self) || ({_HALVES}.size() == 2 && isIP({_HALVES}[0])"
            f" && isIP({_HALVES}[1]) && ip({_HALVES}[0]).family() == ip({_HALVES}[1]).family())",
            "must be an IP address, a CIDR such as 10.0.0.0/24, or a range of two addresses of one family"
            " such as 10.0.0.10-10.0.0.20",
        ),
    ),
]


IPOrCIDR = Annotated[
    str,
    Field(
        max_length=ADDRESS_SPEC_MAX,
        description="An IP address, with or without a prefix length.",
        json_schema_extra=cel(
            "isIP(self) || isCIDR(self)", "must be an IP address, optionally with a prefix length"
        ),
    ),
]


class AddressCounts(Model):
    """How many addresses a pool has; counts too large for int64 (big IPv6 pools) are capped."""

    total: int = Field(
        ge=0, description="Addresses the pool can hand out.", json_schema_extra={"format": "int64"}
    )
    free: int = Field(ge=0, description="Addresses not allocated.", json_schema_extra={"format": "int64"})
    used: int = Field(
        ge=0, description="Addresses allocated to claims.", json_schema_extra={"format": "int64"}
    )
    out_of_range: int = Field(
        default=0,
        ge=0,
        description="Allocated addresses no longer inside the pool's addresses (after the pool shrank).",
        json_schema_extra={"format": "int64"},
    )


class PoolStatus(Model):
    """Observed state of a pool."""

    ip_addresses: AddressCounts | None = Field(
        default=None, description="Address counts, as CAPI's in-cluster provider reports them."
    )
    conditions: Conditions = Field(default_factory=list)


class HybridIPPoolSpec(Model):
    """Desired state of an in-cluster IP pool."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "self.addresses.all(a, a.contains(':')) || self.addresses.all(a, !a.contains(':'))",
                "a pool holds addresses of one family only; use two pools for dual-stack",
            ),
            (
                "self.prefix <= 32 || self.addresses.all(a, a.contains(':'))",
                "prefix must be at most 32 for IPv4 addresses",
            ),
        )
    )

    addresses: list[AddressSpec] = Field(
        min_length=1,
        max_length=256,
        description="Addresses the pool hands out: IPs, CIDRs and 'first-last' ranges.",
    )
    prefix: int = Field(ge=0, le=128, description="Prefix length of the network the addresses belong to.")
    gateway: IPAddress | None = Field(
        default=None, description="Default gateway handed out with every address; it is never allocated."
    )
    excluded_addresses: list[AddressSpec] = Field(
        default_factory=list, max_length=256, description="Addresses, CIDRs or ranges never handed out."
    )
    nameservers: list[IPAddress] = Field(
        default_factory=list,
        max_length=8,
        description="DNS servers for the network, for consumers that want them.",
    )
    allocate_reserved_ip_addresses: bool = Field(
        default=False,
        alias="allocateReservedIPAddresses",
        description="Also hand out the network and (IPv4) broadcast addresses; skipped by default.",
    )


class HybridIPPool(CustomObject[HybridIPPoolSpec, PoolStatus]):
    """A pool of IP addresses kept in the cluster, allocated to IPAddressClaims by ipam-address."""


class NetboxPrefix(Model):
    """A NetBox prefix to allocate from, by id or by CIDR (and VRF)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            ("has(self.id) != has(self.cidr)", "exactly one of id and cidr must be set"),
            ("!(has(self.id) && has(self.vrf))", "vrf applies only to a prefix given by cidr"),
        )
    )

    id: int | None = Field(default=None, ge=1, description="NetBox id of the prefix.")
    cidr: CIDR | None = Field(default=None, description="The prefix, e.g. 10.0.0.0/24.")
    vrf: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Name of the prefix's VRF; the global table if unset.",
    )


class NetboxIPRange(Model):
    """A NetBox IP range to allocate from, by id or by its first and last address (and VRF)."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "has(self.id) ? !has(self.startAddress) && !has(self.endAddress)"
                " : has(self.startAddress) && has(self.endAddress)",
                "set either id, or both startAddress and endAddress",
            ),
            ("!(has(self.id) && has(self.vrf))", "vrf applies only to a range given by its addresses"),
        )
    )

    id: int | None = Field(default=None, ge=1, description="NetBox id of the IP range.")
    start_address: IPOrCIDR | None = Field(default=None, description="First address of the range.")
    end_address: IPOrCIDR | None = Field(default=None, description="Last address of the range.")
    vrf: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Name of the range's VRF; the global table if unset.",
    )


class NetboxIPPoolSpec(Model):
    """Desired state of a pool whose addresses NetBox allocates."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "(has(self.prefixes) && size(self.prefixes) > 0)"
            " || (has(self.ipRanges) && size(self.ipRanges) > 0)",
            "at least one prefix or IP range must be given",
        )
    )

    connection_secret_ref: ConnectionSecretReference = Field(
        description="Secret with the NetBox connection (keys url, token, optional caBundle)."
    )
    prefixes: list[NetboxPrefix] = Field(
        default_factory=list,
        max_length=16,
        description="Prefixes to allocate from, tried in order.",
    )
    ip_ranges: list[NetboxIPRange] = Field(
        default_factory=list,
        max_length=16,
        description="IP ranges to allocate from, tried in order after the prefixes.",
    )
    gateway: IPAddress | None = Field(
        default=None, description="Default gateway handed out with every address."
    )
    tenant: Slug | None = Field(
        default=None, description="Slug of the NetBox tenant the addresses are assigned to."
    )
    tags: list[Slug] = Field(
        default_factory=list,
        max_length=16,
        description="Slugs of NetBox tags put on every address, beside capfleet's.",
    )
    status: str = Field(
        default="active",
        min_length=1,
        max_length=50,
        description="NetBox status of allocated addresses, e.g. active, reserved or dhcp.",
    )
    dns_name_template: str | None = Field(
        default=None,
        max_length=253,
        description="DNS name written on each address; {name}, {namespace} and {cluster} are replaced by the"
        " claim's name, namespace and cluster name.",
    )
    nameservers: list[IPAddress] = Field(
        default_factory=list,
        max_length=8,
        description="DNS servers for the network, for consumers that want them.",
    )
    release_policy: Literal["Delete", "Keep"] = Field(
        default="Delete",
        description="What happens to a NetBox address when its claim goes: deleted, or kept.",
    )


class NetboxIPPool(CustomObject[NetboxIPPoolSpec, PoolStatus]):
    """A pool of IP addresses allocated atomically from NetBox prefixes and IP ranges by ipam-address."""
