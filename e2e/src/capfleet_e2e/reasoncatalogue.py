"""What every condition and Event reason capfleet sets means, and what to do about it: the source of the
book's troubleshooting page (docs/operate/troubleshooting.md, written by `python -m capfleet_e2e.book
generate`).

It lives in the e2e package, out of the operators' runtime, and is checked against the code by
`capfleet_e2e.reasonscan` (`python -m capfleet_e2e.book check`, `make book-check`): every reason the code
sets has an entry here, in the section of the operator (or `shared`) whose code sets it, and every entry
names a reason the code still sets. Where the code relays a reason it does not name (an error's own reason,
a child's reason copied onto its parent), `RELAYS` says what it relays, so a new relay is a decision too.

Texts are Markdown; whitespace is folded when the page is written, so they wrap freely here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One reason: where it shows (kind, condition, Event, or only the operator's log), what it means and
    what to do."""

    name: str
    on: str
    means: str
    do: str


@dataclass(frozen=True)
class Group:
    """The reasons one operator's code (or the shared package) sets, with how that operator reports."""

    name: str
    title: str
    intro: str
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Relay:
    """A place where the code passes on a reason it does not name: what it passes on, and the reasons it
    can produce that are set nowhere else (each must appear in the code's string literals)."""

    why: str
    yields: tuple[str, ...] = ()


NOT_RETRIED = """Not retried, since retrying cannot help: a change of the object is reconciled at once, but
after a fix elsewhere (a Secret, NetBox) touch the object (any annotation, e.g. `kubectl annotate <kind>
<name> capfleet.dev/retry="$(date +%s)" --overwrite`), or it is tried again when the operator restarts."""

SHARED = Group(
    "shared",
    "Shared by every operator",
    """Set by the shared package (`shared/src/capfleet`): the generic reasons of capfleet's error classes,
    CAPI's `Paused` condition, the summarised `Ready`, and NetBox's answers as both ipam-address and
    netbox-device see them. The kind is whichever object was being reconciled.""",
    (
        Reason(
            "APIRefused",
            "the operator's log only (the handler's retry message)",
            """The Kubernetes API server answered 401 or 403 to a request the operator made: its service
            account may not do what the reconcile needs (a ClusterRole not applied or not upgraded, or in
            namespaced mode a namespace without `deploy/tenant`). Retried slowly (60 s, doubling to 10
            minutes).""",
            """Find the verb and resource in the log line, then check the operator's RBAC: `kubectl auth can-i
            <verb> <resource> --as=system:serviceaccount:capfleet-system:capfleet-<operator>-manager -n
            <namespace>`. Re-apply the release's RBAC (`clusterctl upgrade`, or the overlay); in namespaced
            mode `kubectl apply -k deploy/tenant -n <namespace>`.""",
        ),
        Reason(
            "AuthenticationFailed",
            """NetboxIPPool `Ready=False`; NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning
            Event; a Warning Event on an IPAddressClaim of a NetBox pool""",
            """NetBox refused the token of the connection Secret (HTTP 401 or 403): wrong, expired, revoked,
            or without the permissions the operator needs. Retried slowly (60 s, doubling to 10 minutes), so a
            fixed token is picked up without a storm.""",
            """Check the Secret's `token` key and try it: `curl -H "Authorization: Token $TOKEN"
            $URL/api/status/` (a v2 `nbt_` token: `Authorization: Bearer $TOKEN`). Give its user write
            permission on IP addresses (ipam-address) or devices, virtual machines, interfaces, IP addresses
            and journal entries (netbox-device).""",
        ),
        Reason(
            "BackendRejected",
            "the condition of the step that failed, or the operator's log",
            """The generic reason of an outside system refusing a request. Every refusal capfleet raises today
            names a precise reason, so this one means a code path that does not.""",
            "Read the message, which quotes the refusal; report the code path so it gets its own reason.",
        ),
        Reason(
            "BackendUnavailable",
            """the operator's log (capi-machine-glue's failed reconciles and deletions, an API server
            answering 5xx or timing out)""",
            """Something the reconcile depends on failed or did not answer in time: most often the Kubernetes
            API server (a 5xx, a 504 from an overloaded server), or an unexpected failure in a
            capi-machine-glue reconcile. Retried soon: 2 s, doubling to 2 minutes.""",
            """Usually transient. If it persists, read the full error in the log (capi-machine-glue logs the
            traceback of an unexpected failure) and check the API server's health and the operator's
            connection to it.""",
        ),
        Reason(
            "Conflict",
            "the operator's log only",
            """The API server answered 409: another writer changed the object between the operator's read and
            its write. Retried within 1-10 s with fresh data; harmless.""",
            """Nothing, unless it repeats for one object: then two writers fight over it (two copies of an
            operator without leader election, or another controller writing the same fields).""",
        ),
        Reason(
            "DependencyMissing",
            "the condition of the step that failed",
            """The generic reason of something the object refers to not existing yet. Every such error
            capfleet raises today names what is missing (`SecretMissing`, `PoolNotReady`, ...), so this one
            means a code path that does not.""",
            "Read the message, which names what is missing; report the code path.",
        ),
        Reason(
            "Error",
            "nowhere today",
            """The reason of capfleet's base error class, which no code raises directly: every error is of a
            class with its own reason.""",
            "If it ever shows, report it with its message: a new code path raises the base class.",
        ),
        Reason(
            "InvalidSpec",
            """the condition of the step that found it (LibvirtVM `DisksReady=False`: a disk smaller than its
            base image), with `Ready=False` and a Warning Event""",
            """The object's own spec asks for something impossible that admission could not catch: today, a
            LibvirtVM disk whose `sizeGiB` is smaller than the base image it is cloned from. Retrying cannot
            help: only a change of the spec.""",
            """Fix the spec. A LibvirtVM made by capi-machine-glue comes from the HybridMachineTemplate: fix
            the template (a new one, as CAPI wants) and roll the machines.""",
        ),
        Reason(
            "NetBoxRejected",
            """NetboxIPPool `Ready=False`; NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning
            Event; a Warning Event on an IPAddressClaim of a NetBox pool""",
            """NetBox answered 4xx (other than 401, 403 and 429): the request does not fit this NetBox, e.g. a
            tag, status, tenant or custom field value it does not know. The message quotes NetBox's own error.
            Retried slowly (60 s, doubling to 10 minutes).""",
            """Read NetBox's error in the message. `capfleet netbox-setup --url <url> --check` tells whether
            the custom fields and the `capfleet` tag capfleet needs are there; slugs in the spec (tags,
            status, tenant) must exist in NetBox.""",
        ),
        Reason(
            "NetBoxUnavailable",
            """NetboxIPPool `Ready=False`; NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning
            Event; a Warning Event on an IPAddressClaim of a NetBox pool""",
            """NetBox did not answer usefully: 5xx, 429, no answer within 10 s, connection refused, or an
            answer that is not JSON (a proxy's or login page). Retried soon: 2 s, doubling to 2 minutes.""",
            """Check that NetBox is up and that the Secret's `url` is its address as seen from the operator's
            pod (`kubectl -n capfleet-system exec deploy/capfleet-<operator>-manager -c manager -- python -c
            "import urllib.request; print(urllib.request.urlopen('<url>/api/status/').status)"`); network
            policies and egress proxies in between. A NetboxDevice or NetboxVirtualMachine being deleted
            waits for NetBox to give back what it holds; for a NetBox gone for good, annotate it
            `netbox.capfleet.dev/detached=true` (an IPAddressClaim of a NetboxIPPool:
            `ipam.capfleet.dev/detached=true`) and it is deleted without NetBox (what it held there
            stays).""",
        ),
        Reason(
            "NoClusterIdentity",
            """the condition of the step that first needs the management cluster's instance name (NetBox
            claims, the first write to a hypervisor)""",
            """`CAPFLEET_INSTANCE_NAME` is empty or `auto`, so the instance name is derived from the UID of
            the `kube-system` namespace, and that namespace was not found.""",
            """Set `CAPFLEET_INSTANCE_NAME` (the clusterctl variable of the same name) to a name unique among
            the management clusters that share NetBox and the hypervisors.""",
        ),
        Reason(
            "NotPaused",
            "`Paused=False` on every object reconciled for Cluster API",
            "The object is reconciled normally (CAPI's `Paused` condition, reason `NotPaused`).",
            "Nothing.",
        ),
        Reason(
            "Paused",
            """`Paused=True` on LibvirtVM, NetboxDevice, NetboxVirtualMachine, BaremetalInstance,
            HybridMachine, HybridCluster and IPAddressClaim""",
            """The object carries `cluster.x-k8s.io/paused`, or its Cluster is paused (`spec.paused`, or the
            annotation `clusterctl move` sets): the operator leaves it, and what it stands for, alone.""",
            """Unpause the Cluster: `kubectl patch cluster <name> --type merge -p '{"spec":{"paused":false}}'`
            (or remove the annotation from the object). After an interrupted `clusterctl move`, finish or undo
            the move before unpausing, so only one management cluster acts.""",
        ),
        Reason(
            "PoolExhausted",
            "not shown: ipam-address tries the pool's next prefix or range",
            """NetBox answered 409 from `available-ips`: a prefix or IP range has no free address.
            ipam-address then tries the next prefix or range of the pool; when all are full the claim waits
            with [ipam-address's `PoolExhausted`](#ipam-address-poolexhausted).""",
            "See [ipam-address's `PoolExhausted`](#ipam-address-poolexhausted).",
        ),
        Reason(
            "Ready",
            "`Ready=True` on LibvirtVM, Hypervisor, BaremetalInstance, HybridMachine and HybridCluster",
            """Every step condition of the object is True. A Normal Event `Ready` marks the transition (not
            for BaremetalInstances, whose Events are their phases).""",
            "Nothing.",
        ),
        Reason(
            "SecretForbidden",
            "the condition of the step that reads the Secret, with `Ready=False` and a Warning Event",
            """Namespaced mode: the operator may read Secrets only in namespaces where `deploy/tenant` bound
            its secrets ClusterRole, and this Secret is in another one. Retried like a missing Secret.""",
            """`kubectl apply -k deploy/tenant -n <namespace>` for the namespace of the Secret (for a
            Hypervisor, the namespace of its SSH Secrets).""",
        ),
        Reason(
            "SecretInvalid",
            """NetboxIPPool `Ready=False`; NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning
            Event""",
            """The NetBox connection Secret lacks `url` or `token`, or its `url` does not start with
            `https://` or `http://`.""",
            """Give the Secret the keys `url` (e.g. `https://netbox.example.com`) and `token`, and `caBundle`
            (PEM) for a private CA.""",
        ),
        Reason(
            "TLSError",
            """NetboxIPPool `Ready=False`; NetboxDevice and NetboxVirtualMachine `Ready=False` and a Warning
            Event""",
            """TLS verification of NetBox failed: its certificate is not signed by a CA the operator trusts
            (the Secret's `caBundle`, else the system's), or does not name the host in `url`.""",
            """Put the CA's PEM into the connection Secret's `caBundle`, or use the host name the certificate
            names in `url`.""",
        ),
        Reason(
            "Waiting",
            "the operator's log only",
            """The generic wait: a deletion waits for something to happen first (an IPAddressClaim whose
            Cluster is paused keeps its address until it is unpaused), or the object went away during its
            reconcile. Retried in 10 s, doubling to 2 minutes.""",
            """Nothing, unless the message says what it waits for and that never comes (a Cluster left
            paused).""",
        ),
        Reason(
            "WaitingFor*",
            """`Ready=Unknown` on LibvirtVM, Hypervisor, BaremetalInstance, HybridMachine and HybridCluster,
            as `WaitingFor<Step>` (e.g. `WaitingForScheduled`, `WaitingForReachable`)""",
            """Every step before `<Step>` is True and `<Step>` has not reported yet: normal for seconds while
            a reconcile runs.""",
            """If it stays, the operator is not reconciling the object: check that it runs and is the leader
            (its log), and for the object in its log.""",
        ),
    ),
)

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

