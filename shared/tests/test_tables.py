"""The fleet's tables: columns a person reads, states that say why, owners, ages, no credentials."""

from __future__ import annotations

import datetime
from typing import Any

from capfleet import tables
from capfleet.cli import paint_tree

NOW = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)


def ready(status: str, reason: str) -> dict[str, str]:
    return {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": "2026-01-01T00:00:00Z"}


def vm(name: str, **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "team-a", "creationTimestamp": "2026-01-01T23:00:00Z"}
    meta.update(extra.pop("meta", {}))
    spec = {
        "vcpus": 2,
        "memoryMiB": 2048,
        "disks": [{"name": "root", "sizeGiB": 20}, {"name": "d", "sizeGiB": 5}],
    }
    return {"metadata": meta, "spec": {**spec, **extra.pop("spec", {})}, "status": extra.pop("status", {})}


def test_a_running_vm_and_one_waiting_for_quota() -> None:
    running = vm(
        "web",
        meta={"annotations": {tables.CREATED_BY: "alice"}},
        spec={"hypervisorName": "hv1"},
        status={"state": "running", "conditions": [ready("True", "Ready")]},
    )
    waiting = vm(
        "db",
        meta={"ownerReferences": [{"kind": "HybridMachine", "name": "cp-0", "uid": "u", "controller": True}]},
        status={"conditions": [ready("False", "QuotaExceeded")]},
    )
    table = tables.vms([running, waiting], NOW)
    assert table.header[:3] == ("NAMESPACE", "NAME", "VCPUS")
    assert table.rows == [
        ("team-a", "db", "2", "2 GiB", "25 GiB", "QuotaExceeded", "-", "HybridMachine/cp-0", "1h"),
        ("team-a", "web", "2", "2 GiB", "25 GiB", "running", "hv1", "alice", "1h"),
    ]
    assert table.health == ["busy", "good"]


def test_a_failed_step_is_bad_and_a_deleting_object_says_so() -> None:
    failed = vm("x", status={"state": "shutoff", "conditions": [ready("False", "HostKeyMismatch")]})
    assert tables.vms([failed], NOW).rows[0][5] == "shutoff: HostKeyMismatch"
    assert tables.vms([failed], NOW).health == ["bad"]
    going = vm("y", meta={"deletionTimestamp": "2026-01-01T23:59:00Z"}, status={"state": "running"})
    assert tables.vms([going], NOW).rows[0][5] == "Deleting"


def test_hypervisors_show_allocated_of_capacity_and_their_vms() -> None:
    hv = {
        "metadata": {"name": "hv1"},
        "spec": {"connection": {"host": "10.0.0.1"}, "failureDomain": "fd-a", "reserved": {"vcpus": 2}},
        "status": {
            "capacity": {"vcpus": 16, "memoryMiB": 65536, "storageGiB": 500},
            "allocated": {"vcpus": 4, "memoryMiB": 4096, "storageGiB": 40},
            "conditions": [ready("True", "Ready"), {**ready("True", "Reachable"), "type": "Reachable"}],
        },
    }
    table = tables.hypervisors([hv], [vm("a", spec={"hypervisorName": "hv1"}), vm("b")])
    assert table.rows == [
        (
            "hv1",
            "10.0.0.1",
            "fd-a",
            "yes",
            "4 / 16",
            "4 GiB / 64 GiB",
            "40 GiB / 500 GiB",
            "10 vCPUs, 60 GiB, 460 GiB",
            "1",
        )
    ]
    unmeasured = {"metadata": {"name": "hv2"}, "spec": {}, "status": {}}
    assert tables.hypervisors([unmeasured], []).rows[0][7] == "-"


def test_servers_name_their_netbox_device_and_never_a_credential() -> None:
    owner = [{"kind": "HybridMachine", "name": "w-0", "uid": "m1", "controller": True}]
    bmi = {
        "metadata": {"name": "w-0", "namespace": "n", "ownerReferences": owner},
        "spec": {"bmc": {"address": "redfish+https://admin:hunter2@10.1.0.5/redfish/v1/Systems/1"}},
        "status": {"phase": "Provisioned", "powerState": "On", "conditions": [ready("True", "Ready")]},
    }
    device = {
        "metadata": {"name": "w-0", "ownerReferences": owner},
        "status": {"name": "metal-1", "deviceID": 7},
    }
    [row] = tables.servers([bmi], [device], NOW).rows
    assert row[2:6] == (
        "Provisioned",
        "On",
        "metal-1 (id 7)",
        "redfish+https://10.1.0.5/redfish/v1/Systems/1",
    )
    assert "hunter2" not in tables.render(tables.servers([bmi], [device], NOW))


def test_quotas_show_used_of_hard_and_a_full_one_stands_out() -> None:
    quota = {
        "metadata": {"name": "team", "namespace": "n"},
        "spec": {"hard": {"vcpus": 4, "memoryMiB": 8192}},
        "status": {"used": {"vcpus": 4, "memoryMiB": 2048, "storageGiB": 10, "vms": 2}},
    }
    table = tables.quotas([quota])
    assert table.rows == [("n", "team", "4 / 4", "2 GiB / 8 GiB", "10 GiB", "2")]
    assert table.health == ["busy"]


def test_render_aligns_columns_and_colours_rows_only_when_asked() -> None:
    table = tables.Table(("A", "LONGER"), [("x", "1"), ("yyyy", "2")], ["good", "bad"])
    assert tables.render(table) == "A      LONGER\nx      1\nyyyy   2"
    painted = tables.render(table, {"good": "32", "bad": "31"}).splitlines()
    assert painted[1] == "\033[32mx      1\033[0m"
    assert painted[2] == "\033[31myyyy   2\033[0m"


def test_ages_read_like_kubectl() -> None:
    assert [
        tables.age(t, NOW) for t in ("2026-01-01T23:59:15Z", "2026-01-01T23:48:00Z", "2025-12-30T00:00:00Z")
    ] == [
        "45s",
        "12m",
        "3d",
    ]
    assert tables.age(None, NOW) == "-"


def test_the_tree_is_coloured_by_condition_mark() -> None:
    text = "Cluster c\n│     ✓ Ready\n│     ✗ Running: NoCapacity"
    assert paint_tree(text).splitlines() == [
        "Cluster c",
        "│     \033[32m✓ Ready\033[0m",
        "│     \033[31m✗ Running: NoCapacity\033[0m",
    ]
