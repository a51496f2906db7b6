"""What every condition and Event reason capfleet sets means, and what to do about it: the source of the
book's troubleshooting page (docs/operate/troubleshooting.md, written by `python -m capfleet_e2e.book
generate`).

It lives in the e2e package, out of the operators' runtime, and is checked against the code by
`capfleet_e2e.reasonscan` (`python -m capfleet_e2e.book check`, `make book-check`): every reason the code
sets has an entry here, in the section of the operator (or `shared`) whose code sets it, and every entry
names a reason the code still sets. Where the code relays a reason it does not name (an error's own reason,
a child's reason copied onto its parent), `RELAYS` says what it relays, so a new relay is a decision too.

Each operator's reasons are in the module named after it (the shared package's in `shared`); texts are
Markdown, and whitespace is folded when the page is written, so they wrap freely there.
"""

from __future__ import annotations

from capfleet_e2e.reasoncatalogue.baremetal_provision import BAREMETAL_PROVISION
from capfleet_e2e.reasoncatalogue.capi_machine_glue import CAPI_MACHINE_GLUE
from capfleet_e2e.reasoncatalogue.ipam_address import IPAM_ADDRESS
from capfleet_e2e.reasoncatalogue.libvirt_vm import LIBVIRT_VM
from capfleet_e2e.reasoncatalogue.model import Group, Reason, Relay
from capfleet_e2e.reasoncatalogue.netbox_device import NETBOX_DEVICE
from capfleet_e2e.reasoncatalogue.shared import SHARED

__all__ = ["GROUPS", "RELAYS", "Group", "Reason", "Relay"]

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