LIBVIRT_VM = Group(
    "libvirt-vm",
    "libvirt-vm",
    """A LibvirtVM has one condition per step, in order: `Scheduled`, `DisksReady`, `SeedReady`, `Defined`,
    `Running`; `Ready` names the first that is not True, with its reason. A Hypervisor has `Reachable`, and
    `Ready` from it. Both post a Normal Event when `Ready` becomes True and a Warning when it becomes False
    (again when the reason changes). VMQuotas have no conditions: a VM over quota says so itself.""",
    (
        Reason(
            "AuthenticationFailed",
            "Hypervisor `Reachable=False`; the LibvirtVM step that needed the host",
            """The hypervisor's SSH server refused the user and private key of the Hypervisor's
            `sshKeySecretRef`. Retried slowly (60 s, doubling to 10 minutes).""",
            """Put the key's public half into the user's `~/.ssh/authorized_keys` on the host; the user must
            be allowed to reach libvirt's socket (group `libvirt`). Try it: `ssh -i key <user>@<host> virsh -c
            qemu:///system version`.""",
        ),
        Reason(
            "BaseImageMissing",
            "LibvirtVM `DisksReady=False`",
            """The `sourceImage` volume a disk is cloned from is not in the hypervisor's storage pool (the
            Hypervisor's `spec.storagePool`).""",
            """Upload the base image to that pool on that host (see [Node images](../node-image.md)), e.g.
            `virsh vol-create-as <pool> <name> <size> --format qcow2` then `virsh vol-upload`, or copy it in
            and `virsh pool-refresh <pool>`.""",
        ),
        Reason(
            "BaseImageNotOffered",
            "LibvirtVM `Scheduled=False`, or `DisksReady=False` on the hypervisor its spec names",
            """A disk clones a volume that no matching Hypervisor lists in `spec.baseImages`, so the VM is
            not placed, or is not built on the hypervisor its spec names. Nothing is made on any host.
            Retried (10-15 s at first, doubling to 2-5 minutes), so a listed image is picked up.""",
            """Use an image the hypervisors offer (`kubectl get hypervisor <name> -o
            jsonpath='{.spec.baseImages}'`), or, as an administrator, add the image's name or a pattern
            to the Hypervisor's `spec.baseImages` ([Hypervisors](../site/hypervisors.md#base-volumes)).""",
        ),
        Reason(
            "Built",
            "LibvirtVM `SeedReady=True`, for a moment",
            "The NoCloud seed ISO is built; its upload follows in the same reconcile (then `Uploaded`).",
            "Nothing.",
        ),
        Reason(
            "Connected",
            "Hypervisor `Reachable=True`",
            "The host answered over SSH; the message gives its libvirt version.",
            "Nothing.",
        ),
        Reason(
            "Converging",
            "LibvirtVM `Running=False`",
            """The domain was started or stopped as `spec.powerState` asks, but its state still differs
            (shutting down, crashed, paused by libvirt). The VM is re-checked every minute.""",
            """If it stays, look at the domain on its host: `virsh domstate <domain> --reason`, and
            `/var/log/libvirt/qemu/<domain>.log`.""",
        ),
        Reason("Created", "LibvirtVM `DisksReady=True`", "Every disk volume exists in the pool.", "Nothing."),
        Reason(
            "Defined", "LibvirtVM `Defined=True`", "The domain is defined and owned by this VM.", "Nothing."
        ),
        Reason(
            "DeletionFailed",
            "LibvirtVM `Ready=False` while it is being deleted, and a Warning Event",
            """Removing the domain and its volumes failed (the host unreachable or hanging, a libvirt error);
            the message quotes the error and the way out. The deletion is retried.""",
            """Bring the host back. If it is gone for good, annotate the VM
            `libvirt.capfleet.dev/detached=true`: its deletion then completes without the host (whatever the
            VM had there stays there).""",
        ),
        Reason(
            "DomainNameTaken",
            "LibvirtVM `DisksReady=False`",
            """A domain of this VM's name exists on the hypervisor and is not this VM's: another management
            cluster's VM of the same namespace and name, or what a detached deletion left behind. Nothing is
            written to the host.""",
            """See whose it is: `virsh dumpxml <domain>` (capfleet's metadata names the owner). Remove a
            leftover by hand (`virsh undefine` and its volumes); two management clusters sharing hosts need
            different `CAPFLEET_INSTANCE_NAME`s.""",
        ),
        Reason(
            "DomainNotOwned",
            "a Warning Event on a LibvirtVM being deleted",
            """The domain of this VM's name on its hypervisor belongs to someone else, so the deletion left it
            (and the volumes of its name) alone and completed.""",
            "Nothing for capfleet; check whether that domain is a leftover to remove by hand.",
        ),
        Reason(
            "DomainNotRemoved",
            "the operator's log (the LibvirtVM shows `Ready=False`, `DeletionFailed`)",
            "libvirt destroyed and undefined the domain, yet it still exists.",
            """Look at the host: `virsh list --all`; a domain with snapshots, managed save or NVRAM may need
            `virsh undefine --snapshots-metadata --managed-save --nvram <domain>` by hand.""",
        ),
        Reason(
            "HostKeyMismatch",
            "Hypervisor `Reachable=False`; the LibvirtVM step that needed the host",
            """The host presented a key that does not match the Hypervisor's known_hosts Secret, and the
            connection was refused: the host was reinstalled, or something is in between.""",
            """Check the host's key out of band (on its console: `ssh-keygen -lf
            /etc/ssh/ssh_host_ed25519_key.pub`) before replacing the line in the known_hosts Secret.""",
        ),
        Reason(
            "HostKeyUnknown",
            "Hypervisor `Reachable=False`; the LibvirtVM step that needed the host",
            """The known_hosts Secret has no line for the host (on a port other than 22 the line must name
            `[host]:port`).""",
            "Add the host's key line (checked out of band) to the known_hosts Secret.",
        ),
        Reason(
            "HypervisorMissing",
            "LibvirtVM `DisksReady=False`",
            "The Hypervisor the VM's `spec.hypervisorName` names does not exist.",
            """Create that Hypervisor. `hypervisorName` cannot change once set: a VM meant elsewhere is
            deleted and created again.""",
        ),
        Reason(
            "InUse",
            "Hypervisor `Ready=False` while it is being deleted",
            """LibvirtVMs are placed on the Hypervisor (the message names them), and their deletion needs it:
            the Hypervisor is deleted once they are gone.""",
            "Delete those VMs first (or annotate them `libvirt.capfleet.dev/detached=true`).",
        ),
        Reason(
            "InsufficientCapacity",
            "LibvirtVM `Scheduled=False`",
            """Hypervisors match the VM's selector and failure domain, but none has room: vCPUs (times
            `CAPFLEET_VCPU_OVERCOMMIT`), memory or storage (times `CAPFLEET_STORAGE_OVERCOMMIT`), less the
            Hypervisor's `spec.reserved` and what the VMs placed on it ask for. Placement is tried again.""",
            """`capfleet get hypervisors` shows capacity and what is allocated. Add a hypervisor, delete VMs,
            lower `reserved`, or raise the overcommit ratios.""",
        ),
        Reason(
            "LibvirtError",
            "Hypervisor `Reachable=False`, or the LibvirtVM step whose libvirt call failed",
            """libvirt itself refused or failed a call; the message quotes it (a bridge or network that does
            not exist, no KVM, an image libvirt cannot read). Retried soon.""",
            "Read libvirt's error; on the host, `journalctl -u libvirtd` (or `virtqemud`).",
        ),
        Reason(
            "NetworkNotOffered",
            "LibvirtVM `Scheduled=False`, or `Defined=False` on the hypervisor its spec names",
            """An interface attaches to a bridge, libvirt network or user-mode networking that no matching
            Hypervisor lists in `spec.networks` for the VM's namespace, so the VM is not placed, or its
            domain not defined on the hypervisor its spec names. Retried (10-15 s at first, doubling to
            2-5 minutes), so a network listed later is picked up.""",
            """Attach the VM to what its hypervisors offer (`kubectl get hypervisor <name> -o
            jsonpath='{.spec.networks}'`), or, as an administrator, add the bridge or network (and the
            namespace) to the Hypervisor's `spec.networks` ([Hypervisors](../site/hypervisors.md)).""",
        ),
        Reason(
            "NoHypervisorMatches",
            "LibvirtVM `Scheduled=False`",
            """No Hypervisor is ready (`Reachable=True` with its capacity measured) and matches the VM's
            `hypervisorSelector` and failure domain.""",
            """`kubectl get hv --show-labels`: check the labels against the selector (for capfleet machines,
            the template's and the failure domain's), and each Hypervisor's `Reachable`.""",
        ),
        Reason(
            "Pending",
            "LibvirtVM `DisksReady` or `Defined` True, for a moment",
            """The step's first check passed (the host reached and the domain name this VM's; the host's KVM
            support read); the step's own work follows in the same reconcile.""",
            "Nothing.",
        ),
        Reason(
            "Placed",
            "LibvirtVM `Scheduled=True`",
            "The VM is placed on a Hypervisor, written to its `spec.hypervisorName`.",
            "Nothing.",
        ),
        Reason(
            "PoolInactive",
            "Hypervisor `Reachable=False`; LibvirtVM `DisksReady=False` or `SeedReady=False`",
            "The Hypervisor's storage pool exists on the host but is not active.",
            "On the host: `virsh pool-start <pool>` and `virsh pool-autostart <pool>`.",
        ),
        Reason(
            "PoolMissing",
            "Hypervisor `Reachable=False`; LibvirtVM `DisksReady=False` or `SeedReady=False`",
            "The host has no libvirt storage pool of the name in the Hypervisor's `spec.storagePool`.",
            "Define the pool on the host (`virsh pool-define-as`), or fix `spec.storagePool`.",
        ),
        Reason(
            "PoweredOff",
            "LibvirtVM `Running=True`",
            "The domain is off, as `spec.powerState: Off` asks.",
            "Nothing.",
        ),
        Reason(
            "QuotaExceeded",
            "LibvirtVM `Scheduled=False` and a Warning Event",
            """Placing the VM would cross a limit of a VMQuota of its namespace; the message names each limit
            and the numbers. Tried again every 5-15 s, so the VM is placed soon after room frees up.""",
            """`kubectl get vmq -n <namespace>`: raise the limit (administrators) or delete VMs of the
            namespace.""",
        ),
        Reason(
            "SecretKeyMissing",
            """Hypervisor `Reachable=False`; LibvirtVM `DisksReady=False` (the SSH Secrets) or
            `Scheduled=False` (the user-data Secret, read before the VM is placed)""",
            """A Secret exists but has no entry under the key the spec names: the SSH key or known_hosts key
            of the Hypervisor, or the `key` of the VM's `cloudInit.userDataSecretRef`.""",
            "Fix the key in the Secret, or the key the reference names.",
        ),
        Reason(
            "SecretMissing",
            """Hypervisor `Reachable=False`; LibvirtVM `DisksReady=False` (the SSH Secrets) or
            `Scheduled=False` (the user-data Secret, read before the VM is placed)""",
            """A Secret the spec names does not exist: the Hypervisor's SSH key or known_hosts Secret (in the
            namespace its reference gives), or the VM's user-data Secret (for a capfleet machine, the
            bootstrap data CAPI's bootstrap provider writes).""",
            """Create it. For a machine's user-data, look at its bootstrap provider (`kubectl get
            kubeadmconfig -n <namespace>`): it writes the Secret the Machine names in
            `spec.bootstrap.dataSecretName`.""",
        ),
        Reason(
            "Started",
            "LibvirtVM `Running=True`",
            "The domain runs, as `spec.powerState: On` asks.",
            "Nothing.",
        ),
        Reason(
            "Stopped",
            "LibvirtVM `Running=True`, for a moment",
            "The domain was stopped as the spec asks; replaced by `PoweredOff` in the same reconcile.",
            "Nothing.",
        ),
        Reason(
            "Unreachable",
            "Hypervisor `Reachable=False`; the LibvirtVM step that needed the host",
            """The SSH connection failed (refused, timed out, name not resolved), libvirt's socket could not
            be reached through it, or a call took longer than `CAPFLEET_CALL_TIMEOUT_SECONDS` (60 s), after
            which the connection is closed under it. Retried soon: 2 s, doubling to 2 minutes.""",
            """From the operator's network: `ssh -p <port> <user>@<host> virsh -c qemu:///system version`. A
            host that hangs (libvirtd stopped) shows as a call without answer.""",
        ),
        Reason(
            "Uploaded",
            "LibvirtVM `SeedReady=True`",
            "The NoCloud seed volume is on the hypervisor, as the spec says it should be.",
            "Nothing.",
        ),
        Reason(
            "UserDataSecretNotForVMs",
            "LibvirtVM `Scheduled=False` and a Warning Event",
            """The Secret `cloudInit.userDataSecretRef` names is neither labelled
            `libvirt.capfleet.dev/user-data: "true"` nor Cluster API's bootstrap data (a
            `cluster.x-k8s.io/secret` owned by a bootstrap config), so it is not read: libvirt-vm would
            otherwise copy any Secret of the namespace into the VM. The VM is not placed. Retried (15 s at
            first).""",
            """Label the Secret that holds the VM's user-data (`kubectl label secret <name>
            libvirt.capfleet.dev/user-data=true`), or name the right Secret.""",
        ),
    ),
)

