"""The building blocks every capfleet API model shares: the model base, conditions, references, selectors.

The kinds in the sibling modules are assembled from these, and `capfleet.crdgen` turns them into CRD
schemas, so a rule written here (a length limit, a pattern, a CEL check) holds for every kind that uses
the block. `capfleet.conditions` works on `Condition`.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Length limits, both for sanity and so that the apiserver's CEL cost estimate stays bounded.
NAME_MAX = 253
LABEL_VALUE_MAX = 63
TEXT_MAX = 1024
URL_MAX = 2048
IP_MAX = 45  # the longest IPv6 text form, with an embedded IPv4 part
CIDR_MAX = 49
ADDRESS_SPEC_MAX = 96  # an "a-b" range of two IPv6 addresses

MAC_PATTERN = r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$"
HTTP_URL_PATTERN = r"^https?://[^\s]+$"
# A lower-case RFC 1123 subdomain: Kubernetes object names, hostnames, DNS domains.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
BASE_IMAGE_PATTERN = r"^[A-Za-z0-9][-A-Za-z0-9.+]*$"
"""A base image volume a VM clones: never `_`, which every capfleet VM's own volume names carry
(`<namespace>_<name>_...`), nor `/`, so no spec can name another VM's disk or seed, or a path."""
BASE_IMAGE_GLOB_PATTERN = r"^[-A-Za-z0-9.+*?]+$"


def cel(rule: str, message: str, **extra: str) -> dict[str, Any]:
    """A `json_schema_extra` carrying one CEL rule; `capfleet.crdgen` copies it into the CRD."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message, **extra}]}


def cel_rules(*rules: tuple[str, str]) -> dict[str, Any]:
    """A `json_schema_extra` carrying several CEL rules, as (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def immutable_once_set(field: str) -> tuple[str, str]:
    """A (rule, message) for a parent object whose optional `field` may be set once, then never changed."""
    return (
        f"!has(oldSelf.{field}) || (has(self.{field}) && self.{field} == oldSelf.{field})",
        f"{field} is immutable once set",
    )


def list_map(*keys: str) -> dict[str, Any]:
    """A `json_schema_extra` making a list a map keyed by `keys`: the apiserver rejects duplicate keys."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class Model(BaseModel):
    """Base of every capfleet API model: snake_case in Python, camelCase on the wire.

    Unknown fields are ignored on purpose: the intermediate CRDs are the contract between operators that
    are upgraded independently, so a newer peer may write fields this one does not know yet.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", alias_generator=to_camel)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready wire form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


IPAddress = Annotated[
    str,
    Field(
        max_length=IP_MAX,
        description="An IPv4 or IPv6 address.",
        json_schema_extra=cel("isIP(self)", "must be an IPv4 or IPv6 address"),
    ),
]
CIDR = Annotated[
    str,
    Field(
        max_length=CIDR_MAX,
        description="An address with its prefix length, e.g. 10.0.0.5/24.",
        json_schema_extra=cel("isCIDR(self)", "must be an address with a prefix length, e.g. 10.0.0.5/24"),
    ),
]
MACAddress = Annotated[
    str, Field(pattern=MAC_PATTERN, max_length=17, description="A lower-case, colon-separated MAC address.")
]
HTTPURL = Annotated[str, Field(pattern=HTTP_URL_PATTERN, max_length=URL_MAX, description="An http(s) URL.")]
Slug = Annotated[str, Field(min_length=1, max_length=100, description="A NetBox slug or name.")]


class Condition(Model):
    """One observation of an object's state, in the shape of Kubernetes' metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Type of the condition, in CamelCase, e.g. Ready.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="A CamelCase, machine-readable reason for the last transition.",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="A human-readable explanation, saying what to do if anything.",
    )
    last_transition_time: str = Field(
        alias="lastTransitionTime",
        description="When the status last changed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    observed_generation: int | None = Field(
        default=None,
        alias="observedGeneration",
        ge=0,
        description="The metadata.generation the condition was computed from.",
        json_schema_extra={"format": "int64"},
    )


Conditions = Annotated[
    list[Condition],
    Field(
        max_length=32,
        description="The latest observations of the object's state; Ready summarises them.",
        json_schema_extra=list_map("type"),
    ),
]


IFNAME_MAX = 15  # Linux interface names (IFNAMSIZ - 1)


class GuestInterface(Model):
    """A NIC as the guest OS sees it: cloud-init matches it by MAC and names it `name`."""

    name: str | None = Field(
        default=None,
        max_length=IFNAME_MAX,
        pattern=DNS_LABEL_PATTERN,
        description="Interface name in the guest (the HybridMachine interface's name); eth<index> if unset.",
    )
    mac_address: MACAddress = Field(description="MAC address; deterministic, chosen by the creator.")
    addresses: list[CIDR] = Field(
        default_factory=list, max_length=8, description="Static addresses with prefix length; DHCP if empty."
    )
    gateway: IPAddress | None = Field(default=None, description="Default gateway on this NIC.")
    nameservers: list[IPAddress] = Field(default_factory=list, max_length=8, description="DNS servers.")


class LocalObjectReference(Model):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the referenced object.")


class SecretKeyReference(Model):
    """A key of a Secret in the same namespace."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the Secret.")
    key: str = Field(default="value", min_length=1, max_length=NAME_MAX, description="Key in the Secret.")


class NamespacedSecretReference(Model):
    """A Secret in a named namespace (used by cluster-scoped objects)."""

    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the Secret.")
    namespace: str = Field(min_length=1, max_length=63, description="Namespace of the Secret.")


class TypedLocalObjectReference(Model):
    """A reference to an object of any kind in the same namespace, as CAPI's IPAM contract spells it."""

    api_group: str = Field(min_length=1, max_length=NAME_MAX, description="API group of the referenced kind.")
    kind: str = Field(min_length=1, max_length=63, description="Kind of the referenced object.")
    name: str = Field(min_length=1, max_length=NAME_MAX, description="Name of the referenced object.")


class LabelSelector(Model):
    """Selects objects whose labels include every given label."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels an object must carry, all of them, to be selected."
    )


class ConnectionSecretReference(Model):
    """A Secret holding a NetBox connection: keys `url`, `token` and optionally `caBundle`."""

    name: str = Field(
        min_length=1, max_length=NAME_MAX, description="Name of the Secret, in the same namespace."
    )


class ObjectTemplateMeta(Model):
    """Labels and annotations that objects cloned from a template receive."""

    labels: dict[str, str] = Field(default_factory=dict, description="Labels of the cloned object.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations of the cloned object.")


SpecT = TypeVar("SpecT", bound=Model)
StatusT = TypeVar("StatusT", bound=Model)


class CustomObject(Model, Generic[SpecT, StatusT]):
    """A whole custom resource as the apiserver returns it; `metadata` stays the untyped original."""

    api_version: str = Field(description="API version of the object.")
    kind: str = Field(description="Kind of the object.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: SpecT = Field(description="Desired state.")
    status: StatusT | None = Field(
        default=None, description="Observed state, a cache rebuilt by the operator."
    )


class NoStatus(Model):
    """The status of a kind that has none (templates)."""
