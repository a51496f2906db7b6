"""What a stuck namespace deletion reports: each object that holds it, with its finalizers and its Ready
condition (the reason a deletion handler keeps failing), and nothing for objects without finalizers."""

from __future__ import annotations

from capfleet_e2e.namespaces import holding


def test_a_holder_is_named_with_its_finalizers_and_ready_condition() -> None:
    vm = {
        "metadata": {"name": "vm1", "finalizers": ["libvirt-vm.capfleet.dev/finalizer"]},
        "status": {
            "conditions": [
                {"type": "Running", "status": "True", "reason": "Started", "message": ""},
                {"type": "Ready", "status": "False", "reason": "DeletionFailed", "message": "no Secret"},
            ]
        },
    }
    assert holding("LibvirtVM", vm) == (
        "LibvirtVM vm1: ['libvirt-vm.capfleet.dev/finalizer'] (Ready=False DeletionFailed: no Secret)"
    )
    assert holding("Secret", {"metadata": {"name": "s", "finalizers": ["a/b"]}}) == "Secret s: ['a/b']"
    assert holding("LibvirtVM", {"metadata": {"name": "free"}, "status": vm["status"]}) == ""
