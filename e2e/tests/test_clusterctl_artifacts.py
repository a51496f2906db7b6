"""deploy/clusterctl/: the provider components and the cluster templates, as clusterctl reads them.

Without a cluster: infrastructure-components.yaml is what `make clusterctl-components` renders from the
all-in-one overlay, holds exactly one Namespace, labels every object with the provider label, names
every operator container `manager`, and gives every `${VAR}` a default; each cluster template uses only
CAPI v1beta2 and capfleet kinds and feeds the kubelet its provider ID from the NoCloud meta-data.

With the session's control plane (CAPI's and capfleet's CRDs installed) and the real clusterctl (built
from Go modules): the components with their defaults substituted by `clusterctl generate yaml`, and
clusterctl's own provider processing (`clusterctl generate provider` from a local repository, as
`clusterctl init` would read it), pass a server-side dry-run apply; so does each template rendered by
`clusterctl generate cluster --from`; and clusterctl refuses to render a template with a variable unset.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet.runtime import VERSION
from capfleet_e2e.clusterctl_components import (
    CONTAINER,
    INFRASTRUCTURE,
    IPAM,
    OUTPUT_DIR,
    PROVIDER_LABEL_KEY,
    PROVIDERS,
    VARIABLES,
    Provider,
    render,
    variables,
)
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import Kubectl, ensure_kube_binaries, repo_root
from capfleet_e2e.kustomize import build, documents
from capfleet_images.nodeimage.versions import NodeImageVersions

CLUSTERCTL_DIR = Path("deploy") / "clusterctl"
FIELD_MANAGER = "capfleet-clusterctl-tests"
NAMESPACE = "capfleet-system"
KUBERNETES_VERSION = NodeImageVersions().kubernetes
FLAVORS = {
    "": "cluster-template.yaml",
    "vm": "cluster-template-vm.yaml",
    "baremetal": "cluster-template-baremetal.yaml",
}
# What a user sets for the templates; clusterctl sets the rest from its flags.
TEMPLATE_VALUES = {
    "CONTROL_PLANE_ENDPOINT_HOST": "10.20.0.5",
    "CAPFLEET_NODE_IP_RANGE": "10.20.0.10-10.20.0.60",
    "CAPFLEET_NODE_GATEWAY": "10.20.0.1",
    "CAPFLEET_NAMESERVER": "10.20.0.2",
    "CAPFLEET_VM_IMAGE": "ubuntu-24.04-kube-v1.33.0.qcow2",
    "CAPFLEET_IMAGE_URL": "https://images.example.invalid/capfleet-node-v1.33.0.raw",
    "CAPFLEET_BMC_NETWORK": "10.20.0.0/24",
    "CAPFLEET_IMAGE_CHECKSUM": "https://images.example.invalid/capfleet-node-v1.33.0.raw.sha256",
}
FROM_FLAGS = {"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT"}
FROM_FLAGS |= {"WORKER_MACHINE_COUNT"}
PROVIDER_ID = "{{ ds.meta_data.provider_id }}"


def components_text(provider: Provider = INFRASTRUCTURE) -> str:
    return (repo_root() / OUTPUT_DIR / provider.file).read_text()


def components(provider: Provider = INFRASTRUCTURE) -> list[dict[str, Any]]:
    return documents(components_text(provider))


def template_text(flavor: str) -> str:
    return (repo_root() / CLUSTERCTL_DIR / FLAVORS[flavor]).read_text()


# --- without a cluster ---------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_components_are_generated_from_the_all_in_one_overlay(provider: Provider) -> None:
    assert components_text(provider) == render(provider), "stale: run `make clusterctl-components`"


def test_the_two_providers_split_the_all_in_one_overlay_with_nothing_lost_or_shared_but_the_namespace() -> (
    None
):
    overlay = documents(build(repo_root() / "deploy" / "overlays" / "all-in-one"))
    overlay += documents(build(repo_root() / "deploy" / "overlays" / "console"))

    def key(o: dict[str, Any]) -> tuple[str, str, str]:
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

    infrastructure, ipam = ({key(o) for o in components(p)} for p in (INFRASTRUCTURE, IPAM))
    assert infrastructure & ipam == {("Namespace", "", NAMESPACE)}
    assert infrastructure | ipam == {key(o) for o in overlay}
    assert {name for kind, _, name in ipam if kind == "CustomResourceDefinition"} == {
        "hybridippools.ipam.capfleet.dev",
        "netboxippools.ipam.capfleet.dev",
    }
    assert {name for kind, _, name in ipam if kind == "Deployment"} == {"capfleet-ipam-address-manager"}


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_components_have_one_namespace_the_provider_label_and_manager_containers(provider: Provider) -> None:
    objects = components(provider)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"] == [NAMESPACE]
    unlabelled = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if o["metadata"]["labels"].get(PROVIDER_LABEL_KEY) != provider.name
    ]
    assert unlabelled == []
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(deployments) == len(provider.images)
    for deployment in deployments:
        containers = deployment["spec"]["template"]["spec"]["containers"]
        assert containers[0]["name"] == CONTAINER, deployment["metadata"]["name"]
        boot_front = deployment["metadata"]["name"] == "capfleet-baremetal-provision-manager"
        assert [c["name"] for c in containers[1:]] == (["boot"] if boot_front else [])
        assert len({c["image"] for c in containers}) == 1, "the boot front follows the operator's image tag"


def test_every_components_variable_has_a_default_and_is_documented() -> None:
    found = {**variables(components_text(INFRASTRUCTURE)), **variables(components_text(IPAM))}
    assert sorted(name for name, has_default in found.items() if not has_default) == []
    assert set(found) == set(VARIABLES)
    readme = (repo_root() / "deploy" / "README.md").read_text()
    assert sorted(name for name in VARIABLES if name not in readme) == []


def test_the_variable_scan_sees_missing_defaults() -> None:
    assert variables("a: ${A}\nb: ${B:=x}\nc: ${C:=${D}}\n") == {"A": False, "B": True, "C": True, "D": False}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_cluster_template_uses_v1beta2_and_capfleet_kinds(flavor: str) -> None:
    objects = documents(template_text(flavor))
    api_versions = {o["kind"]: o["apiVersion"] for o in objects}
    assert api_versions == {
        "Cluster": "cluster.x-k8s.io/v1beta2",
        "HybridCluster": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "HybridIPPool": "ipam.capfleet.dev/v1alpha1",
        "KubeadmControlPlane": "controlplane.cluster.x-k8s.io/v1beta2",
        "HybridMachineTemplate": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "MachineDeployment": "cluster.x-k8s.io/v1beta2",
        "KubeadmConfigTemplate": "bootstrap.cluster.x-k8s.io/v1beta2",
    }
    machines = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] == "HybridMachineTemplate"
    }
    control_plane = machines["${CLUSTER_NAME}-control-plane"]
    workers = machines["${CLUSTER_NAME}-md-0"]
    expected = {"": ("vm", "baremetal"), "vm": ("vm", "vm"), "baremetal": ("baremetal", "baremetal")}[flavor]
    assert (expected[0] in control_plane, expected[1] in workers) == (True, True)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_kubelets_get_their_provider_id_from_the_nocloud_meta_data(flavor: str) -> None:
    objects = {o["kind"]: o for o in documents(template_text(flavor))}
    for registration in node_registrations(objects):
        assert {"name": "provider-id", "value": PROVIDER_ID} in registration["kubeletExtraArgs"]
    kcp = objects["KubeadmControlPlane"]["spec"]["kubeadmConfigSpec"]
    workers = objects["KubeadmConfigTemplate"]["spec"]["template"]["spec"]
    assert kcp["format"] == workers["format"] == "cloud-config"


def node_registrations(objects: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodeRegistration of the control plane's init and join and of the workers' join."""
    kcp = objects["KubeadmControlPlane"]["spec"]["kubeadmConfigSpec"]
    workers = objects["KubeadmConfigTemplate"]["spec"]["template"]["spec"]
    return [
        kcp["initConfiguration"]["nodeRegistration"],
        kcp["joinConfiguration"]["nodeRegistration"],
        workers["joinConfiguration"]["nodeRegistration"],
    ]


