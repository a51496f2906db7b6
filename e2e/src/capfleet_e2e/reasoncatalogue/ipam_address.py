"""The reasons ipam-address sets: what each means and what to do (one section of the book's
troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import Group, Reason

IPAM_ADDRESS = Group(
    "ipam-address",
    "ipam-address",
    """IPAddressClaims of capfleet's pools get `Ready` with one of the CAPI IPAM contract's reasons
    (`PoolNotReady`, `PoolExhausted`, `AllocationFailed`) and a Warning Event carrying the error's own,
    precise reason. A HybridIPPool's and a NetboxIPPool's `Ready` says whether the pool can be used; pools
    post no Events (a NetboxIPPool's failing check is also in the operator's log).""",
    (
        Reason(
            "Allocated",
            "IPAddressClaim `Ready=True`",
            """The claim is bound: its IPAddress (named like the claim) exists, and the message is the
            address.""",
            "Nothing.",
        ),
        Reason(
            "AllocationFailed",
            "IPAddressClaim `Ready=False`",
            """Allocation failed for a reason other than the pool being unready or full: NetBox unreachable or
            refusing, an API error, a duplicate owner in NetBox. The Warning Event on the claim, and the
            condition's message, carry the precise reason.""",
            """`kubectl describe ipaddressclaim <name>` and follow the reason of its latest Warning Event
            (e.g. [`NetBoxUnavailable`](#shared-netboxunavailable),
            [`DuplicateOwner`](#ipam-address-duplicateowner)).""",
        ),
        Reason(
            "CustomFieldMisconfigured",
            "NetboxIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            """NetBox has a `capfleet_owner` custom field, but not as capfleet needs it: type text, on IP
            addresses, filter logic exact (a loose filter would find other owners' addresses).""",
            """`capfleet netbox-setup --url <url>` repairs the filter logic; a field of another type is
            reported, not changed: fix it by hand in NetBox (Customization, Custom Fields).""",
        ),
        Reason(
            "CustomFieldMissing",
            "NetboxIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            """NetBox has no `capfleet_owner` custom field, by which capfleet finds the addresses it
            allocated.""",
            "`capfleet netbox-setup --url <url>` (once per NetBox; harmless to repeat).",
        ),
        Reason(
            "DeprecatedPoolKind",
            "a Warning Event on an IPAddressClaim, once per claim and operator process",
            """The claim's `poolRef` names kind `IPPool`, HybridIPPool's name before the rename. It is served
            from the HybridIPPool of the same name until v1alpha2, which drops the alias.""",
            """A claim's `poolRef` cannot change: make new claims name `HybridIPPool`. For capfleet's
            machines, set `kind: HybridIPPool` in the templates' `ipPoolRefs` (and the HybridCluster's
            `controlPlaneEndpointPoolRef`) and roll the machines; other providers' claims, in their own
            templates.""",
        ),
        Reason(
            "DuplicateOwner",
            "a Warning Event on an IPAddressClaim of a NetboxIPPool (`Ready=False`, `AllocationFailed`)",
            """NetBox holds several IP addresses whose `capfleet_owner` is this claim's owner value: an IP
            copied with its custom fields, or two management clusters with the same instance name. The claim
            takes none of them. Retried slowly.""",
            """Open the IPs by the ids in the message, keep the one the claim's IPAddress shows (or the
            oldest), and delete the others or clear their `capfleet_owner`.""",
        ),
        Reason(
            "Exhausted",
            "HybridIPPool `Ready=True`",
            """Every address of the pool is allocated. The pool works; new claims wait with
            [`PoolExhausted`](#ipam-address-poolexhausted) until an address is released or the pool grows.""",
            """Grow `spec.addresses`, or release addresses (delete unused machines). `kubectl get hippool`
            shows used and free; `status.ipAddresses.outOfRange` counts addresses allocated outside the
            current spec.""",
        ),
        Reason(
            "InvalidAddress",
            "HybridIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            """An entry of `addresses`, `excludedAddresses` or `gateway` is not an address, a CIDR or a
            `low-high` range of one family, the pool mixes IPv4 and IPv6, or it lists no address. Admission
            catches most of this; the rest (a range from high to low) shows here.""",
            "Fix the entry the message names.",
        ),
        Reason(
            "InvalidPrefix",
            "HybridIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            "`spec.prefix` is out of range for the pool's family (0-32 for IPv4, 0-128 for IPv6).",
            "Fix `spec.prefix`.",
        ),
        Reason(
            "PoolExhausted",
            "IPAddressClaim `Ready=False` and a Warning Event",
            """The pool has no free address: every address of a HybridIPPool is allocated, or every prefix and
            range of a NetboxIPPool is full in NetBox. The claim waits in its handler for a release and is
            allocated as soon as an address frees up or the pool grows (retried from 10 s to 2 minutes).""",
            """Grow the pool (`spec.addresses`, or more `prefixes`/`ipRanges`, or room in NetBox) or release
            addresses. `kubectl get hippool` shows what is used.""",
        ),
        Reason(
            "PoolInUse",
            "HybridIPPool or NetboxIPPool `Ready=False`, while it is being deleted",
            """The pool's deletion waits until every address allocated from it is released, so no IPAddress
            outlives its pool (and a NetBox pool keeps its connection Secret until its IPs are gone).""",
            """Delete what holds the addresses first (the machines or clusters whose claims name the pool):
            `kubectl get ipaddresses -n <namespace>` shows them with their claims.""",
        ),
        Reason(
            "PoolNotReady",
            "IPAddressClaim `Ready=False` and a Warning Event",
            """The pool the claim's `poolRef` names does not exist in the claim's namespace, is being deleted,
            has an invalid spec, or (a NetboxIPPool) is not `Ready` itself. The claim waits, without calling
            NetBox, and is served as soon as the pool is ready.""",
            """Check the pool: `kubectl get hippool,nbippool -n <namespace>`; its `Ready` reason says what is
            wrong. The pool must be in the claim's namespace with the kind and name of its `poolRef`.""",
        ),
        Reason(
            "PrefixNotFound",
            "NetboxIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            """A prefix or IP range of the pool is not in NetBox: no object with that `id`, or not exactly one
            with that `cidr` (or start and end address) in that VRF (no `vrf`: the global table).""",
            "Fix the `id`, `cidr` or `vrf` of the entry in the message, or create it in NetBox.",
        ),
        Reason(
            "Ready",
            "HybridIPPool and NetboxIPPool `Ready=True`",
            """The pool can be used: a HybridIPPool has free addresses (the message counts them); a
            NetboxIPPool's connection, custom field and prefixes were checked.""",
            "Nothing.",
        ),
        Reason(
            "SecretMissing",
            """NetboxIPPool `Ready=False` (its claims wait with `PoolNotReady`); a Warning Event on a claim
            when the Secret went away after the pool's check""",
            "The connection Secret `spec.connectionSecretRef` names does not exist in the pool's namespace.",
            "Create it there, with keys `url`, `token` and optionally `caBundle`.",
        ),
        Reason(
            "VRFNotFound",
            "NetboxIPPool `Ready=False`; its claims wait with `PoolNotReady`",
            "A prefix or range names a `vrf` that NetBox has no VRF of (by exact name).",
            "Use the VRF's name as NetBox shows it, or leave `vrf` out for the global table.",
        ),
    ),
)
