"""The demo's cluster tree: conditions summarised the way a person reads them."""

from __future__ import annotations

from capfleet.tree import conditions_text, facts


def condition(type_: str, status: str, reason: str = "R", message: str = "") -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_good_conditions_fold_into_one_line_and_problems_keep_their_reason_and_message() -> None:
    obj = {
        "status": {
            "conditions": [
                condition("Ready", "True"),
                condition("Paused", "False", "NotPaused"),
                condition("Scheduled", "True"),
                condition("Running", "False", "NoCapacity", "no Hypervisor has\n  1 vCPU free"),
                condition("Deleting", "True", "Deleting", "waiting"),
                condition("NodeHealthy", "Unknown", "InspectionFailed"),
            ]
        }
    }
    assert conditions_text(obj) == [
        "✓ Ready, Scheduled",
        "✗ Running: NoCapacity: no Hypervisor has 1 vCPU free",
        "! Deleting: Deleting: waiting",
        "? NodeHealthy: InspectionFailed",
    ]


def test_a_hybrid_machine_shows_how_long_each_step_took() -> None:
    def done(type_: str, at: str) -> dict[str, str]:
        return {**condition(type_, "True"), "lastTransitionTime": at}

    machine = {
        "kind": "HybridMachine",
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "conditions": [
                done("Ready", "2026-01-01T00:03:10Z"),
                done("ClusterInfrastructureReady", "2026-01-01T00:00:01Z"),
                done("BootstrapDataReady", "2026-01-01T00:00:31Z"),
                done("VMProvisioned", "2026-01-01T00:03:10Z"),
            ]
        },
    }
    assert conditions_text(machine) == [
        "✓ Ready, ClusterInfrastructureReady 1s, BootstrapDataReady 30s, VMProvisioned 2m39s"
    ]


def test_machine_facts_show_phase_provider_id_and_addresses() -> None:
    machine = {
        "kind": "Machine",
        "spec": {"providerID": "capfleet://metal/7"},
        "status": {"phase": "Provisioned", "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]},
    }
    assert facts(machine) == "phase=Provisioned  providerID=capfleet://metal/7  InternalIP=10.0.0.2"
