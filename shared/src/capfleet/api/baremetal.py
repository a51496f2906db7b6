"""The kind baremetal-provision reconciles (group baremetal.capfleet.dev): one server driven by its BMC.

The glue creates a BaremetalInstance for every bare-metal machine once NetBox has named the server, its
BMC and its boot MAC; baremetal-provision powers it and network-boots either capfleet's deploy ramdisk,
which writes `spec.image` to the disk chosen by `spec.rootDeviceHints` with the bootstrap data as a NoCloud
seed beside it, or a custom installer (`spec.os`) of the user's that does the same its own way. Exactly
one of the two is given (checked at admission). `OSProfile`, `Image` and `RootDeviceHints` are also part
of HybridMachine.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from capfleet.api.base import (
    CIDR,
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
BMCNetworks = Annotated[list[CIDR], Field(default_factory=list, max_length=32)]


class BMC(Model):
    """How to reach a server's baseboard management controller."""

    address: str = Field(
        max_length=URL_MAX,
        pattern=BMC_ADDRESS_PATTERN,
        description="redfish+https://host[:port]/redfish/v1/Systems/<id>, ipmi://host[:port] or, when"
        " allowRedfishHTTP is set, redfish+http://….",
    )
    credentials_secret_ref: LocalObjectReference = Field(
        description="Secret with the BMC's username and password (keys username, password)."
    )
    disable_certificate_verification: bool = Field(
        default=False,
        description="Accept any TLS certificate from a Redfish BMC. Verified unless set (against the"
        " credentials Secret's caBundle when it has one, else the system's CAs).",
    )
    allow_redfish_http: bool = Field(
        default=False,
        alias="allowRedfishHTTP",
        description="Allow a redfish+http:// address (credentials sent unencrypted); the glue copies the"
        " HybridCluster's setting.",
    )
    address_cidrs: BMCNetworks = Field(
        alias="addressCIDRs",
        description="Networks every address of the BMC's host must be in, checked before the credentials are"
        " read; any when empty. The glue copies the HybridCluster's bmcAddressCIDRs.",
    )


# Each argument lands on the iPXE `kernel` line: a space, quote or line break could end the argument or
# the command and smuggle iPXE commands into the script.
KERNEL_ARG_PATTERN = r"^[!#-&(-~]+$"


class OSProfile(Model):
    """The OS installer that is network-booted: kernel, initrd and kernel command line."""

    kernel_url: HTTPURL = Field(alias="kernelURL", description="URL of the kernel.")
    initrd_url: HTTPURL = Field(alias="initrdURL", description="URL of the initrd.")
    kernel_args: list[Annotated[str, Field(min_length=1, max_length=1024, pattern=KERNEL_ARG_PATTERN)]] = (
        Field(
            default_factory=list,
            max_length=64,
            description="Kernel command-line arguments, added to the ones capfleet needs to find the seed; "
            "each one word of printable ASCII (no spaces, quotes or line breaks).",
        )
    )


DEFAULT_PROVISIONING_ATTEMPTS = 3
CHECKSUM_PATTERN = r"^([0-9a-fA-F]{64}|https?://[^\s]+)$"


class Image(Model):
    """An OS image that capfleet's deploy ramdisk writes to the server's disk (Metal3's `spec.image`)."""

    url: HTTPURL = Field(
        description="Where the image is downloaded from (through the operator's cache if enabled)."
    )
    checksum: str = Field(
        max_length=URL_MAX,
        pattern=CHECKSUM_PATTERN,
        description="The image's SHA-256: 64 hex digits, or an http(s) URL of a file that starts with them.",
    )
    format: Literal["raw", "qcow2"] = Field(
        default="raw", description="raw is streamed to the disk; qcow2 is converted as it is written."
    )


class RootDeviceHints(Model):
    """Which disk the image goes to (Metal3's names); every hint given must match, the first match wins."""

    device_name: str | None = Field(
        default=None, max_length=128, pattern=r"^/dev/[^\s,]+$", description="A kernel device name, /dev/sda."
    )
    serial_number: str | None = Field(
        default=None, max_length=128, pattern=r"^[^\s,]+$", description="The disk's serial number."
    )
    wwn: str | None = Field(
        default=None, max_length=128, pattern=r"^[^\s,]+$", description="The disk's World Wide Name."
    )
    min_size_gigabytes: int | None = Field(
        default=None, alias="minSizeGigabytes", ge=1, le=1048576, description="The least size, in GiB."
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
    "Retrying",
]


class BaremetalInstanceSpec(Model):
    """Desired state of a bare-metal server."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            immutable_once_set("providerID"),
            (
                "has(self.image) != has(self.os)",
                "exactly one of image (deploy ramdisk) and os (custom installer)",
            ),
            ("!has(self.rootDeviceHints) || has(self.image)", "rootDeviceHints need image"),
        )
    )

    bmc: BMC = Field(description="The server's BMC.")
    boot_mac_address: MACAddress = Field(
        alias="bootMACAddress", description="MAC of the NIC that network-boots."
    )
    image: Image | None = Field(
        default=None, description="The image capfleet's deploy ramdisk writes to disk; or give os."
    )
    root_device_hints: RootDeviceHints | None = Field(
        default=None, description="Which disk gets the image; the first disk if unset."
    )
    os: OSProfile | None = Field(
        default=None,
        description="A custom installer to network-boot instead of the deploy ramdisk; it calls back itself.",
    )
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
    cleaning: Literal["metadata", "disabled"] | None = Field(
        default=None,
        description=(
            "On deletion: network-boot the cleaner to wipe disk metadata and wait for its callback (at most"
            " provisioningTimeoutSeconds), or not. Never for a clusterctl move. Unset: metadata with image"
            " (the deploy ramdisk cleans), disabled with os (a custom installer may not know how)."
        ),
    )
    cleaning_os: OSProfile | None = Field(
        default=None,
        description=(
            "OS profile booted for cleaning; the deploy ramdisk with image, spec.os with os (both told"
            " capfleet.mode=cleaning). It is given its callback URL as capfleet.callback."
        ),
    )
    max_provisioning_attempts: int = Field(
        default=DEFAULT_PROVISIONING_ATTEMPTS,
        ge=1,
        le=10,
        description=(
            "Deployments tried (each failure or timeout powers the server off before the next) before the"
            " instance stops at Failed with reason RetryLimitExceeded."
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

    @property
    def cleans_metadata(self) -> bool:
        """`cleaning`, or its default: metadata when the deploy ramdisk deployed an image."""
        return (self.cleaning or ("metadata" if self.image is not None else "disabled")) == "metadata"


class BaremetalInstanceStatus(Model):
    """Observed state of a bare-metal server; rebuilt from its BMC when lost."""

    phase: Phase | None = Field(default=None, description="Where provisioning is.")
    power_state: Literal["On", "Off", "Unknown"] | None = Field(
        default=None, description="Power state the BMC reports."
    )
    provisioning_attempts: int | None = Field(
        default=None, description="Deployments tried so far, this one included (from the instance's marks)."
    )
    last_failure: str | None = Field(
        default=None, max_length=1024, description="Why the last failed attempt failed (reason: message)."
    )
    conditions: Conditions = Field(default_factory=list)


class BaremetalInstance(CustomObject[BaremetalInstanceSpec, BaremetalInstanceStatus]):
    """A bare-metal server provisioned over its BMC: an image written by the deploy ramdisk, or a custom
    installer."""
