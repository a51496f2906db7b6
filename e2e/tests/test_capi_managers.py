"""The real Cluster API managers run in the harness and accept capfleet's kinds as infrastructure.

The test plays a minimal infrastructure provider by hand (it marks the HybridCluster provisioned; no
glue operator runs), so what it checks is CAPI's side of the contract with capfleet's CRDs: the core
manager adopts the HybridCluster, KubeadmControlPlane clones a HybridMachine from the
HybridMachineTemplate, the kubeadm bootstrap manager writes the `kubeadm init` cloud-config, and once a
stand-in workload API server holds kube-system/kubeadm-config, the Cluster reports its control plane
initialized. It also checks that the clusterctl the harness builds is the pinned version.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from capfleet import resources
from capfleet.api import kinds
from capfleet.kube import Invalid, Kube, Obj
from capfleet_e2e.capi import CapiManagers
from capfleet_e2e.capibin import CAPI_VERSION, clusterctl_binary
from capfleet_e2e.waiting import eventually
from capfleet_e2e.workload import CLUSTER_NAME_LABEL, WorkloadAPIServer

pytestmark = pytest.mark.integration

KUBEADM_CONTROL_PLANES = resources.KCPS
KUBEADM_CONFIGS = resources.KUBEADM_CONFIGS
INFRA_GROUP = kinds.HYBRID_CLUSTER.resource.group
KUBERNETES_VERSION = "v1.33.0"
# Generous: the managers requeue on their own clock (KCP every 20 s until initialized, the cluster cache
# retries a failed connection after 30 s), and the machine is shared with other test runs.
WITHIN = 240.0
VM = {"vcpus": 2, "memoryMiB": 2048, "disks": [{"sizeGiB": 20, "image": "debian-12"}]}


def condition(obj: Obj | None, type_: str) -> dict[str, Any] | None:
    if obj is None:
        return None
    conditions: list[dict[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), None)


def owned_by(obj: Obj, kind: str, name: str) -> dict[str, Any] | None:
    refs: list[dict[str, Any]] = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r["kind"] == kind and r["name"] == name), None)


async def create_cluster(kube: Kube, namespace: str, name: str, workload: WorkloadAPIServer) -> None:
    """What a user writes for a one-node kubeadm control plane on capfleet infrastructure."""
    await kube.create(resources.SECRETS, workload.ca_secret(namespace), namespace)
    await kube.create(
        kinds.HYBRID_CLUSTER.resource,
        {
            "apiVersion": kinds.HYBRID_CLUSTER.resource.api_version,
            "kind": "HybridCluster",
            "metadata": {"name": name},
            "spec": {"controlPlaneEndpoint": {"host": workload.host, "port": workload.port}},
        },
        namespace,
    )
    await kube.create(
        kinds.HYBRID_MACHINE_TEMPLATE.resource,
        {
            "apiVersion": kinds.HYBRID_MACHINE_TEMPLATE.resource.api_version,
            "kind": "HybridMachineTemplate",
            "metadata": {"name": f"{name}-control-plane"},
            "spec": {"template": {"spec": {"vm": VM}}},
        },
        namespace,
    )
    await kube.create(
        KUBEADM_CONTROL_PLANES,
        {
            "apiVersion": KUBEADM_CONTROL_PLANES.api_version,
            "kind": "KubeadmControlPlane",
            "metadata": {"name": f"{name}-control-plane"},
            "spec": {
                "replicas": 1,
                "version": KUBERNETES_VERSION,
                "machineTemplate": {
                    "spec": {
                        "infrastructureRef": {
                            "apiGroup": INFRA_GROUP,
                            "kind": "HybridMachineTemplate",
                            "name": f"{name}-control-plane",
                        }
                    }
                },
                "kubeadmConfigSpec": {"format": "cloud-config"},
            },
        },
        namespace,
    )
    await kube.create(
        resources.CAPI_CLUSTERS,
        {
            "apiVersion": resources.CAPI_CLUSTERS.api_version,
            "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "HybridCluster", "name": name},
                "controlPlaneRef": {
                    "apiGroup": KUBEADM_CONTROL_PLANES.group,
                    "kind": "KubeadmControlPlane",
                    "name": f"{name}-control-plane",
                },
            },
        },
        namespace,
    )


async def test_kubeadm_control_plane_initializes_on_capfleet_infrastructure(
    capi: CapiManagers, kube: Kube, namespace: str
) -> None:
    name = "hybrid"
    with WorkloadAPIServer(capi.control_plane, name) as workload:
        await create_cluster(kube, namespace, name, workload)
        # The infrastructure provider's part: the HybridCluster is ready.
        await kube.patch_status(
            kinds.HYBRID_CLUSTER.resource, name, {"initialization": {"provisioned": True}}, namespace
        )

        async def adopted() -> Obj | None:
            hybrid = await kube.get(kinds.HYBRID_CLUSTER.resource, name, namespace)
            assert hybrid is not None
            ref = owned_by(hybrid, "Cluster", name)
            return hybrid if ref and ref.get("controller") else None

        hybrid = await eventually("the Cluster to own the HybridCluster", adopted, WITHIN)
        assert hybrid["metadata"]["labels"][CLUSTER_NAME_LABEL] == name

        async def control_plane_machine() -> Obj | None:
            machines = await kube.list(
                resources.CAPI_MACHINES, namespace, label_selector=f"{CLUSTER_NAME_LABEL}={name}"
            )
            return machines[0] if machines else None

        machine = await eventually("KubeadmControlPlane to create a Machine", control_plane_machine, WITHIN)
        assert "cluster.x-k8s.io/control-plane" in machine["metadata"]["labels"]
        assert machine["spec"]["version"] == KUBERNETES_VERSION
        infra_ref = machine["spec"]["infrastructureRef"]
        config_ref = machine["spec"]["bootstrap"]["configRef"]
        assert infra_ref["apiGroup"] == INFRA_GROUP
        assert infra_ref["kind"] == "HybridMachine"
        assert config_ref["kind"] == "KubeadmConfig"

        hybrid_machine = await kube.get(kinds.HYBRID_MACHINE.resource, infra_ref["name"], namespace)
        assert hybrid_machine is not None, "the HybridMachine is created before its Machine"
        assert hybrid_machine["spec"]["vm"] == VM, "cloned from the HybridMachineTemplate"
        assert hybrid_machine["metadata"]["labels"][CLUSTER_NAME_LABEL] == name
        assert await kube.get(KUBEADM_CONFIGS, config_ref["name"], namespace) is not None

        async def bootstrap_secret_name() -> str | None:
            current = await kube.get(resources.CAPI_MACHINES, machine["metadata"]["name"], namespace)
            assert current is not None
            secret_name: str | None = current["spec"]["bootstrap"].get("dataSecretName")
            return secret_name

        secret_name = await eventually("the Machine's bootstrap data secret", bootstrap_secret_name, WITHIN)
        secret = await kube.get(resources.SECRETS, secret_name, namespace)
        assert secret is not None
        assert base64.b64decode(secret["data"]["format"]).decode() == "cloud-config"
        cloud_config = base64.b64decode(secret["data"]["value"]).decode()
        assert cloud_config.startswith("## template: jinja\n#cloud-config"), cloud_config[:200]
        assert "kubeadm init" in cloud_config
        assert f"{workload.host}:{workload.port}" in cloud_config, "the endpoint reaches kubeadm's config"

        kubeconfig = await kube.get(resources.SECRETS, f"{name}-kubeconfig", namespace)
        assert kubeconfig is not None, "KCP writes the workload kubeconfig from the cluster CA"
        assert workload.server in base64.b64decode(kubeconfig["data"]["value"]).decode()

        cluster = await kube.get(resources.CAPI_CLUSTERS, name, namespace)
        initialized = condition(cluster, "ControlPlaneInitialized")
        assert initialized is None or initialized["status"] != "True", "not before kubeadm init is done"

        # "kubeadm init" finishes on the (imaginary) first control-plane node.
        workload.upload_kubeadm_config(KUBERNETES_VERSION)

        async def control_plane_initialized() -> Obj | None:
            current = await kube.get(resources.CAPI_CLUSTERS, name, namespace)
            found = condition(current, "ControlPlaneInitialized")
            # CAPI may write the condition and status.initialization in separate updates: wait for both.
            flag = (
                ((current or {}).get("status") or {}).get("initialization", {}).get("controlPlaneInitialized")
            )
            return current if found and found["status"] == "True" and flag is True else None

        cluster = await eventually("the Cluster's ControlPlaneInitialized", control_plane_initialized, WITHIN)
        assert cluster["status"]["initialization"]["controlPlaneInitialized"] is True
        capi.check_alive()


def test_managers_serve_conversion_for_every_capi_crd(capi: CapiManagers) -> None:
    """Every CAPI CRD converts through the webhook of the manager that owns its group."""
    selector = "cluster.x-k8s.io/provider in (cluster-api,bootstrap-kubeadm,control-plane-kubeadm)"
    listing = json.loads(capi.kubectl("get", "crd", "-l", selector, "-o", "json"))
    ports = {m.webhook_port for m in capi.managers.values()}
    converted = {crd["metadata"]["name"]: crd["spec"]["conversion"] for crd in listing["items"]}
    assert len(converted) == 17, sorted(converted)
    for name, conversion in converted.items():
        assert conversion["strategy"] == "Webhook", name
        url = urllib.parse.urlsplit(conversion["webhook"]["clientConfig"]["url"])
        assert (url.scheme, url.hostname, url.path) == ("https", "127.0.0.1", "/convert"), name
        assert url.port in ports, name


async def test_capi_admission_webhooks_check_objects(capi: CapiManagers, kube: Kube, namespace: str) -> None:
    """The validating webhook of the core manager refuses a Cluster the CRD schema alone would accept."""
    cluster = {
        "apiVersion": resources.CAPI_CLUSTERS.api_version,
        "kind": "Cluster",
        "metadata": {"name": "no-refs"},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}}},
    }
    with pytest.raises(Invalid) as refused:
        await kube.create(resources.CAPI_CLUSTERS, cluster, namespace)
    assert "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set" in str(
        refused.value
    )


def test_clusterctl_reports_the_pinned_version(tmp_path: Path) -> None:
    # No version check (it would ask the Internet for newer releases) and no writes to ~/.config.
    env = {**os.environ, "CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run(
        [str(clusterctl_binary()), "version", "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    client = json.loads(result.stdout)["clusterctl"]
    assert client["gitVersion"] == CAPI_VERSION
    assert (client["major"], client["minor"]) == ("1", CAPI_VERSION.split(".")[1])
    assert client["gitTreeState"] == "clean"
