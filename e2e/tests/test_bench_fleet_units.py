"""Unit tests of `make bench-fleet`'s pure half: which Machines count as provisioned workers, which audited
requests are writes, and the side-by-side table (ratios to CAPI's floor, per-machine figures)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from capfleet.kube import KubeError
from capfleet_e2e.baremetal.fakeramdisk import fake_systems
from capfleet_e2e.bench.fleet import parse_args, patient
from capfleet_e2e.bench.fleetfigures import (
    OperatorFigures,
    SideResult,
    format_results,
    netbox_spent,
    provisioned_workers,
    writes_of,
)
from capfleet_e2e.bench.fleetlab import (
    HYPERVISOR_POOL,
    METAL_DEPLOYMENT,
    NETBOX_VM_CLUSTER,
    VM_DEPLOYMENT,
    VM_IMAGE,
    fleet_objects,
)
from capfleet_e2e.bench.measure import patch_change, requests_of


def machine(name: str, provisioned: bool, control_plane: bool = False) -> dict[str, Any]:
    labels = {"cluster.x-k8s.io/control-plane": ""} if control_plane else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"initialization": {"infrastructureProvisioned": provisioned}},
    }


def event(user: str, verb: str, audit_id: str) -> dict[str, Any]:
    return {"user": {"username": user}, "verb": verb, "auditID": audit_id, "userAgent": "x"}


def test_only_provisioned_workers_count_not_the_control_plane() -> None:
    found = [
        machine("cp", True, control_plane=True),
        machine("w1", True),
        machine("w2", False),
        {"metadata": {"name": "w3"}},
    ]
    assert provisioned_workers(found) == 1


def test_writes_are_the_changing_verbs_each_audit_id_once() -> None:
    events = [
        event("system:serviceaccount:capfleet-system:glue", "patch", "a"),
        event(
            "system:serviceaccount:capfleet-system:glue", "patch", "a"
        ),  # ResponseStarted + ResponseComplete
        event("system:serviceaccount:capfleet-system:glue", "create", "b"),
        event("system:serviceaccount:capfleet-system:glue", "watch", "c"),
        event("system:serviceaccount:capfleet-system:glue", "get", "d"),
        event("someone-else", "delete", "e"),
    ]
    assert writes_of(events, "system:serviceaccount:capfleet-system:glue") == 2


def test_a_patch_is_told_by_what_it_changes_whether_a_merge_patch_or_a_json_patch() -> None:
    merge = {
        "metadata": {
            "annotations": {"baremetal.capfleet.dev/seed-fetched-at": "t", "plain": None},
            "finalizers": ["x"],
            "resourceVersion": "7",
        },
        "spec": {"hypervisorName": "hv-0"},
    }
    changes = "annotation plain, annotation seed-fetched-at, finalizers, spec.hypervisorName"
    assert patch_change(merge) == changes
    assert patch_change({"status": {"conditions": [], "ready": True}}) == "status.conditions, status.ready"
    json_patch = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "add", "path": "/metadata/annotations/kopf.zalando.org~1last-handled-configuration"},
    ]
    assert patch_change(json_patch) == "annotation last-handled-configuration, finalizers"
    assert patch_change({"metadata": {"resourceVersion": "7"}}) == "nothing"


def test_patches_are_counted_by_resource_and_change_each_audit_id_once_and_only_with_a_body() -> None:
    glue = "system:serviceaccount:capfleet-system:glue"

    def patch(audit_id: str, body: Any | None) -> dict[str, Any]:
        found = {**event(glue, "patch", audit_id), "objectRef": {"resource": "hybridmachines"}}
        return found if body is None else {**found, "requestObject": body}

    events = [
        patch("a", {"metadata": {"finalizers": ["f"]}}),
        patch("a", {"metadata": {"finalizers": ["f"]}}),
        patch("b", {"metadata": {"finalizers": ["f"]}}),
        patch("c", {"spec": {"providerID": "p"}}),
        patch("d", None),  # a Secret's patch: logged without its body
        {**event("someone-else", "patch", "e"), "requestObject": {"spec": {}}},
    ]
    assert requests_of(events, glue).patches_by_change == {
        "patch hybridmachines: finalizers": 2,
        "patch hybridmachines: spec.providerID": 1,
    }


def test_the_table_shows_times_with_their_ratio_and_per_machine_costs() -> None:
    floor = SideResult("floor", 100, 40.0, 20.0)
    fleet = SideResult(
        "capfleet",
        100,
        60.0,
        30.0,
        {
            "capi-machine-glue": OperatorFigures(
                1200,
                500,
                12.5,
                80.0,
                {"patch hybridmachines/status": 400, "create ipaddressclaims": 100},
                patches_by_change={"patch hybridmachines: finalizers": 100, "patch hybridmachines: x": 4},
            ),
            "ipam-address": OperatorFigures(300, 300, 3.0, 82.0, idle_rss_mib=71.5),
        },
        idle_writes_per_minute=0,
        deletion={
            "capi-machine-glue": OperatorFigures(505, 202, 4.0, 80.0, {"delete baremetalinstances": 101})
        },
        vms=40,
    )
    table = format_results(floor, fleet).splitlines()
    assert table[1].split()[-3:] == ["40.0", "60.0", "1.50"]
    assert table[2].split()[-3:] == ["20.0", "30.0", "1.50"]
    assert table[3] == "capfleet's workers: 60 bare-metal servers, 40 VMs"
    assert table[6].split() == ["capi-machine-glue", "12.00", "5.00", "12.5", "80.0", "n/a"]
    assert table[7].split() == ["ipam-address", "3.00", "3.00", "3.0", "82.0", "71.5"]
    assert table[8].split() == ["all", "operators", "8.00"]
    assert table[9].endswith(": 0")
    assert table[12] == "  capi-machine-glue: patch hybridmachines/status 4.00, create ipaddressclaims 1.00"
    assert table[13] == "  ipam-address: none"
    assert table[14:16] == [
        "patches per machine, by what they change:",
        "  capi-machine-glue: patch hybridmachines: finalizers 1.00",  # not the 0.04 per machine
    ]
    assert table[18].split() == ["capi-machine-glue", "5.00", "2.00", "4.0"]  # per machine of N + 1
    assert table[19].split() == ["all", "operators", "2.00"]
    assert table[21] == "  capi-machine-glue: delete baremetalinstances 1.00"


def test_netbox_requests_and_the_labs_cpu_by_process_get_lines_per_phase() -> None:
    fleet = SideResult(
        "capfleet",
        100,
        60.0,
        30.0,
        {"netbox-device": OperatorFigures(900, 750, 5.0, 80.0)},
        idle_writes_per_minute=0,
        deletion={"netbox-device": OperatorFigures(404, 303, 3.0, 80.0)},
        netbox_requests=900,
        netbox_requests_deleting=303,
        cpu={"kube-apiserver": 50.25, "NetBox": 40.0, "Redis": 0.01},
        cpu_deleting={"kube-apiserver": 20.0},
        cores=2,
    )
    lines = format_results(SideResult("floor", 100, 40.0, 20.0), fleet).splitlines()
    assert [line for line in lines if line.startswith(("NetBox:", "CPU s by process"))] == [
        "NetBox: 9.00 requests/machine",
        "CPU s by process (of 2 cores x 60.0 s = 120): kube-apiserver 50.2, NetBox 40.0",
        "NetBox: 3.00 requests/machine",  # of N + 1
        "CPU s by process (of 2 cores x 30.0 s = 60): kube-apiserver 20.0",
    ]
    idle = lines.index("idle writes per minute once converged: 0")
    assert lines.index("NetBox: 9.00 requests/machine") == idle - 2


def test_netbox_requests_are_told_by_endpoint_with_object_ids_folded_most_first() -> None:
    before = {"GET /api/dcim/devices/": 5, "PATCH /api/dcim/devices/7/": 1}
    after = {
        **before,
        "GET /api/dcim/devices/": 9,
        "PATCH /api/dcim/devices/8/": 1,
        "PATCH /api/dcim/devices/9/": 1,
        "POST /api/virtualization/virtual-machines/": 6,
    }
    spent = netbox_spent(before, after)
    assert list(spent.items()) == [
        ("POST virtualization/virtual-machines", 6),
        ("GET dcim/devices", 4),
        ("PATCH dcim/devices/{id}", 2),
    ]
    fleet = SideResult("capfleet", 2, 60.0, 0.0, {}, netbox_by_request=spent)
    lines = format_results(SideResult("floor", 2, 40.0, 0.0), fleet).splitlines()
    assert lines[-1] == (
        "  NetBox: POST virtualization/virtual-machines 3.00, GET dcim/devices 2.00, "
        "PATCH dcim/devices/{id} 1.00"
    )


def test_fake_servers_have_distinct_names_uuids_and_macs() -> None:
    servers = fake_systems(300, "srv")
    assert len({s["name"] for s in servers}) == len({s["uuid"] for s in servers}) == 300
    macs = {s["nics"][0]["mac"] for s in servers}
    assert len(macs) == 300
    assert servers[257]["nics"][0]["mac"] == "52:54:00:00:01:01"
    assert all(s["external_notifier"] for s in servers)


def test_the_fleet_has_a_bare_metal_and_a_vm_machine_deployment_both_from_the_shipped_templates() -> None:
    workload = SimpleNamespace(host="127.0.0.1", port=6443)
    network = SimpleNamespace(bridge="pxebr0")
    objects = fleet_objects(workload, network)  # type: ignore[arg-type]
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    assert set(by_kind["MachineDeployment"]) == {METAL_DEPLOYMENT, VM_DEPLOYMENT}
    vm_md = by_kind["MachineDeployment"][VM_DEPLOYMENT]
    assert vm_md["spec"]["replicas"] == 0
    assert vm_md["spec"]["template"]["spec"]["infrastructureRef"]["name"] == VM_DEPLOYMENT
    assert vm_md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"] == VM_DEPLOYMENT
    assert VM_DEPLOYMENT in by_kind["KubeadmConfigTemplate"]
    vm = by_kind["HybridMachineTemplate"][VM_DEPLOYMENT]["spec"]["template"]["spec"]
    assert (vm["vm"]["vcpus"], vm["vm"]["memoryMiB"], vm["vm"]["disks"][0]["image"]) == (1, 64, VM_IMAGE)
    assert vm["network"]["interfaces"][0]["bridge"] == "pxebr0"
    assert "baremetal" in by_kind["HybridMachineTemplate"][METAL_DEPLOYMENT]["spec"]["template"]["spec"]
    cluster = next(iter(by_kind["HybridCluster"].values()))["spec"]
    assert cluster["hypervisorSelector"] == {"matchLabels": {"capfleet.dev/hypervisor-pool": HYPERVISOR_POOL}}
    assert cluster["netbox"]["cluster"] == NETBOX_VM_CLUSTER


def test_half_the_workers_are_vms_unless_told_and_never_more_than_all() -> None:
    assert parse_args(["--machines", "101"]).vms == 50
    assert parse_args(["--machines", "10", "--vms", "0"]).vms == 0
    with pytest.raises(SystemExit):
        parse_args(["--machines", "10", "--vms", "11"])


def test_the_figures_printed_before_the_deletion_have_no_deletion_row() -> None:
    fleet = SideResult("capfleet", 10, 30.0, 0.0, {}, idle_writes_per_minute=0)
    lines = format_results(SideResult("floor", 10, 10.0, 20.0), fleet).splitlines()
    assert lines[1].split()[-3:] == ["10.0", "30.0", "3.00"]
    assert not any(line.startswith("time to all deleted") for line in lines)


async def test_a_poll_takes_a_busy_api_server_for_not_yet_and_any_other_error_for_an_error() -> None:
    answers: list[BaseException | bool] = [
        KubeError(504, "Timeout", "busy"),
        KubeError(429, "Too", "many"),
        TimeoutError(),
        KubeError(0, "Unavailable", "GET /apis/cluster.x-k8s.io/v1beta2/machines: TimeoutError"),
        True,
    ]

    async def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    tolerant = patient(probe)
    assert [await tolerant() for _ in range(5)] == [False, False, False, False, True]
    answers.append(KubeError(403, "Forbidden", "no"))
    with pytest.raises(KubeError, match="403"):
        await tolerant()