BAREMETAL_PROVISION = Group(
    "baremetal-provision",
    "baremetal-provision",
    """A BaremetalInstance has `BMCReachable` (the BMC answered with these credentials), `Provisioned` (its
    reason is the phase while provisioning, cleaning or deprovisioning runs) and `Ready` summarising both.
    Its Events are its phases (reason = phase: Normal, Warning for `Retrying` and `Failed`), each failed
    attempt (reason = why it failed) and its errors (reason = the error's); `Ready` itself posts none. The
    deploy ramdisk reports a failure with one of a fixed set of reasons, which shows in the attempt's Event,
    in `status.lastFailure` and in `Provisioned`'s message once every attempt failed.""",
    (
        Reason(
            "AuthenticationFailed",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            """The BMC refused the credentials Secret's `username` and `password` (Redfish 401/403, or IPMI's
            RAKP refusal). Retried slowly (60 s, doubling to 10 minutes): repeated refusals may lock the BMC
            account.""",
            """Fix the credentials Secret (the HybridCluster's `baremetal.bmcCredentialsSecretRef`); try them
            with `curl -u <user> https://<bmc>/redfish/v1/Systems` or `ipmitool -I lanplus`. For IPMI BMCs
            that need it, `CAPFLEET_IPMI_CIPHER_SUITE=3`.""",
        ),
        Reason(
            "BMCAddressRefused",
            "BaremetalInstance `Ready=False` and a Warning Event",
            f"""The operator will not send the credentials to this address: `redfish+http://` without
            `allowRedfishHTTP`, or a host that resolves to nothing or to an address outside `bmcAddressCIDRs`.
            Checked before the Secret is read; the BMC was never touched. {NOT_RETRIED}""",
            """Fix the address where it comes from (the NetBox device's `bmc_address`, or the HybridCluster's
            `baremetal.bmcAddressTemplate`), or the HybridCluster's `allowRedfishHTTP` / `bmcAddressCIDRs`
            (`CAPFLEET_BMC_NETWORK`). The glue copies these when it creates the instance: replace the machine
            (delete its Machine), or edit this instance's `spec.bmc`.""",
        ),
        Reason(
            "BMCAddressUnresolved",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            """The BMC's host name does not resolve from the operator (checked when `bmcAddressCIDRs` is set).
            Retried like an unreachable BMC: DNS may come back.""",
            "Check the name in the cluster's DNS, from the operator's pod.",
        ),
        Reason(
            "BMCError",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            """The BMC failed the request (HTTP 5xx, an IPMI error) or answered something unexpected. Retried
            soon: 2 s, doubling to 2 minutes. BMC errors are never counted as provisioning attempts.""",
            """Read the message; check the BMC's own health (its web console, `ipmitool mc info`). A cold
            reset of the BMC (`ipmitool mc reset cold`) often clears a stuck one.""",
        ),
        Reason(
            "BMCRejected",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            """The BMC refused the request (HTTP 4xx other than 401/403/404, an IPMI parameter or function it
            does not support): e.g. a one-time network boot it does not offer. Retried slowly.""",
            """Read the message; try the same action through the BMC's own interface. Old firmware may need an
            update.""",
        ),
        Reason(
            "BMCSettling",
            "BaremetalInstance `Ready=False` and a Warning Event",
            """The server did not reach the power state or boot device asked for within one reconcile's steps:
            the BMC reports a state that does not follow. Retried from 10 s to 2 minutes.""",
            """Usually transient. If it stays, compare the BMC's reported power state with the server; raise
            `CAPFLEET_BMC_POWER_WAIT_SECONDS` (30 s) for BMCs that take longer.""",
        ),
        Reason(
            "BMCUnreachable",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            "The BMC did not answer: connection refused or timed out. Retried soon, without end.",
            """Check the route from the operator's pod to the BMC network (HTTPS 443 for Redfish, UDP 623 for
            IPMI) and that the BMC is powered.""",
        ),
        Reason(
            "BadChecksum",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            "The deploy ramdisk read an image whose SHA-256 is not the one `spec.image.checksum` gives.",
            """Fix the checksum or the URL: a checksum URL must point at a file that starts with this image's
            digest. With the image cache on, the operator keeps an image only when its digest matches.""",
        ),
        Reason(
            "BootRequestRefused",
            "a Warning Event on the BaremetalInstance",
            """A request for this attempt's script, seed, image or callback came from another address than the
            one the attempt is bound to (the first to fetch its boot script), and was refused (403). The
            message names both addresses.""",
            """If the server changed address between iPXE and the deploy ramdisk, give its boot MAC a fixed
            DHCP reservation. Otherwise someone else on the provisioning network asked: investigate that
            address.""",
        ),
        Reason(
            "CallbackKeyRefetchRefused",
            "a Warning Event on the BaremetalInstance",
            """The key the deploy ramdisk signs its callback with was asked for a second time in this attempt
            and refused: it is served once. If someone else fetched it first, the server's own callback is not
            taken and the attempt times out.""",
            """Investigate the address in the message. A server that rebooted into the ramdisk twice within
            one attempt causes it too; the next attempt has a new key.""",
        ),
        Reason(
            "CleanedBeforeCleanerBooted",
            "a Warning Event on the BaremetalInstance",
            """A `cleaned` callback, or a request for the cleaning key, came while the server was being
            deprovisioned but before any address had fetched its cleaning script. The server's own cleaner
            fetches the script first, so this was someone else on the provisioning network trying to have
            the disk released unwiped. It is refused: the deletion keeps waiting for the real cleaner.""",
            """Investigate the address in the message. Nothing to do for the server: its cleaner boots,
            fetches its script (which binds the cleaning to its address) and calls back as usual.""",
        ),
        Reason(
            "CertificateNotTrusted",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            """The BMC's TLS certificate is not signed by the credentials Secret's `caBundle` (or, without
            one, a CA of the system). Retried slowly.""",
            """Put the BMC's CA (or its self-signed certificate) into the credentials Secret's `caBundle`.
            `disableCertificateVerification` turns the check off, and sends the password to whoever
            answers.""",
        ),
        Reason(
            "Cleaning",
            """`Provisioned=False` and a Normal Event while a deleted instance is cleaned; the deletion's wait
            in the operator's log""",
            """The cleaner (the deploy ramdisk in cleaning mode) was network-booted to wipe the disks'
            partition tables; the deletion waits for its callback, at most `provisioningTimeoutSeconds`.""",
            """Wait. If it never calls back, watch the server's console; the deletion goes on without it
            ([`CleaningTimedOut`](#baremetal-provision-cleaningtimedout)).""",
        ),
        Reason(
            "CleaningFailed",
            "the operator's log only (`cleaner of ... failed, deprovisioning anyway`)",
            """The cleaner could not wipe a disk (wipefs or zeroing failed). Deletion does not hang on it: the
            server is powered off and its boot device put back on disk anyway.""",
            "The disk may still hold its old partition tables: wipe it by hand before the server is reused.",
        ),
        Reason(
            "CleaningTimedOut",
            "a Warning Event on the BaremetalInstance being deleted",
            """The cleaner did not call back within `provisioningTimeoutSeconds`; the server is deprovisioned
            without it, its disks not wiped.""",
            """Watch the server's console on the next boot (DHCP, the boot server at `CAPFLEET_BOOT_URL`);
            wipe the disks by hand before the server is reused.""",
        ),
        Reason(
            "DeletionBlocked",
            "BaremetalInstance `Ready=False` and a Warning Event, while it is being deleted",
            """The server was acted on (it may run what the cluster put on it), so it must be powered off,
            and cleaned if asked, before its object goes and the NetBox device is released; but its BMC
            cannot be used: the message gives the cause (`CredentialsMissing`, `CredentialsInvalid`,
            `BMCAddressRefused`, ...). The deletion waits, retried every 10 s to 2 minutes.""",
            """Fix what the message names (restore the credentials Secret, correct the spec), or, for a
            server gone for good or one you will wipe by hand, annotate the BaremetalInstance
            `baremetal.capfleet.dev/detached=true`: it is then deleted leaving the server as it is.""",
        ),
        Reason(
            "Connected",
            "BaremetalInstance `BMCReachable=True`",
            "The BMC answered with these credentials.",
            "Nothing.",
        ),
        Reason(
            "CredentialsInvalid",
            "BaremetalInstance `Ready=False` and a Warning Event",
            f"The BMC credentials Secret has no `username` or no `password` key. {NOT_RETRIED}",
            "Give the Secret both keys (and `caBundle` for a private CA).",
        ),
        Reason(
            "CredentialsMissing",
            "BaremetalInstance `Ready=False` and a Warning Event",
            """The BMC credentials Secret `spec.bmc.credentialsSecretRef` names does not exist in the
            instance's namespace. Retried from 15 s.""",
            "Create it with `username` and `password`.",
        ),
        Reason(
            "DeployFailed",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """The installer reported a failure without a reason capfleet knows (a custom installer posting
            `result=failed`, or a ramdisk of another version).""",
            """Read the message and the server's console (the deploy ramdisk prints `capfleet-deploy:` lines).
            Use the deploy ramdisk built for this capfleet version (`make deploy-ramdisk`).""",
        ),
        Reason(
            "Deployed",
            "BaremetalInstance `Provisioned=True`",
            "The installer called back `deployed`; the server boots from its disk.",
            "Nothing.",
        ),
        Reason(
            "Deprovisioning",
            "`Provisioned=False` and a Normal Event while a deleted instance is deprovisioned",
            "The server is being powered off (gracefully, then forced) and its boot device put back on disk.",
            "Nothing; a BMC that does not answer keeps the deletion waiting (see its `BMCReachable`).",
        ),
        Reason(
            "Detached",
            "BaremetalInstance `BMCReachable=False`",
            """The instance carries `baremetal.capfleet.dev/detached`: the operator leaves the BMC alone, and
            deletion completes without it.""",
            "Remove the annotation to manage the server again.",
        ),
        Reason(
            "DownloadFailed",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """The deploy ramdisk could not download the image or its checksum file (an HTTP error, fewer
            bytes than announced, an empty file).""",
            """Check that the URL answers from the provisioning network, or with the image cache on
            (`CAPFLEET_IMAGE_CACHE_DIR`), from the operator's pod, which then fetches it.""",
        ),
        Reason(
            "Failed",
            "the phase: `status.phase`, and a Warning Event",
            """Every attempt failed (`maxProvisioningAttempts`): the server is powered off, its boot device on
            disk, and `Provisioned` is False with `RetryLimitExceeded`.""",
            "See [`RetryLimitExceeded`](#baremetal-provision-retrylimitexceeded).",
        ),
        Reason(
            "Installing",
            "the phase: `Provisioned=False`, `status.phase`, and a Normal Event",
            "The installer fetched its seed; the operator waits for its callback.",
            """Nothing, until `provisioningTimeoutSeconds`; a slow install (a large image over a slow network)
            may need a longer timeout.""",
        ),
        Reason(
            "InvalidArguments",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """The deploy ramdisk's kernel command line is not what it expects (no `capfleet.image`, a format
            other than raw or qcow2, a checksum that is not a SHA-256, a bad `capfleet.ca` or mode): the
            operator and the ramdisk are of different versions, or a boot script was changed.""",
            "Serve the deploy ramdisk built for this capfleet version (`make deploy-ramdisk`).",
        ),
        Reason(
            "InvalidBMCAddress",
            "BaremetalInstance `Ready=False` and a Warning Event",
            f"""`spec.bmc.address` is not `redfish+https://host[:port]/redfish/v1/Systems/<id>`,
            `redfish+http://...` or `ipmi://host[:port]`, without query, fragment or credentials.
            {NOT_RETRIED}""",
            """Fix the address where it comes from: the NetBox device's `bmc_address`, or the HybridCluster's
            `baremetal.bmcAddressTemplate`.""",
        ),
        Reason(
            "NetworkBooting",
            "the phase: `Provisioned=False`, `status.phase`, and a Normal Event",
            """A one-time network boot is set and the server powered on; the operator waits for it to fetch
            its boot script and seed.""",
            """If it stays: watch the server's console. It must get a DHCP lease that chains to the boot
            server's `boot.ipxe` (`CAPFLEET_BOOT_URL`).""",
        ),
        Reason(
            "NoMatchingDisk",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """No disk matches `rootDeviceHints` (or, without hints, none of at least 4 GiB); the message
            lists the disks the ramdisk saw.""",
            "Fix the hints (`deviceName`, `serialNumber`, `wwn`, `minSizeGigabytes`) against that list.",
        ),
        Reason(
            "Paused",
            "the operator's log, while a paused instance is deleted (and `Paused=True`)",
            "The instance is paused: its deletion waits, and powers the server off once it is unpaused.",
            "Unpause its Cluster (see [`Paused`](#shared-paused)).",
        ),
        Reason(
            "PoweringOff",
            "the phase: `Provisioned=False`, `status.phase`, and a Normal Event",
            "The server is being powered off before it is network-booted.",
            """Nothing; if it stays, the BMC does not power the server off (see `BMCSettling` and
            `CAPFLEET_BMC_POWER_WAIT_SECONDS`).""",
        ),
        Reason(
            "Provisioned",
            "the phase: `status.phase`, and a Normal Event",
            """Deployed: the server boots from its disk, and its power follows `spec.online`. (The condition
            `Provisioned` then has reason `Deployed`.)""",
            "Nothing.",
        ),
        Reason(
            "ProvisioningTimedOut",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """No callback came within `provisioningTimeoutSeconds` of the network boot. The deploy ramdisk
            reports what it can; it cannot call back without a network (no DHCP lease: `NetworkFailed` on the
            server's console only).""",
            """Watch the server's console through an attempt: did it network-boot and chain to the boot
            server, was its script refused ([`BootRequestRefused`](#baremetal-provision-bootrequestrefused)),
            did the ramdisk get a lease? A slow install needs a longer `provisioningTimeoutSeconds`.""",
        ),
        Reason(
            "RetryLimitExceeded",
            "BaremetalInstance `Provisioned=False` (phase `Failed`)",
            """`maxProvisioningAttempts` attempts failed; the message gives the last failure, also in
            `status.lastFailure`. The server is powered off and nothing more is tried.""",
            """Fix what the last failure names (its reason has an entry here). Then start afresh: delete the
            Machine (CAPI makes a new one, with a new BaremetalInstance), or for an instance of your own,
            delete and create it again.""",
        ),
        Reason(
            "Retrying",
            "the phase: `Provisioned=False`, `status.phase`, and a Warning Event",
            """An attempt failed (reported by the installer, or timed out); the server is powered off before
            the next attempt network-boots it afresh.""",
            "Look at the attempt's Warning Event: its reason says why it failed.",
        ),
        Reason(
            "SeedFailed",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            """The deploy ramdisk could not fetch the NoCloud seed or its callback key, or could not add the
            seed partition after the image (an image without a partition table, no room after it, mkfs or
            mount failing).""",
            """The message says which. The disk must be larger than the image; the image must carry a
            partition table. A callback key already fetched by someone else shows here too.""",
        ),
        Reason(
            "SeedRefetchRefused",
            "a Warning Event on the BaremetalInstance",
            """The user-data (the bootstrap secrets) was asked for a second time in this attempt and refused:
            it is served once per attempt. The message names who asked.""",
            """If the server did not ask twice, someone else on the provisioning network fetched it: treat the
            join token as exposed. A custom installer must fetch its user-data once.""",
        ),
        Reason(
            "SystemNotFound",
            "BaremetalInstance `BMCReachable=False` and a Warning Event",
            "The BMC answered, but has no Redfish system at the address's `/redfish/v1/Systems/<id>`.",
            """List the BMC's systems (`curl -u <user> https://<bmc>/redfish/v1/Systems`) and fix the id in
            the NetBox device's `bmc_address` or the HybridCluster's `bmcAddressTemplate`.""",
        ),
        Reason(
            "WriteFailed",
            """a Warning Event per failed attempt; `status.lastFailure`; `Provisioned`'s message once every
            attempt failed""",
            "Writing the image to the chosen disk failed (the last line of dd's or qemu-img's error).",
            """Check the disk's health, and that `spec.image.format` is the image's real format (raw or
            qcow2).""",
        ),
    ),
)

