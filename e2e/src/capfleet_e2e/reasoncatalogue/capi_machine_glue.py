"""The reasons capi-machine-glue sets: what each means and what to do (one section of the book's
troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import Group, Reason

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