SHELL_OPERATORS = ("&&", "||", ";", "|")


def kubeadm_commands(script: str) -> list[list[str]]:
    """The kubeadm command lines of a template script, `$$` unescaped and shell variables given values."""
    commands = []
    for line in script.replace("$$", "$").splitlines():
        words = list(itertools.takewhile(lambda w: w not in SHELL_OPERATORS, line.split()))
        if words[:1] == ["kubeadm"]:
            commands.append([w.replace('"$config"', "/run/kubeadm/config.yaml") for w in words])
    return commands


def test_every_kubeadm_command_of_the_vm_templates_scripts_parses_with_the_real_kubeadm() -> None:
    """The retry scripts run only after a failed init or join, so a wrong flag there shows only on a slow
    host's bad day (the first exercise of the init retry failed on "unknown flag: --config")."""
    kubeadm = ensure_kube_binaries(binaries=("kubeadm",)) / "kubeadm"
    objects = {o["kind"]: o for o in documents(template_text("vm"))}
    files = [
        *objects["KubeadmControlPlane"]["spec"]["kubeadmConfigSpec"]["files"],
        *objects["KubeadmConfigTemplate"]["spec"]["template"]["spec"]["files"],
    ]
    scripts = [f["content"] for f in files if f["path"].startswith("/usr/")]
    commands = [c for script in scripts for c in kubeadm_commands(script)]
    # init's five phases, a control-plane join's four, a worker's reset and join
    assert len(commands) >= 11, commands
    for command in commands:
        # Flags are parsed before --help is honoured: an unknown one fails, a known one prints the help.
        result = subprocess.run(
            [str(kubeadm), *command[1:], "--help"], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"{' '.join(command)}: {result.stderr.strip()}"


# --- with clusterctl and the control plane ----------------------------------------------------------------


@pytest.fixture(scope="module")
def clusterctl() -> Path:
    from capfleet_e2e.capibin import clusterctl_binary  # imported here: it builds CAPI on first use

    return clusterctl_binary()


@pytest.fixture
def isolated_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment with no clusterctl configuration, no version check, and no variables but PATH."""
    home = tmp_path / "home"
    home.mkdir()
    yield {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
    }
    shutil.rmtree(home, ignore_errors=True)


def run_clusterctl(
    binary: Path, env: dict[str, str], config: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args, "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def empty_config(tmp_path: Path) -> Path:
    config = tmp_path / "clusterctl.yaml"
    config.write_text("{}\n")
    return config


def dry_run_apply(kubectl: Kubectl, rendered: str) -> str:
    """Server-side dry-run apply. Conflicts are forced: other tests of the session may have applied the
    same objects for real under another field manager (test_deploy_apply.py changes an image)."""
    return kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        f"--field-manager={FIELD_MANAGER}",
        "--dry-run=server",
        "-f",
        "-",
        stdin=rendered,
    )


@pytest.fixture(scope="module")
def fleet_base(control_plane: Cluster) -> Kubectl:
    """deploy/base applied for real (the Namespace the components' objects need)."""
    kubectl = control_plane.kubectl
    base = (repo_root() / "deploy" / "base").glob("*.yaml")
    for path in sorted(p for p in base if p.name != "kustomization.yaml"):
        # Forced: the RBAC tests of the session apply the base's admission policies under their own manager.
        kubectl(
            "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", str(path)
        )
    return kubectl


@pytest.mark.integration
@pytest.mark.timeout(1800)  # the first use builds CAPI's binaries
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_components_with_defaults_pass_server_side_dry_run(
    clusterctl: Path, isolated_env: dict[str, str], fleet_base: Kubectl, tmp_path: Path, provider: Provider
) -> None:
    result = run_clusterctl(
        clusterctl,
        isolated_env,
        empty_config(tmp_path),
        "generate",
        "yaml",
        "--from",
        str(repo_root() / OUTPUT_DIR / provider.file),
    )
    assert result.returncode == 0, result.stderr
    rendered = result.stdout
    assert "${" not in rendered
    images = {
        c["image"]
        for o in documents(rendered)
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"docker.io/capfleet/{image}:v{VERSION}" for image in provider.images}
    output = dry_run_apply(fleet_base, rendered)
    first = provider.operators[0]
    assert f"deployment.apps/capfleet-{first}-manager serverside-applied (server dry run)" in output


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_clusterctl_reads_the_components_as_capfleets_infrastructure_and_ipam_providers(
    clusterctl: Path, isolated_env: dict[str, str], fleet_base: Kubectl, tmp_path: Path
) -> None:
    version = f"v{VERSION}"
    entries = []
    for provider in PROVIDERS:
        release = tmp_path / "repository" / provider.name / version
        release.mkdir(parents=True)
        files = (provider.file, "metadata.yaml", *(FLAVORS.values() if provider is INFRASTRUCTURE else ()))
        for name in files:
            shutil.copy(repo_root() / CLUSTERCTL_DIR / name, release / name)
        entries.append(
            {"name": "capfleet", "type": provider.type, "url": f"file://{release / provider.file}"}
        )
    config = tmp_path / "clusterctl.yaml"
    config.write_text(yaml.safe_dump({"providers": entries}))
    env = {
        **isolated_env,
        "CAPFLEET_IMAGE_TAG": "v0.2.0",
        "CAPFLEET_LIBVIRT_VM_IMAGE_TAG": "v9.9.9",
        "CAPFLEET_VERBOSE": "true",
    }

    def generate(flag: str) -> list[dict[str, Any]]:
        result = run_clusterctl(clusterctl, env, config, "generate", "provider", flag, f"capfleet:{version}")
        assert result.returncode == 0, result.stderr
        dry_run_apply(fleet_base, result.stdout)
        return documents(result.stdout)

    infrastructure, ipam = generate("--infrastructure"), generate("--ipam")
    deployments = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]
        for o in (*infrastructure, *ipam)
        if o["kind"] == "Deployment"
    }
    libvirt = deployments["capfleet-libvirt-vm-manager"]
    assert libvirt["image"] == "docker.io/capfleet/libvirt-vm:v9.9.9", "one operator's tag alone"
    assert deployments["capfleet-netbox-device-manager"]["image"] == "docker.io/capfleet/netbox-device:v0.2.0"
    assert deployments["capfleet-ipam-address-manager"]["image"] == "docker.io/capfleet/ipam-address:v0.2.0"
    assert {"name": "CAPFLEET_VERBOSE", "value": "true"} in libvirt["env"]
    assert all(o["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"] == "" for o in (*infrastructure, *ipam))


