"""Typed views of the Cluster API objects the fleet reads: Cluster, Machine, IPAddressClaim, IPAddress.

CAPI owns these kinds and their CRDs; capfleet never generates their schemas. The models name only the
fields capfleet reads or writes, so every operator reads them typed (`Machine.parse(body)`) instead of
digging through dicts, and builds the IPAM objects it writes from typed specs. Unknown fields are
ignored: CAPI adds fields between releases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field

from capfleet.api.base import Model


class OwnerReference(Model):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class Metadata(Model):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list)


class CapiObject(Model):
    metadata: Metadata = Field(default_factory=Metadata)

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Self:
        return cls.model_validate(dict(body))


class TypedReference(Model):
    """A reference by API group (or apiVersion), kind and name, as CAPI's contracts use."""

    api_group: str | None = None
    api_version: str | None = None
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class APIEndpoint(Model):
    host: str = ""
    port: int = 0


class ClusterSpec(Model):
    paused: bool = False
    infrastructure_ref: TypedReference | None = None
    control_plane_ref: TypedReference | None = None
    control_plane_endpoint: APIEndpoint | None = None


class ClusterInitialization(Model):
    infrastructure_provisioned: bool | None = None
    control_plane_initialized: bool | None = None


class ClusterStatus(Model):
    initialization: ClusterInitialization = Field(default_factory=ClusterInitialization)
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    """Left in wire form: `capfleet.conditions.parse` reads them."""


class Cluster(CapiObject):
    spec: ClusterSpec = Field(default_factory=ClusterSpec)
    status: ClusterStatus = Field(default_factory=ClusterStatus)


class Bootstrap(Model):
    data_secret_name: str | None = None


class MachineSpec(Model):
    cluster_name: str = ""
    bootstrap: Bootstrap = Field(default_factory=Bootstrap)
    infrastructure_ref: TypedReference | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    failure_domain: str | None = None
    version: str | None = None


class NodeReference(Model):
    name: str = ""


class MachineStatus(Model):
    phase: str | None = None
    node_ref: NodeReference | None = None


class Machine(CapiObject):
    spec: MachineSpec = Field(default_factory=MachineSpec)
    status: MachineStatus = Field(default_factory=MachineStatus)


class IPAddressClaimSpec(Model):
    pool_ref: TypedReference
    cluster_name: str | None = None


class LocalReference(Model):
    name: str = ""


class IPAddressClaimStatus(Model):
    address_ref: LocalReference | None = None


class IPAddressClaim(CapiObject):
    spec: IPAddressClaimSpec
    status: IPAddressClaimStatus = Field(default_factory=IPAddressClaimStatus)


class IPAddressSpec(Model):
    claim_ref: LocalReference
    pool_ref: TypedReference
    address: str
    prefix: int
    gateway: str | None = None


class IPAddress(CapiObject):
    spec: IPAddressSpec
