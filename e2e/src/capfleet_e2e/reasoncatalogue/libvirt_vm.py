"""The reasons libvirt-vm sets: what each means and what to do (one section of the book's
troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import Group, Reason

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