def render_template(
    binary: Path, env: dict[str, str], config: Path, flavor: str, namespace: str
) -> subprocess.CompletedProcess[str]:
    return run_clusterctl(
        binary,
        env,
        config,
        "generate",
        "cluster",
        f"capfleet-{flavor or 'hybrid'}",
        "--from",
        str(repo_root() / CLUSTERCTL_DIR / FLAVORS[flavor]),
        "--kubernetes-version",
        KUBERNETES_VERSION,
        "--control-plane-machine-count",
        "3",
        "--worker-machine-count",
        "2",
        "--target-namespace",
        namespace,
    )


@pytest.mark.integration
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_cluster_template_renders_with_clusterctl_and_passes_server_side_dry_run(
    clusterctl: Path, isolated_env: dict[str, str], control_plane: Cluster, tmp_path: Path, flavor: str
) -> None:
    config = empty_config(tmp_path)
    listed = run_clusterctl(
        clusterctl, isolated_env, config, "generate", "cluster", "x", "--list-variables",
        "--from", str(repo_root() / CLUSTERCTL_DIR / FLAVORS[flavor]), "--target-namespace", "x",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    required = listed.stdout.split("Required Variables:")[1].split("Optional Variables:")[0].split()[1::2]
    assert set(required) - FROM_FLAGS <= set(TEMPLATE_VALUES), "a required variable this test does not set"

    namespace = f"clusterctl-{flavor or 'hybrid'}"
    kubectl = control_plane.kubectl
    kubectl("create", "namespace", namespace)
    try:
        env = {**isolated_env, **TEMPLATE_VALUES}
        result = render_template(clusterctl, env, config, flavor, namespace)
        assert result.returncode == 0, result.stderr
        assert "${" not in result.stdout
        objects = documents(result.stdout)
        assert {o["metadata"]["namespace"] for o in objects} == {namespace}
        kcp = next(o for o in objects if o["kind"] == "KubeadmControlPlane")
        assert (kcp["spec"]["replicas"], kcp["spec"]["version"]) == (3, KUBERNETES_VERSION)
        output = dry_run_apply(kubectl, result.stdout)
        assert output.count("serverside-applied (server dry run)") == len(objects)
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.mark.integration
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("flavor", FLAVORS)
def test_clusterctl_refuses_a_template_with_a_variable_unset(
    clusterctl: Path, isolated_env: dict[str, str], tmp_path: Path, flavor: str
) -> None:
    missing = "CAPFLEET_NODE_GATEWAY"
    env = {**isolated_env, **{k: v for k, v in TEMPLATE_VALUES.items() if k != missing}}
    result = render_template(clusterctl, env, empty_config(tmp_path), flavor, "default")
    assert result.returncode != 0
    assert missing in result.stderr
