"""What the lab adds to every node VM it makes, before kubeadm runs: a report each minute on the serial
console, and no transparent huge pages.

Under QEMU without KVM a guest zeroes each 2 MiB huge page instruction by instruction; a control-plane
guest was seen stalled (RCU stalls in `do_huge_pmd_anonymous_page`, in kube-apiserver's page faults)
while its etcd member, a learner, never caught up with the leader. Production nodes keep the kernel's
default; only the lab's TCG guests turn huge pages off.

The report (one `capfleet-guest-stats` line a minute; the suites keep the consoles as artifacts) says what
a slow `kubeadm` competed with: load, free memory, the clock source (see labimage.py), the busiest
processes, and, on control planes, the local etcd member's own view from its metrics endpoint (leader or
learner, proposals committed and applied, bytes from its peers), which tells a learner that receives
nothing from one that applies slowly;
and for the etcd and kube-apiserver static pods, how many times each ran and the last line it logged (a
joining node's own API server is not reachable from outside until it works, and its journal is not on the
console).
"""

from __future__ import annotations

from typing import Any

import yaml

STATS_SCRIPT = "/usr/local/sbin/capfleet-guest-stats"
# kubeadm's etcd serves its metrics on 127.0.0.1:2381 (plain HTTP); bash's /dev/tcp needs no curl.
ETCD_METRICS = (
    "etcd_server_is_leader",
    "etcd_server_is_learner",
    "etcd_server_proposals_committed_total",
    "etcd_server_proposals_applied_total",
    "etcd_server_proposals_pending",
    "etcd_server_snapshot_apply_in_progress_total",
    "etcd_network_peer_received_bytes_total",
    "etcd_mvcc_db_total_size_in_bytes",
)
STATS_SCRIPT_CONTENT = f"""#!/bin/bash
# capfleet lab: each minute, what this guest is busy with and what its etcd member (if any) has done.
interval=${{1:-60}} etcd_metrics_port=${{2:-2381}} pod_logs=${{3:-/var/log/pods}}
while sleep "$interval"; do
  etcd=none
  if exec 3<>"/dev/tcp/127.0.0.1/$etcd_metrics_port"; then
    printf 'GET /metrics HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3
    etcd=$(awk '/^({"|".join(ETCD_METRICS)})[ {{]/ {{sub(/^etcd_/, ""); printf "%s=%s ", $1, $2}}' <&3)
    exec 3<&-
  fi 2>/dev/null
  echo "capfleet-guest-stats up=$(cut -d' ' -f1 /proc/uptime) load=$(cut -d' ' -f1-3 /proc/loadavg)" \\
    "memavail_mib=$(awk '/^MemAvailable:/ {{print int($2/1024)}}' /proc/meminfo)" \\
    "clock=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)" \\
    "busiest=$(ps -eo comm=,pcpu= --sort=-pcpu | head -4 | tr -s ' ' | paste -sd,)" \\
    "etcd: $etcd"
  # A static pod that does not answer: how often it ran and the last thing it logged. The kubelet names
  # each run's log after its restart count (<n>.log) and keeps only the latest two.
  for pod in etcd kube-apiserver; do
    for dir in "$pod_logs"/kube-system_"$pod"-*/"$pod"; do
      latest=$(ls "$dir" 2>/dev/null | sed -n 's/^\\([0-9][0-9]*\\)\\.log$/\\1/p' | sort -n | tail -1)
      [ -n "$latest" ] || continue
      last=$(tail -n 1 "$dir/$latest.log" | cut -c1-300)
      echo "capfleet-guest-stats $pod: runs=$((latest + 1)) last: $last"
    done
  done
done
"""
START_STATS = f"setsid {STATS_SCRIPT} </dev/null >/dev/console 2>&1 &"
NO_HUGE_PAGES = "echo never > /sys/kernel/mm/transparent_hugepage/enabled"
LAB_COMMANDS = (NO_HUGE_PAGES, START_STATS)


def with_lab_guest(manifest: str) -> str:
    """`manifest` whose control-plane and worker nodes run LAB_COMMANDS (and get STATS_SCRIPT) first."""
    documents = [d for d in yaml.safe_load_all(manifest) if d]
    for document in documents:
        if document["kind"] == "KubeadmControlPlane":
            spec = document["spec"]["kubeadmConfigSpec"]
        elif document["kind"] == "KubeadmConfigTemplate":
            spec = document["spec"]["template"]["spec"]
        else:
            continue
        add_lab_commands(spec)
    return yaml.safe_dump_all(documents, sort_keys=False)


def add_lab_commands(spec: dict[str, Any]) -> None:
    script = {"path": STATS_SCRIPT, "permissions": "0755", "content": STATS_SCRIPT_CONTENT}
    spec["files"] = [*spec.get("files", []), script]
    spec["preKubeadmCommands"] = [*LAB_COMMANDS, *spec.get("preKubeadmCommands", [])]
