"""A VM's re-check converges in full only when its status and its hypervisor's last listing disagree."""

from __future__ import annotations

from typing import Any

import libvirt
import pytest

from capfleet.api import kinds
from libvirt_vm import rechecks
from libvirt_vm.backends import hosts

UUID = "6a1f0c3e-0000-4000-8000-000000000001"
READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Ready",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
    "observedGeneration": 2,
}


def vm_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "libvirt.capfleet.dev/v1alpha1",
        "kind": "LibvirtVM",
        "metadata": {"name": "vm1", "namespace": "ns", "generation": 2},
        "spec": {
            "hypervisorName": "hv1",
            "vcpus": 1,
            "memoryMiB": 512,
            "disks": [{"name": "root", "sizeGiB": 1, "sourceImage": "base.qcow2"}],
            "cloudInit": {"userDataSecretRef": {"name": "bootstrap"}},
        },
        "status": {
            "domainUUID": UUID,
            "domainName": "ns_vm1",
            "state": "running",
            "hypervisorName": "hv1",
            "conditions": [READY],
        },
    }
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = body
        for parent in parents:
            target = target[parent]
        target[key] = value
    return body


def listed(domains: rechecks.DomainStates) -> rechecks.Listing:
    return rechecks.Listing(domains, taken=0.0)


def as_listed(body: dict[str, Any], listing: rechecks.Listing | None) -> bool:
    return rechecks.as_listed(kinds.LIBVIRT_VM.parse(body), body["metadata"].get("generation"), listing)


def test_a_ready_vm_whose_domain_is_listed_as_its_status_says_needs_nothing() -> None:
    assert as_listed(vm_body(), listed({"ns_vm1": (UUID, "running")}))
    off = vm_body(spec__powerState="Off", status__state="shutoff")
    assert as_listed(off, listed({"ns_vm1": (UUID, "shutoff")}))


@pytest.mark.parametrize(
    ("why", "body", "domains"),
    [
        ("the domain stopped behind its back", vm_body(), {"ns_vm1": (UUID, "shutoff")}),
        ("the domain is gone", vm_body(), {}),
        ("another domain has its name", vm_body(), {"ns_vm1": ("another-uuid", "running")}),
        ("its status was wiped", vm_body(status={}), {"ns_vm1": (UUID, "running")}),
        ("a spec change is not handled yet", vm_body(metadata__generation=3), {"ns_vm1": (UUID, "running")}),
        (
            "it is not Ready",
            vm_body(status__conditions=[{**READY, "status": "False", "reason": "Converging"}]),
            {"ns_vm1": (UUID, "running")},
        ),
        (
            "it runs but is asked to be off",
            vm_body(spec__powerState="Off"),
            {"ns_vm1": (UUID, "running")},
        ),
    ],
)
def test_a_vm_is_converged_in_full_when(
    why: str, body: dict[str, Any], domains: rechecks.DomainStates
) -> None:
    assert not as_listed(body, listed(domains)), why


def test_without_a_listing_the_vm_is_converged_in_full() -> None:
    assert not as_listed(vm_body(), None)


def test_a_listing_older_than_asked_is_not_used() -> None:
    clock = [100.0]
    listings = rechecks.Listings(clock=lambda: clock[0])
    listings.store("hv1", {"ns_vm1": (UUID, "running")})
    clock[0] = 130.0
    found = listings.fresh("hv1", max_age=60.0)
    assert found is not None
    assert found.domains == {"ns_vm1": (UUID, "running")}
    assert listings.fresh("hv1", max_age=20.0) is None
    assert listings.fresh("hv2", max_age=60.0) is None
    listings.forget("hv1")
    assert listings.fresh("hv1", max_age=60.0) is None
    assert listings.by_hypervisor == {}


def test_a_host_that_refuses_the_bulk_listing_gives_none_and_its_vms_are_rechecked_in_full() -> None:
    class Refusing:
        def getAllDomainStats(self, stats: int, flags: int) -> Any:  # noqa: N802 (libvirt's name)
            raise libvirt.libvirtError("this function is not supported by the connection driver")

    class Domain:
        def name(self) -> str:
            return "ns_vm1"

        def UUIDString(self) -> str:  # noqa: N802 (libvirt's name)
            return UUID

    class Listing:
        def getAllDomainStats(self, stats: int, flags: int) -> Any:  # noqa: N802 (libvirt's name)
            assert stats == libvirt.VIR_DOMAIN_STATS_STATE
            return [(Domain(), {"state.state": 5, "state.reason": 1})]

    assert hosts.domain_states(Refusing()) is None
    assert hosts.domain_states(Listing()) == {"ns_vm1": (UUID, "shutoff")}
