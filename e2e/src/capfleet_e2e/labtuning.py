"""How the lab makes the shipped cluster templates survive QEMU without KVM: a patch on the rendered
manifest, not variables in the templates users read.

A control plane under TCG on two shared cores answers everything late: etcd's fsync stalls every API call,
kubeadm's waits and the static pods' probes run out, the controller manager and scheduler miss their
leader-election renewals and restart in a loop, and kube-vip, which exits when it misses a renewal, drops
the VIP of a lone control plane whose API server still answers. Production clusters keep kubeadm's,
etcd's and kube-vip's defaults (and the templates' own); only the lab's throw-away clusters get these:

- etcd without fsync (`unsafe-no-fsync`), and optionally a slower heartbeat and election (the HA suite);
- kubeadm's API-call and wait timeouts stretched, and its skipped phases chosen (the HA suite skips the
  kube-proxy and CoreDNS add-ons, which nothing it checks needs);
- the controller manager's and scheduler's leader election stretched, and renewed less often (each renewal
  is an etcd write);
- the static pods' liveness, startup and readiness probes loosened, through kubeadm's patches directory;
- the kubelet's cAdvisor housekeeping made rarer (a third of an idle control plane's kubelet CPU);
- kube-vip's Lease made long: with nobody to fail over to, it costs nothing (the HA suite sets a shorter one
  to bound its failover).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

PATCHES_DIR = "/etc/kubernetes/capfleet-patches"
KUBE_VIP_MANIFEST = "/etc/kubernetes/manifests/kube-vip.yaml"
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@dataclass(frozen=True)
class TcgTuning:
    """The lab's settings for one suite's clusters; `lone()` is what every suite but the HA one uses."""

    kubeadm_api_call_seconds: int = 600
    kubeadm_wait_seconds: int = 1200
    leader_elect: tuple[str, str, str] = (
        "120s",
        "90s",
        "20s",
    )  # lease duration, renew deadline, retry period
    etcd_unsafe_no_fsync: bool = True
    etcd_heartbeat_ms: int | None = None
    etcd_election_ms: int | None = None
    liveness_failure_threshold: int = 60
    startup_failure_threshold: int = 120
    probe_timeout_seconds: int = 60
    probe_period_seconds: int = 10
    api_server_readiness_period_seconds: int = 10
    kubelet_housekeeping_interval: str | None = None
    skip_phases: tuple[str, ...] = ("show-join-command",)
    vip_lease: tuple[int, int, int] = (120, 90, 10)  # seconds: duration, renew deadline, retry period

    def but(self, **changes: Any) -> TcgTuning:
        return dataclasses.replace(self, **changes)

    def etcd_args(self) -> dict[str, str]:
        args = {"unsafe-no-fsync": str(self.etcd_unsafe_no_fsync).lower()}
        if self.etcd_heartbeat_ms is not None:
            args["heartbeat-interval"] = str(self.etcd_heartbeat_ms)
        if self.etcd_election_ms is not None:
            args["election-timeout"] = str(self.etcd_election_ms)
        return args

    def leader_election_args(self) -> dict[str, str]:
        duration, deadline, retry = self.leader_elect
        return {
            "leader-elect-lease-duration": duration,
            "leader-elect-renew-deadline": deadline,
            "leader-elect-retry-period": retry,
        }

    def timeouts(self, *, join: bool) -> dict[str, int]:
        wait = self.kubeadm_wait_seconds
        found = {
            "kubernetesAPICallSeconds": self.kubeadm_api_call_seconds,
            "etcdAPICallSeconds": self.kubeadm_api_call_seconds,
            "controlPlaneComponentHealthCheckSeconds": wait,
            "kubeletHealthCheckSeconds": wait,
        }
        return found | ({"tlsBootstrapSeconds": wait, "discoverySeconds": wait} if join else {})

    def probe_patch(self, component: str) -> dict[str, Any]:
        """kubeadm's strategic-merge patch of one static pod's probes."""
        timeout = self.probe_timeout_seconds
        container: dict[str, Any] = {
            "name": component,
            "livenessProbe": {
                "periodSeconds": self.probe_period_seconds,
                "failureThreshold": self.liveness_failure_threshold,
                "timeoutSeconds": timeout,
            },
            "startupProbe": {"failureThreshold": self.startup_failure_threshold, "timeoutSeconds": timeout},
        }
        if component == "kube-apiserver":
            period = self.api_server_readiness_period_seconds
            container["readinessProbe"] = {"periodSeconds": period, "timeoutSeconds": timeout}
        return {"spec": {"containers": [container]}}

    def vip_env(self) -> dict[str, str]:
        duration, deadline, retry = self.vip_lease
        return {
            "vip_leaseduration": str(duration),
            "vip_renewdeadline": str(deadline),
            "vip_retryperiod": str(retry),
        }


LONE = TcgTuning()
# The VIP moves within 30 s + 4 s of its holder's loss, inside the HA suite's 45 s bound.
HA = LONE.but(vip_lease=(30, 20, 4))
# Three control-plane guests on two cores: every guest's idle work counts against the joining one. Profiles
# of an idle control plane put a third of its kubelet's CPU in cAdvisor's housekeeping and the TLS
# handshakes of its probes; kube-proxy rewrites iptables on every endpoint change of a join, and neither it
# nor CoreDNS serves anything the HA suite checks (its Nodes need no Service to be Ready).
LIGHT_CONTROL_PLANES = HA.but(
    kubelet_housekeeping_interval="60s",
    probe_period_seconds=30,
    api_server_readiness_period_seconds=30,
    skip_phases=("show-join-command", "addon/kube-proxy", "addon/coredns"),
)


def set_args(args: list[dict[str, str]] | None, values: dict[str, str]) -> list[dict[str, str]]:
    """kubeadm's v1beta2 `extraArgs` list (name, value) with `values` set, in place of any same name."""
    kept = [a for a in args or [] if a["name"] not in values]
    return [*kept, *({"name": k, "value": v} for k, v in values.items())]