CAPI_MACHINE_GLUE = Group(
    "capi-machine-glue",
    "capi-machine-glue",
    """A HybridMachine shows each step as a condition, in order: `ClusterInfrastructureReady`,
    `ControlPlaneInitialized`, `BootstrapDataReady`, `AddressesAllocated`, then `VMProvisioned` (and
    `NetboxRecorded`) or `DeviceClaimed` and `ServerProvisioned`; `Ready` names the first that is not True.
    A step that waits for a child carries the child's own reason and message, prefixed with its kind and
    name: look the reason up under the child's operator. A HybridCluster has `ControlPlaneEndpointReady`.
    Events: a Normal `Ready` when the object becomes Ready, and a Warning with the reason when the glue
    itself cannot go on (a child spec that would be invalid).""",
    (
        Reason(
            "Allocated",
            """HybridMachine `AddressesAllocated=True`; HybridCluster `ControlPlaneEndpointReady=True` (an
            endpoint from a pool)""",
            """Every IPAddressClaim of the machine is bound, or the cluster's endpoint came from its VIP
            claim.""",
            "Nothing.",
        ),
        Reason(
            "Available",
            "HybridMachine `BootstrapDataReady=True`",
            "The Machine's bootstrap data Secret is set.",
            "Nothing.",
        ),
        Reason(
            "AwaitingReport",
            "the operator's log only",
            """A child just created has not reported yet: the machine's status is left as it is for up to 20
            s, until the child's first report wakes it.""",
            "Nothing.",
        ),
        Reason(
            "ChildNameTaken",
            "the operator's log (the HybridMachine's status does not change), retried every few seconds",
            """An object of a child's kind and name (the machine's name) exists and is not owned by this
            HybridMachine: a leftover of an earlier machine of that name, or someone else's.""",
            """`kubectl get <kind> <name> -n <namespace> -o yaml` and look at its `ownerReferences`; delete a
            leftover.""",
        ),
        Reason(
            "Claimed",
            "HybridMachine `DeviceClaimed=True`",
            "The NetboxDevice claimed a server.",
            "Nothing.",
        ),
        Reason(
            "ConflictingSelectors",
            """HybridMachine `VMProvisioned=False` or `DeviceClaimed=False`, `Ready=False`, and a Warning
            Event""",
            """The machine's selector and its failure domain's require different values for one label or
            device field, which no hypervisor or device can match. Retried at the resync or on a change.""",
            "Make the template's selector and the HybridCluster's failure domain agree.",
        ),
        Reason(
            "ControlPlaneMachine",
            "HybridMachine `ControlPlaneInitialized=True`",
            "A control-plane machine does not wait for the control plane to be initialized.",
            "Nothing.",
        ),
        Reason(
            "Creating",
            "a HybridMachine step `Unknown`",
            "The step's child (an IPAddressClaim, LibvirtVM, NetboxDevice, ...) is not created yet.",
            "Nothing: the next reconcile creates it.",
        ),
        Reason(
            "Deleting",
            """a HybridMachine step `False` (its child is being deleted); HybridMachine `Ready=False` while
            the machine's deletion waits for its children""",
            """A child is being deleted, or the machine's deletion has waited more than 10 s for its children
            (the message names them). The server or VM goes first, the device claim and addresses after.""",
            """If it stays, look at the children named: each says, in its own conditions, what its deletion
            waits for (a BMC, a hypervisor, a cleaner).""",
        ),
        Reason(
            "DeletingChildren",
            "the operator's log only",
            "A HybridMachine's or HybridCluster's deletion waits for its children to be deleted.",
            "See [`Deleting`](#capi-machine-glue-deleting).",
        ),
        Reason(
            "Initialized",
            "HybridMachine `ControlPlaneInitialized=True`",
            "The Cluster's control plane is initialized: a worker may be created.",
            "Nothing.",
        ),
        Reason(
            "InvalidChildSpec",
            "the HybridMachine step of that child `False`, `Ready=False`, and a Warning Event",
            """The child's spec, built from the template, the HybridCluster and NetBox's record, would not be
            valid: the message quotes the check that failed (a field too long, a value out of range).""",
            """Fix the field it names, in the HybridMachineTemplate or the HybridCluster (or the NetBox record
            it came from).""",
        ),
        Reason(
            "NetboxRequired",
            "HybridMachine `DeviceClaimed=False`, `Ready=False`, and a Warning Event",
            "A bare-metal machine is claimed from NetBox, and the HybridCluster has no `spec.netbox`.",
            "Set `spec.netbox` (its `connectionSecretRef`, and optionally `tenant`) on the HybridCluster.",
        ),
        Reason(
            "NoBMCAddress",
            "HybridMachine `ServerProvisioned=False`, `Ready=False`, and a Warning Event",
            "The claimed NetBox device has neither a `bmc_address` custom field nor an out-of-band IP.",
            """Set one in NetBox, then touch the NetboxDevice (an annotation) so it reads the device again;
            the machine follows.""",
        ),
        Reason(
            "NoBMCCredentials",
            "HybridMachine `ServerProvisioned=False`, `Ready=False`, and a Warning Event",
            "The HybridCluster has no `spec.baremetal.bmcCredentialsSecretRef`.",
            "Set it (a Secret with `username` and `password` in the cluster's namespace).",
        ),
        Reason(
            "NoBootInterface",
            "HybridMachine `ServerProvisioned=False`, `Ready=False`, and a Warning Event",
            """The claimed device has no interface named `baremetal.bootInterface` with a MAC address (or, if
            unset, no non-management interface with one).""",
            """Record the interface's MAC in NetBox (a primary MAC address, NetBox 4.2 and later) or name the
            right interface in `bootInterface`; then touch the NetboxDevice.""",
        ),
        Reason(
            "NoControlPlaneEndpoint",
            "HybridCluster `ControlPlaneEndpointReady=False`",
            """The HybridCluster has neither `spec.controlPlaneEndpoint` nor
            `spec.controlPlaneEndpointPoolRef`.""",
            "Set one: a fixed endpoint, or a pool to allocate the VIP from.",
        ),
        Reason(
            "NoPools",
            "HybridMachine `AddressesAllocated=True`",
            "No interface names an IP pool: the addresses come from DHCP.",
            "Nothing.",
        ),
        Reason(
            "NotAHybridCluster",
            "HybridMachine `ClusterInfrastructureReady=False`",
            """The machine's Cluster has an `infrastructureRef` that is not a HybridCluster of
            `infrastructure.cluster.x-k8s.io`.""",
            """HybridMachines belong to Clusters whose infrastructure is a HybridCluster: fix the Cluster, or
            the MachineDeployment or control plane that uses this template.""",
        ),
        Reason(
            "Paused",
            "the operator's log, while a paused machine is deleted (and `Paused=True`)",
            "The machine is paused: its deletion waits and resumes when it is unpaused.",
            "Unpause its Cluster (see [`Paused`](#shared-paused)).",
        ),
        Reason(
            "Pending",
            """a HybridMachine step `Unknown`; HybridCluster `ControlPlaneEndpointReady=Unknown`""",
            """A child exists and has not reported yet (after a 20 s grace), or a claim is bound to an
            IPAddress that is not there yet.""",
            """If it stays, look at the child named: its operator may not be running (`kubectl get <kind>
            <name>` shows no `Ready`).""",
        ),
        Reason(
            "Provisioned",
            "HybridMachine `ClusterInfrastructureReady=True` and `ServerProvisioned=True`",
            """The Cluster's infrastructure is provisioned (CAPI copied it from the HybridCluster), or the
            BaremetalInstance is Ready.""",
            "Nothing.",
        ),
        Reason(
            "Recorded",
            "HybridMachine `NetboxRecorded=True`",
            "The NetboxVirtualMachine registered the VM in NetBox.",
            "Nothing.",
        ),
        Reason(
            "Running",
            "HybridMachine `VMProvisioned=True`",
            "The LibvirtVM is Ready: its domain runs.",
            "Nothing.",
        ),
        Reason(
            "Set",
            "HybridCluster `ControlPlaneEndpointReady=True`",
            "The endpoint is the one `spec.controlPlaneEndpoint` gives.",
            "Nothing.",
        ),
        Reason(
            "UnknownFailureDomain",
            """HybridMachine `VMProvisioned=False` or `DeviceClaimed=False`, `Ready=False`, and a Warning
            Event""",
            """The Machine's failure domain is not among those the HybridCluster declares (the message lists
            them).""",
            """Declare it in the HybridCluster's `spec.failureDomains`, or fix the failure domain of the
            MachineDeployment or control plane.""",
        ),
        Reason(
            "UnknownInterface",
            "HybridMachine `ServerProvisioned=False`, `Ready=False`, and a Warning Event",
            """An interface of the machine's `network.interfaces` has no interface of that name with a MAC
            address on the claimed NetBox device.""",
            "Name the template's interfaces as NetBox names the server's, or record their MACs in NetBox.",
        ),
        Reason(
            "WaitingForAddresses",
            "HybridMachine `VMProvisioned=Unknown` or `ServerProvisioned=Unknown`",
            "The VM or server waits for every address to be allocated.",
            "See the machine's `AddressesAllocated`.",
        ),
        Reason(
            "WaitingForBootstrapData",
            "HybridMachine `BootstrapDataReady=False`",
            """The Machine's `spec.bootstrap.dataSecretName` is not set yet: the bootstrap provider (kubeadm)
            has not written its data (workers wait for the control plane first).""",
            "Look at the Machine's bootstrap object (`kubectl get kubeadmconfig -n <namespace>`).",
        ),
        Reason(
            "WaitingForCluster",
            """HybridMachine `ClusterInfrastructureReady=False`; HybridCluster
            `ControlPlaneEndpointReady=False`""",
            """The Cluster that the machine's cluster-name label names does not exist, or no Cluster owns the
            HybridCluster yet.""",
            """Check the Cluster exists in the same namespace and its `infrastructureRef` names this
            HybridCluster; Cluster API's core controller sets the ownership.""",
        ),
        Reason(
            "WaitingForClusterInfrastructure",
            "HybridMachine `ClusterInfrastructureReady=False`",
            """The Cluster's infrastructure is not provisioned yet: CAPI waits for the HybridCluster's
            `status.initialization.provisioned`.""",
            "See the HybridCluster's `ControlPlaneEndpointReady`.",
        ),
        Reason(
            "WaitingForControlPlaneInitialized",
            "HybridMachine `ControlPlaneInitialized=False` (workers)",
            "A worker waits for the Cluster's control plane to be initialized, as the CAPI contract asks.",
            "See the control plane's machines.",
        ),
        Reason(
            "WaitingForDevice",
            "HybridMachine `ServerProvisioned=Unknown`",
            "The server waits for its NetboxDevice to claim a device.",
            "See the machine's `DeviceClaimed` (its NetboxDevice's reason).",
        ),
        Reason(
            "WaitingForHybridCluster",
            "HybridMachine `ClusterInfrastructureReady=False`",
            "The HybridCluster the Cluster's `infrastructureRef` names does not exist.",
            "Create it, or fix the Cluster's `infrastructureRef`.",
        ),
        Reason(
            "WaitingForMachine",
            "HybridMachine `ClusterInfrastructureReady=False` (once it is 10 s old)",
            """No CAPI Machine owns the HybridMachine (or it has no cluster-name label). Cluster API sets the
            owner within a second of creating both.""",
            """HybridMachines are made by Cluster API from a HybridMachineTemplate: one made by hand stays
            here. Otherwise check that CAPI's core controller runs.""",
        ),
    ),
)

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

