"""The reasons netbox-device sets: what each means and what to do (one section of the book's
troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import Group, Reason

NETBOX_DEVICE = Group(
    "netbox-device",
    "netbox-device",
    """A NetboxDevice and a NetboxVirtualMachine have one condition, `Ready`, with the reason of whatever
    failed (NetBox's answers are under [Shared](#shared)); a Normal Event when it becomes
    True, a Warning when it becomes False.""",
    (
        Reason(
            "AddressInUse",
            "NetboxVirtualMachine `Ready=False` and a Warning Event",
            """An address of the VM's spec exists in NetBox assigned to another object, so it is neither
            linked nor created. Retried slowly.""",
            """Find the IP in NetBox: unassign it if it is stale (a leftover of a deleted VM), or give the VM
            another address.""",
        ),
        Reason(
            "ClaimContended",
            "NetboxDevice `Ready=False` and a Warning Event",
            """Every free device this claim tried went to another claim first (of this or another management
            cluster). Tried again within 1-10 s.""",
            """Nothing while machines are being created at once; if it persists, there are fewer devices than
            claims.""",
        ),
        Reason(
            "Claimed",
            "NetboxDevice `Ready=True`",
            "The claim holds a device: the message names it, the status reports it.",
            "Nothing.",
        ),
        Reason(
            "CustomFieldMissing",
            "NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning Event",
            """A custom field capfleet needs is missing or not as it needs it: `capfleet_owner` (text, filter
            logic exact, on devices, virtual machines and IP addresses), `capfleet_previous` (on devices).""",
            "`capfleet netbox-setup --url <url>` (the message names what is wrong).",
        ),
        Reason(
            "NetBoxVersionUnsupported",
            "NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning Event",
            "NetBox is older than 4.2 (MAC addresses as objects); the message names its version.",
            "Upgrade NetBox.",
        ),
        Reason(
            "NoFreeDevice",
            "NetboxDevice `Ready=False` and a Warning Event",
            """No device matches the selector and is free (status `inventory` by default, no owner); the
            message repeats the selector. Looked for again every `CAPFLEET_NETBOX_POLL_SECONDS` (60 s).""",
            """Make a matching device free in NetBox (its status, no `capfleet_owner`), or fix the selector
            (site, role, status, tags, custom fields) in the template.""",
        ),
        Reason(
            "NotFoundInNetBox",
            "NetboxVirtualMachine `Ready=False` and a Warning Event",
            """The cluster (by name), or the role, tenant or site (by slug) the VM's spec names matches no
            object in NetBox, or more than one; the message gives the query.""",
            """Fix the name in the spec (from the HybridCluster's `spec.netbox`), or create the object in
            NetBox.""",
        ),
        Reason(
            "Paused",
            "the operator's log, while a paused object is deleted (and `Paused=True`)",
            "The object is paused: its deletion waits, and releases what it holds in NetBox once unpaused.",
            "Unpause its Cluster (see [`Paused`](#shared-paused)).",
        ),
        Reason(
            "Registered",
            "NetboxVirtualMachine `Ready=True`",
            "The VM is registered in NetBox, with its interfaces and IPs.",
            "Nothing.",
        ),
        Reason(
            "SecretMissing",
            "NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning Event",
            """The connection Secret `spec.connectionSecretRef` names does not exist in the object's
            namespace.""",
            "Create it there, with keys `url`, `token` and optionally `caBundle`.",
        ),
        Reason(
            "TenantNotFound",
            "NetboxDevice `Ready=False` and a Warning Event",
            """NetBox has no tenant with the slug the claim asks for (the HybridCluster's
            `spec.netbox.tenant`).""",
            "Create the tenant in NetBox or fix the slug.",
        ),
    ),
)
