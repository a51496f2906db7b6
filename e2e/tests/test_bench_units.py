"""Unit tests of the IPAM benchmark's pure parts: /proc parsing, request counting, duplicates, the table.

The benchmark's verdict (zero duplicates, every claim bound) and its figures come from these functions,
so they are checked on hand-made input in the unit suite, without a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from capfleet_e2e.bench.measure import (
    ScenarioResult,
    check_allocations,
    cpu_by_label,
    cpu_since,
    format_table,
    parse_cpu_seconds,
    parse_memory,
    parse_tree_stat,
    process_label,
    ratios,
    read_cpu_by_label,
    read_proc,
    report,
    requests_of,
)
from capfleet_e2e.bench.reference import reference_argv, reference_crds


def claim(name: str, ref: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"addressRef": {"name": ref}} if ref else {}}


def address(name: str, ip: str, claim_name: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"address": ip, "claimRef": {"name": claim_name or name}}}


def test_cpu_seconds_are_counted_after_the_last_parenthesis_of_the_command_name() -> None:
    fields = ["S", *["0"] * 10, "250", "50", *["0"] * 30]  # fields 3.. ; utime=250, stime=50 ticks
    stat = "4242 (weird) name)) " + " ".join(fields)
    assert parse_cpu_seconds(stat, 100) == pytest.approx(3.0)


def test_a_trees_cpu_counts_live_descendants_and_what_each_reaped_once_by_label() -> None:
    fields = ["S", "77", *["0"] * 9, "100", "50", "30", "20", *["0"] * 30]  # ppid 77; 100+50+30+20 ticks
    parent, cpu = parse_tree_stat("9 (gunicorn: worker) " + " ".join(fields), 100)
    assert parent == 77
    assert cpu == pytest.approx(2.0)
    processes = {
        1: (0, 5.0, "bench"),
        10: (1, 1.0, "NetBox"),
        11: (10, 2.0, "NetBox"),
        12: (10, 4.0, "PostgreSQL"),
        20: (1, 8.0, "etcd"),
        30: (99, 16.0, "stranger"),
    }
    assert cpu_by_label(processes, 10) == {"NetBox": 3.0, "PostgreSQL": 4.0}
    assert cpu_by_label(processes, 1) == {"bench": 5.0, "NetBox": 3.0, "PostgreSQL": 4.0, "etcd": 8.0}
    assert cpu_by_label(processes, 42) == {}  # gone
    later = {"bench": 6.0, "NetBox": 13.0, "PostgreSQL": 4.5, "etcd": 8.0, "sushy-emulator": 2.0}
    assert list(cpu_since(later, cpu_by_label(processes, 1)).items()) == [
        ("NetBox", 10.0), ("sushy-emulator", 2.0), ("bench", 1.0), ("PostgreSQL", 0.5), ("etcd", 0.0)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "label"),
    [
        (["/root/.cache/capfleet/kube/v1.33.13/bin/kube-apiserver", "--etcd-servers=x"], "kube-apiserver"),
        (["/venv/bin/python", "-S", "-m", "gunicorn", "--chdir", "x"], "NetBox"),
        (["/venv/bin/python", "-m", "capi_machine_glue", "--standalone"], "capi-machine-glue"),
        (["/venv/bin/python3", "/venv/bin/sushy-emulator", "--config", "c"], "sushy-emulator"),
        (["postgres: netbox netbox 127.0.0.1(45150) idle"], "PostgreSQL"),
        (["/usr/lib/postgresql/15/bin/postgres", "-D", "x"], "PostgreSQL"),
        (["/usr/bin/redis-server 127.0.0.1:52539"], "Redis"),
        (["sshd: root@notty"], "sshd"),
        (["/usr/bin/qemu-system-x86_64", "-name", "guest=bench-fleet_x"], "QEMU (VM workers)"),
        (["qemu-system-x86"], "QEMU (VM workers)"),  # an exited one, by its /proc/<pid>/comm
        (["/venv/bin/python", "-m", "capfleet_e2e.libvirt.reaper", "ip", "netns"], "QEMU (VM workers)"),
        ([""], "?"),
    ],
)
def test_processes_are_labelled_by_program_module_or_script(argv: list[str], label: str) -> None:
    assert process_label(argv) == label


BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\ninput()"


def test_this_process_tree_counts_a_busy_child_under_its_label() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE)
    try:
        label = process_label([sys.executable, "-c", BURN])
        deadline = time.monotonic() + 30
        while read_cpu_by_label(child.pid).get(label, 0.0) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(read_cpu_by_label(os.getpid()).values()) >= read_proc(os.getpid()).cpu_seconds + 0.5
    finally:
        child.communicate(b"\n", timeout=30)


def test_peak_rss_is_vmhwm_and_rss_vmrss_in_bytes() -> None:
    status = "Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t   2048 kB\nVmRSS:\t  1024 kB\n"
    assert parse_memory(status) == 2048 * 1024
    assert parse_memory(status, "VmRSS") == 1024 * 1024
    with pytest.raises(ValueError, match="VmHWM"):
        parse_memory("Name:\tx\n")


def test_read_proc_of_this_process() -> None:
    sample = read_proc(os.getpid())
    assert sample.cpu_seconds > 0
    assert sample.peak_rss_bytes >= sample.rss_bytes > 1024 * 1024


def test_only_the_providers_requests_count_and_each_audit_id_once() -> None:
    me, other = "system:serviceaccount:bench-reference:bench-reference", "admin"
    events: list[dict[str, Any]] = [
        {
            "auditID": "a",
            "user": {"username": me},
            "verb": "watch",
            "userAgent": "provider/v1",
            "stage": "ResponseStarted",
        },
        {
            "auditID": "a",
            "user": {"username": me},
            "verb": "watch",
            "userAgent": "provider/v1",
            "stage": "ResponseComplete",
        },
        {"auditID": "b", "user": {"username": me}, "verb": "create", "userAgent": "provider/v1"},
        {
            "auditID": "c",
            "user": {"username": me},
            "verb": "patch",
            "userAgent": "kopf/1.37",
            "objectRef": {"resource": "hybridmachines", "subresource": "status"},
        },
        {"auditID": "d", "user": {"username": other}, "verb": "create", "userAgent": "capfleet-bench"},
        {"auditID": "e", "verb": "get"},
        # a watch that started before these lines and ends among them: counted where it started
        {"auditID": "f", "user": {"username": me}, "verb": "watch", "stage": "ResponseComplete"},
    ]
    requests = requests_of(events, me)
    assert requests.total == 3
    assert requests.by_verb == {"create": 1, "patch": 1, "watch": 1}
    assert requests.user_agents == ["kopf/1.37", "provider/v1"]
    assert requests.by_target == {"watch ?": 1, "create ?": 1, "patch hybridmachines/status": 1}


def test_a_clean_allocation() -> None:
    outcome = check_allocations(
        [claim("c1", "c1"), claim("c2", "c2")], [address("c1", "10.0.0.2"), address("c2", "10.0.0.3")]
    )
    assert outcome.ok
    assert (outcome.bound, outcome.duplicates) == (2, 0)


def test_duplicates_unbound_claims_and_dangling_references_are_all_reported() -> None:
    claims = [claim("c1", "c1"), claim("c2", "c2"), claim("c3", None), claim("c4", "gone"), claim("c5", "c1")]
    addresses = [address("c1", "10.0.0.2"), address("c2", "10.0.0.2"), address("stray", "10.0.0.2", "x")]
    outcome = check_allocations(claims, addresses)
    assert not outcome.ok
    assert outcome.bound == 2
    assert outcome.duplicates == 2  # three IPAddresses hold 10.0.0.2: two too many
    assert outcome.unbound == ["c3"]
    assert any("c4: addressRef gone does not exist" in p for p in outcome.problems)
    assert any("c5: IPAddress c1 belongs to claim c1" in p for p in outcome.problems)
    assert any("10.0.0.2 held by 3 IPAddresses: c1, c2, stray" in p for p in outcome.problems)


def result(name: str, seconds: float, requests: float, duplicates: int = 0) -> ScenarioResult:
    return ScenarioResult(
        name,
        name,
        100,
        seconds_to_all_bound=seconds,
        claims_per_second=100 / seconds,
        requests_per_claim=requests,
        cpu_seconds=1.0,
        cpu_burst_seconds=0.0,
        peak_rss_mib=50.0,
        bound=100,
        duplicates=duplicates,
    )


def test_ratios_are_capfleet_over_reference_and_none_when_undefined() -> None:
    ours, theirs = result("capfleet", 2.0, 3.0), result("reference", 4.0, 4.0)
    theirs.cpu_burst_seconds = 0.0
    ours.peak_rss_mib = None
    ratio = ratios(ours, theirs)
    assert ratio["seconds_to_all_bound"] == pytest.approx(0.5)
    assert ratio["claims_per_second"] == pytest.approx(2.0)
    assert ratio["requests_per_claim"] == pytest.approx(0.75)
    assert ratio["cpu_burst_seconds"] is None  # reference is 0
    assert ratio["peak_rss_mib"] is None  # capfleet's is missing
    assert ratio["duplicates"] is None


def test_the_table_has_a_row_per_provider_and_the_ratio() -> None:
    ours, theirs = result("capfleet", 2.0, 3.0), result("reference", 4.0, 4.0)
    table = format_table([ours, theirs], ratios(ours, theirs)).splitlines()
    assert "time to all bound (s)" in table[0]
    assert table[2].split()[:3] == ["capfleet", "2.00", "50.0"]
    assert table[3].split()[:3] == ["reference", "4.00", "25.0"]
    assert table[4].split()[:3] == ["capfleet/reference", "0.50", "2.00"]
    assert report([ours], None, claims=100)["results"][0]["duplicates"] == 0


def test_a_result_is_ok_only_with_every_claim_bound_and_no_duplicate() -> None:
    assert result("x", 1.0, 1.0).ok
    assert not result("x", 1.0, 1.0, duplicates=1).ok
    failed = result("x", 1.0, 1.0)
    failed.error = "TimeoutError"
    assert not failed.ok
    unbound = result("x", 1.0, 1.0)
    unbound.bound = 99
    assert not unbound.ok


def test_the_reference_runs_without_webhooks_or_leader_election_on_loopback(tmp_path: Path) -> None:
    argv = reference_argv(tmp_path / "bin", tmp_path / "kc", "ns", 1234, 5678)
    assert "--webhook-port=0" in argv
    assert "--leader-elect=false" in argv
    assert "--health-probe-bind-address=127.0.0.1:1234" in argv
    assert "--diagnostics-address=127.0.0.1:5678" in argv
    assert "--namespace=ns" in argv


def test_reference_crds_get_no_conversion_webhook(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPFLEET_CACHE", str(tmp_path))
    crds = tmp_path / "ipam-in-cluster" / "v9" / "crds"
    crds.mkdir(parents=True)
    (crds / "pool.yaml").write_text(
        "kind: CustomResourceDefinition\nmetadata: {name: inclusterippools.ipam.cluster.x-k8s.io}\n"
        "spec: {conversion: {strategy: Webhook}}\n"
    )
    [crd] = reference_crds("v9")
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    assert crd["metadata"]["labels"] == {"clusterctl.cluster.x-k8s.io/move-hierarchy": ""}