GROUPS: tuple[Group, ...] = (
    SHARED,
    IPAM_ADDRESS,
    NETBOX_DEVICE,
    LIBVIRT_VM,
    BAREMETAL_PROVISION,
    CAPI_MACHINE_GLUE,
)

_ERROR = "an error's own reason, each catalogued where that error is raised"
_CHILD = "a child's or a step's reason, copied onto the object that waits for it"

RELAYS: dict[tuple[str, str, str], Relay] = {
    ("baremetal_provision.front", "relay", "answer.reason"): Relay(
        "the HTTP reason phrase the boot front passes on from the operator's boot server: not a condition"
    ),
    ("baremetal_provision.reporting", "InstanceStatus.attempt_failed", "failure.split(':', 1)[0]"): Relay(
        """the reason of a failed attempt, from its failure text "Reason: message": a reason the deploy
        ramdisk reported (`reports.REASONS`, else `DeployFailed`), or the deadline's""",
        yields=("ProvisioningTimedOut",),
    ),
    ("baremetal_provision.reporting", "InstanceStatus.failed", "exc.reason"): Relay(_ERROR),
    ("netbox_device.contexts", "Context.release.unless_moving", "exc.reason"): Relay(_ERROR),
    ("baremetal_provision.reports", "read", "query.get('reason', '')"): Relay(
        "the reason the deploy ramdisk sends, taken only when it is one of `REASONS` (else `DeployFailed`)"
    ),
    ("capfleet.conditions", "apply", "update.reason"): Relay("every condition update's reason, as given"),
    ("capfleet.conditions", "summarize", "found.reason"): Relay(
        "Ready takes the reason of the first step that is not True"
    ),
    ("capfleet.reconciling", "Context.announce", "ready.reason"): Relay("an Event's reason is Ready's"),
    ("capfleet.reconciling", "Recorder.step", "exc.reason"): Relay(_ERROR),
    ("capfleet.tables", "ready_condition", "str(raw.get('reason', ''))"): Relay(
        "the CLI's tables show Ready's reason: they set nothing"
    ),
    ("capi_machine_glue.contexts", "Context.announce", "ready.reason"): Relay("an Event's reason is Ready's"),
    ("capi_machine_glue.contexts", "Context.refused", "error.reason"): Relay(_ERROR),
    ("capi_machine_glue.machines", "MachineReconcile.planned", "exc.reason"): Relay(_ERROR),
    ("capi_machine_glue.machines", "MachineReconcile.planned", "refused.reason"): Relay(
        "`InvalidChildSpec`, raised just before"
    ),
    ("capi_machine_glue.summaries", "child_ready", "ready.reason"): Relay(_CHILD),
    ("ipam_address.claims", "failure_reason", "error.reason"): Relay(
        "`PoolNotReady` or `PoolExhausted` from the error, else `AllocationFailed`"
    ),
    ("ipam_address.netbox_pools", "pool_status", "failure.reason"): Relay(_ERROR),
    ("ipam_address.pool_status", "desired_status", "exc.reason"): Relay(_ERROR),
    ("ipam_address.serving", "write_failure", "error.reason"): Relay(_ERROR),
    ("libvirt_vm.hypervisors", "reconcile", "exc.reason"): Relay(_ERROR),
    ("libvirt_vm.vms", "place", "decision.reason"): Relay(
        "placement's reason (`placing.place`: `NoHypervisorMatches`, `InsufficientCapacity`)"
    ),
}