def kubeadm_specs(documents: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each kubeadm config spec of the manifest, as ("control-plane" | "worker", spec)."""
    for document in documents:
        if document["kind"] == "KubeadmControlPlane":
            yield "control-plane", document["spec"]["kubeadmConfigSpec"]
        elif document["kind"] == "KubeadmConfigTemplate":
            yield "worker", document["spec"]["template"]["spec"]


def tune_node_registration(configuration: dict[str, Any], tuning: TcgTuning) -> None:
    if tuning.kubelet_housekeeping_interval is not None:
        registration = configuration.setdefault("nodeRegistration", {})
        interval = {"housekeeping-interval": tuning.kubelet_housekeeping_interval}
        registration["kubeletExtraArgs"] = set_args(registration.get("kubeletExtraArgs"), interval)


def tune_control_plane(spec: dict[str, Any], tuning: TcgTuning) -> None:
    cluster = spec.setdefault("clusterConfiguration", {})
    local = cluster.setdefault("etcd", {}).setdefault("local", {})
    local["extraArgs"] = set_args(local.get("extraArgs"), tuning.etcd_args())
    for component in ("controllerManager", "scheduler"):
        section = cluster.setdefault(component, {})
        section["extraArgs"] = set_args(section.get("extraArgs"), tuning.leader_election_args())
    init = spec.setdefault("initConfiguration", {})
    init["skipPhases"] = list(tuning.skip_phases)
    init["timeouts"] = tuning.timeouts(join=False)
    for configuration in (init, spec.setdefault("joinConfiguration", {})):
        configuration["patches"] = {"directory": PATCHES_DIR}
    patches = [
        {
            "path": f"{PATCHES_DIR}/{component}+strategic.yaml",
            "permissions": "0644",
            "content": yaml.safe_dump(tuning.probe_patch(component), sort_keys=False),
        }
        for component in STATIC_PODS
    ]
    files = [tune_kube_vip(f, tuning) if f["path"] == KUBE_VIP_MANIFEST else f for f in spec.get("files", [])]
    spec["files"] = [*files, *patches]
    tune_node_registration(init, tuning)


def tune_kube_vip(file: dict[str, Any], tuning: TcgTuning) -> dict[str, Any]:
    pod = yaml.safe_load(file["content"])
    [container] = pod["spec"]["containers"]
    values = tuning.vip_env()
    container["env"] = [{**e, "value": values.get(e["name"], e.get("value"))} for e in container["env"]]
    return {**file, "content": yaml.safe_dump(pod, sort_keys=False)}


def tuned(manifest: str, tuning: TcgTuning = LONE) -> str:
    """The rendered cluster manifest with the lab's TCG settings applied."""
    documents = [d for d in yaml.safe_load_all(manifest) if d]
    for role, spec in kubeadm_specs(documents):
        if role == "control-plane":
            tune_control_plane(spec, tuning)
        join = spec.setdefault("joinConfiguration", {})
        join["timeouts"] = tuning.timeouts(join=True)
        tune_node_registration(join, tuning)
    return yaml.safe_dump_all(documents, sort_keys=False)
