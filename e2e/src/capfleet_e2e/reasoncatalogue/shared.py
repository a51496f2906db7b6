"""The reasons the shared package (`shared/src/capfleet`) sets: what each means and what to do (one
section of the book's troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import Group, Reason

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
            account may not do what the reconcile needs (a ClusterRole not applied or not upgraded, or a
            namespace that has not applied `deploy/tenant`). Retried slowly (60 s, doubling to 10
            minutes).""",
            """Find the verb and resource in the log line, then check the operator's RBAC: `kubectl auth can-i
            <verb> <resource> --as=system:serviceaccount:capfleet-system:capfleet-<operator>-manager -n
            <namespace>`. Re-apply the release's RBAC (`clusterctl upgrade`, or the overlay); for Secrets,
            `kubectl apply -k deploy/tenant -n <namespace>`.""",
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
            """The operator may read Secrets only in namespaces that opted in (where `deploy/tenant` bound its
            secrets ClusterRole), and this Secret is in another one. Retried like a missing Secret.""",
            """`kubectl apply -k deploy/tenant -n <namespace>` for the namespace of the Secret (for a
            Hypervisor, the namespace of its SSH Secrets; from a release, its `tenant-rbac.yaml`).""",
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
