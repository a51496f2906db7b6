"""Unit tests of the harness's own parts that need no cluster: PKI, child processes, CRD labelling.

They run in the unit suite, so a broken harness shows up before any integration test starts.
"""

from __future__ import annotations

import http.server
import ipaddress
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from capfleet_e2e import bytecode
from capfleet_e2e.crds import kustomization_labels
from capfleet_e2e.labguest import LAB_COMMANDS, STATS_SCRIPT, STATS_SCRIPT_CONTENT, with_lab_guest
from capfleet_e2e.nodesite import WORKER_NICENESS, lower_worker_priority, readyz_failure
from capfleet_e2e.pki import generate_pki
from capfleet_e2e.processes import Component, ComponentError, wait_for


def test_pki_files_are_private_and_the_serving_cert_has_the_sans(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path / "pki")
    for path in (
        pki.ca_cert,
        pki.ca_key,
        pki.serving_cert,
        pki.serving_key,
        pki.sa_private_key,
        pki.sa_public_key,
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert {"localhost", "kubernetes.default.svc"} <= set(sans.get_values_for_type(x509.DNSName))


def test_a_component_that_dies_early_reports_its_log(tmp_path: Path) -> None:
    script = "import sys; print('boom: bad flag'); sys.exit(3)"
    component = Component("dying", [sys.executable, "-c", script], tmp_path)
    with pytest.raises(ComponentError, match=r"(?s)dying exited with code 3.*boom: bad flag"):
        wait_for("never", lambda: None, timeout=30, watch=[component])


def test_stop_terminates_a_running_component(tmp_path: Path) -> None:
    script = "import sys, time; print('up', flush=True); time.sleep(60)"
    component = Component("sleeper", [sys.executable, "-c", script], tmp_path)
    wait_for("output", lambda: True if "up" in component.log_path.read_text() else None, timeout=30)
    component.stop(timeout=5)
    assert component.process.returncode is not None


def test_wait_for_times_out_with_the_last_error() -> None:
    def probe() -> None:
        raise ConnectionRefusedError("nobody home")

    with pytest.raises(ComponentError, match="nobody home"):
        wait_for("a listener", probe, timeout=0.3)


def test_kustomization_labels_merges_pairs_and_common_labels() -> None:
    kustomization = {
        "commonLabels": {"a": "1"},
        "labels": [
            {"pairs": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
            {"includeSelectors": True, "pairs": {"b": "2"}},
        ],
    }
    assert kustomization_labels(kustomization) == {"a": "1", "cluster.x-k8s.io/v1beta2": "v1beta2", "b": "2"}


def test_readyz_failures_name_the_failed_checks_or_say_nothing_answered() -> None:
    failed_etcd = (
        "kubectl get --raw /readyz?verbose failed (1): Error from server (InternalError): "
        'an error on the server ("[+]ping ok\\n[+]log ok\\n[-]etcd failed: reason withheld\\n'
        '[+]informer-sync ok\\n[-]etcd-readiness failed: reason withheld\\nreadyz check failed") '
        "has prevented the request from succeeding"
    )
    assert readyz_failure(failed_etcd) == "failed checks: etcd, etcd-readiness"
    refused = (
        "kubectl get --raw /readyz?verbose failed (1): The connection to the server 127.0.0.1:41234 was "
        "refused - did you specify the right host or port?"
    )
    assert readyz_failure(refused).startswith("unreachable: The connection to the server 127.0.0.1:41234")


def test_lab_commands_run_first_on_control_planes_and_workers_and_parse_as_shell() -> None:
    manifest = yaml.safe_dump_all(
        [
            {"kind": "KubeadmControlPlane", "spec": {"kubeadmConfigSpec": {"preKubeadmCommands": ["a"]}}},
            {"kind": "KubeadmConfigTemplate", "spec": {"template": {"spec": {"files": [{"path": "/x"}]}}}},
            {"kind": "Cluster", "spec": {}},
        ]
    )
    kcp, workers, cluster = yaml.safe_load_all(with_lab_guest(manifest))
    assert kcp["spec"]["kubeadmConfigSpec"]["preKubeadmCommands"] == [*LAB_COMMANDS, "a"]
    assert [f["path"] for f in kcp["spec"]["kubeadmConfigSpec"]["files"]] == [STATS_SCRIPT]
    assert workers["spec"]["template"]["spec"]["preKubeadmCommands"] == list(LAB_COMMANDS)
    assert [f["path"] for f in workers["spec"]["template"]["spec"]["files"]] == ["/x", STATS_SCRIPT]
    assert cluster == {"kind": "Cluster", "spec": {}}
    for command in LAB_COMMANDS:
        subprocess.run(["sh", "-n", "-c", command], check=True)


def test_guest_stats_report_the_local_etcd_members_progress_and_none_without_one(tmp_path: Path) -> None:
    script = tmp_path / "stats"
    script.write_text(STATS_SCRIPT_CONTENT)
    metrics = (
        "# HELP etcd_server_is_learner ...\n"
        "etcd_server_is_learner 1\n"
        "etcd_server_proposals_applied_total 1234\n"
        'etcd_network_peer_received_bytes_total{From="8e9e05c52164694d"} 5.5e+06\n'
        "etcd_server_has_leader 1\n"
    )

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.encode() if self.path == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pods = tmp_path / "pods"
    try:
        [with_etcd] = run_stats_once(script, server.server_address[1], pods)
    finally:
        server.shutdown()
        server.server_close()
    assert with_etcd.startswith("capfleet-guest-stats up="), with_etcd
    assert "busiest=" in with_etcd
    assert "memavail_mib=" in with_etcd
    # The script reads the clock source as this host names it (nothing where sysfs does not say).
    clock = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    assert f"clock={clock.read_text().strip() if clock.exists() else ''} " in with_etcd
    etcd = with_etcd.split("etcd: ", 1)[1].split()
    assert etcd == [
        "server_is_learner=1",
        "server_proposals_applied_total=1234",
        'network_peer_received_bytes_total{From="8e9e05c52164694d"}=5.5e+06',
    ]
    # Nothing listening (a worker, or etcd not started yet): the line still comes, saying so, and a
    # static pod that left logs says how many times it ran and what it said last.
    logs = pods / "kube-system_etcd-node-1_0123" / "etcd"
    logs.mkdir(parents=True)
    # The kubelet keeps the latest two runs' logs, named by restart count: runs are counted from the name.
    (logs / "10.log").write_text('2026-11-27T07:01:00Z stderr F {"level":"fatal","msg":"bye"}\n')
    (logs / "9.log").write_text("2026-11-27T07:00:00Z stderr F the run before\n")
    stats, etcd_pod = run_stats_once(script, server.server_address[1], pods, lines=2)
    assert stats.endswith("etcd: none")
    assert etcd_pod == f"capfleet-guest-stats etcd: runs=11 last: {(logs / '10.log').read_text().strip()}"


def run_stats_once(script: Path, port: int, pods: Path, lines: int = 1) -> list[str]:
    """The first `lines` the stats script prints at a 0.1 s interval, reading etcd's metrics from `port`
    and static pods' logs under `pods`."""
    argv = ["bash", str(script), "0.1", str(port), str(pods)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        printed = [process.stdout.readline().strip() for _ in range(lines)]
        process.kill()
    return printed


def test_lab_qemus_other_than_control_planes_are_reniced_thread_by_thread(tmp_path: Path) -> None:
    qemu = tmp_path / "qemu-system-x86_64"
    qemu.symlink_to(sys.executable)
    threads = (
        "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    )
    worker, control_plane = (
        # Each in a session of its own, as libvirt starts QEMUs.
        subprocess.Popen(
            [str(qemu), "-c", threads, "-name", f"guest=ns_c-{role}-x1,debug-threads=on"],
            start_new_session=True,
        )
        for role in ("md-0-abc", "control-plane")
    )
    try:
        worker_tasks = Path(f"/proc/{worker.pid}/task")
        wait_for("the worker's second thread", lambda: len(list(worker_tasks.iterdir())) == 2 or None, 10)
        done: set[int] = set()
        lower_worker_priority(done)
        tasks = [int(t.name) for t in worker_tasks.iterdir()]
        assert [os.getpriority(os.PRIO_PROCESS, t) for t in tasks] == [WORKER_NICENESS] * 2
        assert set(tasks) <= done
        assert os.getpriority(os.PRIO_PROCESS, control_plane.pid) == 0
        groups = {p.pid: Path(f"/proc/{p.pid}/autogroup") for p in (worker, control_plane)}
        if groups[worker.pid].exists():  # kernels built with autogroup scheduling
            assert groups[worker.pid].read_text().split()[-2:] == ["nice", str(WORKER_NICENESS)]
            assert groups[control_plane.pid].read_text().split()[-2:] == ["nice", "0"]
    finally:
        for process in (worker, control_plane):
            process.kill()
            process.wait()


def test_operators_get_bytecode_compiled_beforehand_under_the_labs_own_prefix() -> None:
    env = bytecode.compiled_env()
    prefix = Path(env["PYTHONPYCACHEPREFIX"])
    assert env["PYTHONDONTWRITEBYTECODE"] == ""
    probe = "import capfleet, libvirt_vm.handlers, kopf; print(capfleet.__cached__, kopf.__cached__)"
    # Bytecode is never written by this probe: what it finds was compiled by compiled_env.
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **env, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    cached = [Path(p) for p in done.stdout.split()]
    assert all(p.is_relative_to(prefix) and p.is_file() for p in cached), cached
