"""The reasons baremetal-provision sets: what each means and what to do (one section of the book's
troubleshooting page)."""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.model import NOT_RETRIED, Group, Reason

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
