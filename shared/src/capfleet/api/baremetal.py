"""The kind baremetal-provision reconciles (group baremetal.capfleet.dev): one server driven by its BMC.

The glue creates a BaremetalInstance for every bare-metal machine once NetBox has named the server, its
BMC and its boot MAC; baremetal-provision powers it, network-boots the OS installer profile with the
bootstrap data as NoCloud seed, and reports the phase. `OSProfile` is also part of HybridMachine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from capfleet.api.base import (
    DNS_SUBDOMAIN_PATTERN,
    HTTPURL,
    URL_MAX,
    Conditions,
    CustomObject,
    GuestInterface,
    LocalObjectReference,
    MACAddress,
    Model,
    SecretKeyReference,
    cel_rules,
    immutable_once_set,
)

BMC_ADDRESS_PATTERN = r"^(redfish\+https?|ipmi)://[^\s/?#]+(/[^\s]*)?$"


class BMC(Model):
    """How to reach a server's baseboard management controller."""

    address: str = Field(
        max_length=URL_MAX,
        pattern=BMC_ADDRESS_PATTERN,
        description="redfish+https://host[:port]/redfish/v1/Systems/<id>, redfish+http://… or ipmi://host[:port].",
    )
    credentials_secret_ref: LocalObjectReference = Field(
        description="Secret with the BMC's username and password (keys username, password)."
    )
    disable_certificate_verification: bool = Field(
        default=False, description="Accept any TLS certificate from a Redfish BMC. Verified unless set."
    )


class OSProfile(Model):
    """The OS installer that is network-booted: kernel, initrd and kernel command line."""

    kernel_url: HTTPURL = Field(alias="kernelURL", description="URL of the kernel.")
    initrd_url: HTTPURL = Field(alias="initrdURL", description="URL of the initrd.")
    kernel_args: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list,
        max_length=64,
        description="Kernel command-line arguments, added to the ones capfleet needs to find the seed.",
    )


Phase = Literal[
    "Registering",
    "PoweringOff",
    "NetworkBooting",
    "Installing",
    "Provisioned",
    "Deprovisioning",
    "Cleaning",
    "Failed",
]


class BaremetalInstanceSpec(Model):
    """Desired state of a bare-metal server."""

    model_config = ConfigDict(json_schema_extra=cel_rules(immutable_once_set("providerID")))

    bmc: BMC = Field(description="The server's BMC.")
    boot_mac_address: MACAddress = Field(
        alias="bootMACAddress", description="MAC of the NIC that network-boots."
    )
    os: OSProfile = Field(description="The OS installer profile to network-boot.")
    user_data_secret_ref: SecretKeyReference = Field(
        description="Secret key holding the user-data (CAPI's bootstrap data Secret, key value)."
    )
    interfaces: list[GuestInterface] = Field(
        default_factory=list,
        max_length=16,
        description="The server's NICs as its OS configures them (network-config v2); DHCP when empty.",
    )
    network_data: dict[str, Any] | None = Field(
        default=None,
        description="A whole cloud-init network-config v2 served as-is, instead of one from interfaces.",
    )
    meta_data: dict[str, str] = Field(
        default_factory=dict,
        max_length=32,
        description="Extra NoCloud meta-data keys (instance-id, local-hostname and provider-id win).",
    )
    provider_id: str | None = Field(
        default=None,
        alias="providerID",
        max_length=512,
        description="provider-id served in the meta-data; immutable once set.",
    )
    hostname: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="local-hostname in the meta-data.",
    )
    online: bool = Field(
        default=True,
        description="Whether the server should be powered on once provisioned (installing powers it on).",
    )
    cleaning: Literal["metadata", "disabled"] = Field(
        default="disabled",
        description=(
            "On deletion: network-boot the cleaning profile to wipe disk metadata and wait for its callback"
            " (at most provisioningTimeoutSeconds), or not. Never for a clusterctl move."
        ),
    )
    cleaning_os: OSProfile | None = Field(
        default=None,
        description=(
            "OS profile booted for cleaning; spec.os (with capfleet.mode=cleaning) if unset. It is given its"
            " callback URL as capfleet.callback on the kernel command line."
        ),
    )
    boot_server_url: HTTPURL | None = Field(
        default=None,
        alias="bootServerURL",
        description="Base URL at which the server reaches baremetal-provision; the operator's own if unset.",
    )
    provisioning_timeout_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description=(
            "How long installing may take before the instance fails and the server is powered off; also how"
            " long the cleaner is waited for."
        ),
    )


class BaremetalInstanceStatus(Model):
    """Observed state of a bare-metal server; rebuilt from its BMC when lost."""

    phase: Phase | None = Field(default=None, description="Where provisioning is.")
    power_state: Literal["On", "Off", "Unknown"] | None = Field(
        default=None, description="Power state the BMC reports."
    )
    conditions: Conditions = Field(default_factory=list)


class BaremetalInstance(CustomObject[BaremetalInstanceSpec, BaremetalInstanceStatus]):
    """A bare-metal server provisioned over its BMC by network-booting an OS installer."""
