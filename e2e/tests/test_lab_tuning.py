"""The lab's TCG tuning (labtuning.py) is a patch on the rendered templates, not part of them: what it sets
is what the real kubelet and kubeadm take, its probe patches reach every static pod through the real
kubeadm, and the shipped templates carry none of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet_e2e import clusterctl_templates, labtuning
from capfleet_e2e.kubebin import ensure_kube_binaries, repo_root
from capfleet_e2e.labtuning import HA, LIGHT_CONTROL_PLANES, LONE, TcgTuning, tuned
from capfleet_e2e.site import render
from capfleet_images.nodeimage.versions import NodeImageVersions

pytestmark = pytest.mark.integration  # the real kubeadm and kubelet, built from Go modules

VALUES = {
    "CLUSTER_NAME": "c1",
    "NAMESPACE": "default",
    "KUBERNETES_VERSION": NodeImageVersions().kubernetes,
    "CONTROL_PLANE_MACHINE_COUNT": "1",
    "WORKER_MACHINE_COUNT": "1",
    "CONTROL_PLANE_ENDPOINT_HOST": "10.20.0.5",
    "CAPFLEET_NODE_IP_RANGE": "10.20.0.10-10.20.0.60",
    "CAPFLEET_NODE_GATEWAY": "10.20.0.1",
    "CAPFLEET_NAMESERVER": "10.20.0.1",
    "CAPFLEET_VM_IMAGE": "node.qcow2",
}
STATIC_POD_PHASES = {
    "kube-apiserver": ["control-plane", "apiserver"],
    "kube-controller-manager": ["control-plane", "controller-manager"],
    "kube-scheduler": ["control-plane", "scheduler"],
    "etcd": ["etcd", "local"],
}
PROBES = ("livenessProbe", "startupProbe")
# What only the lab sets: none of it may be in a shipped template.
LAB_ONLY = ("unsafe-no-fsync", "leader-elect-", "housekeeping-interval", "capfleet-patches", "timeouts:")


def vm_objects(tuning: TcgTuning | None) -> dict[str, dict[str, Any]]:
    text = (repo_root() / clusterctl_templates.TEMPLATES_DIR / "cluster-template-vm.yaml").read_text()
    rendered = render(text, VALUES)
    if tuning is not None:
        rendered = tuned(rendered, tuning)
    return {o["kind"]: o for o in yaml.safe_load_all(rendered) if o}


def kcp_spec(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objects["KubeadmControlPlane"]["spec"]["kubeadmConfigSpec"]
    return spec


def node_registrations(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    workers = objects["KubeadmConfigTemplate"]["spec"]["template"]["spec"]
    kcp = kcp_spec(objects)
    return [
        kcp["initConfiguration"]["nodeRegistration"],
        kcp["joinConfiguration"]["nodeRegistration"],
        workers["joinConfiguration"]["nodeRegistration"],
    ]


def test_the_shipped_templates_carry_none_of_the_labs_tuning() -> None:
    for flavor in clusterctl_templates.FLAVORS:
        text = (repo_root() / flavor.path).read_text()
        assert [word for word in LAB_ONLY if word in text] == [], flavor.file
    assert "unsafe-no-fsync" in yaml.safe_dump(kcp_spec(vm_objects(LONE)))


def test_the_lighter_control_planes_are_what_the_real_kubelet_and_kubeadm_take() -> None:
    """The HA suite's lighter guests: each kubelet's extra arguments parse with the real kubelet, and init
    skips phases the real kubeadm has; untuned, init skips only the join command's printing."""
    binaries = ensure_kube_binaries(binaries=("kubeadm", "kubelet"))
    objects = vm_objects(LIGHT_CONTROL_PLANES)
    for registration in node_registrations(objects):
        args = {a["name"]: a["value"] for a in registration["kubeletExtraArgs"]}
        assert args["housekeeping-interval"] == "60s"
        assert args["provider-id"] == "{{ ds.meta_data.provider_id }}"  # the template's own, kept
        flags = [f"--{name}={value}" for name, value in args.items()]
        result = subprocess.run(
            [str(binaries / "kubelet"), *flags, "--help"], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
    skipped = kcp_spec(objects)["initConfiguration"]["skipPhases"]
    assert skipped == ["show-join-command", "addon/kube-proxy", "addon/coredns"]
    assert set(skipped) <= init_phases(binaries / "kubeadm")
    assert kcp_spec(vm_objects(None))["initConfiguration"]["skipPhases"] == ["show-join-command"]


def test_the_tuning_keeps_the_templates_files_and_sets_kube_vips_lease() -> None:
    untuned, tuned_ = kcp_spec(vm_objects(None)), kcp_spec(vm_objects(HA))
    paths = [f["path"] for f in tuned_["files"]]
    assert paths[: len(untuned["files"])] == [f["path"] for f in untuned["files"]]
    [vip] = [f["content"] for f in tuned_["files"] if f["path"] == labtuning.KUBE_VIP_MANIFEST]
    [container] = yaml.safe_load(vip)["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["vip_leaseduration"], env["vip_renewdeadline"], env["vip_retryperiod"]) == ("30", "20", "4")
    assert env["address"] == "{{ ds.meta_data.control_plane_endpoint_host }}"
    args = {a["name"]: a["value"] for a in tuned_["clusterConfiguration"]["scheduler"]["extraArgs"]}
    assert args["leader-elect-lease-duration"] == "120s"


def test_the_probe_patches_reach_every_static_pod_through_the_real_kubeadm(tmp_path: Path) -> None:
    """The tuning's patch files, read by the real kubeadm as InitConfiguration's patches directory: each
    control-plane manifest kubeadm writes (dry run, offline) has the probes."""
    kubeadm = ensure_kube_binaries(binaries=("kubeadm",)) / "kubeadm"
    tuning = LONE.but(
        liveness_failure_threshold=61,
        startup_failure_threshold=121,
        probe_timeout_seconds=59,
        api_server_readiness_period_seconds=11,
        probe_period_seconds=29,
    )
    spec = kcp_spec(vm_objects(tuning))
    directory = spec["initConfiguration"]["patches"]["directory"]
    assert spec["joinConfiguration"]["patches"]["directory"] == directory
    patches = tmp_path / "patches"
    patches.mkdir()
    for file in spec["files"]:
        if file["path"].startswith(directory + "/"):
            (patches / Path(file["path"]).name).write_text(file["content"])
    config = tmp_path / "kubeadm.yaml"
    config.write_text(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
        f"localAPIEndpoint: {{advertiseAddress: 192.0.2.10}}\npatches: {{directory: {patches}}}\n---\n"
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n"
        f"kubernetesVersion: {VALUES['KUBERNETES_VERSION']}\n"
    )
    manifests = tmp_path / "manifests"
    env = {**os.environ, "KUBEADM_INIT_DRYRUN_DIR": str(manifests)}
    for component, phase in STATIC_POD_PHASES.items():
        result = subprocess.run(
            [str(kubeadm), "init", "phase", *phase, "--config", str(config), "--dry-run"],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        [container] = yaml.safe_load((manifests / f"{component}.yaml").read_text())["spec"]["containers"]
        probes = {k: (container[k]["failureThreshold"], container[k]["timeoutSeconds"]) for k in PROBES}
        assert probes == {"livenessProbe": (61, 59), "startupProbe": (121, 59)}, component
        assert container["livenessProbe"]["periodSeconds"] == 29, component
        if component == "kube-apiserver":
            readiness = container["readinessProbe"]
            assert (readiness["periodSeconds"], readiness["timeoutSeconds"]) == (11, 59)
            assert readiness["httpGet"]["path"] == "/readyz"


def init_phases(kubeadm: Path) -> set[str]:
    """`kubeadm init`'s phases as --skip-phases names them ("addon/coredns"), from its help."""
    text = subprocess.run([str(kubeadm), "init", "--help"], capture_output=True, text=True, check=True).stdout
    table = text.split("following phases:", 1)[1].split("```")[1]
    phases: set[str] = set()
    parent = ""
    for line in table.splitlines():
        if not line.strip():
            continue
        name = line.split()[0]
        if name.startswith("/"):
            phases.add(parent + name)
        else:
            parent = name
            phases.add(name)
    return phases
