"""The real Cluster API v1.11 managers, run against the test control plane as a real install would be.

capfleet's glue implements CAPI's infrastructure contract; the only convincing test of a contract is the
other side of it. `CapiManagers` runs CAPI's three managers (core, kubeadm bootstrap, kubeadm control
plane; built by hack/build-capi.sh) as subprocesses on loopback, and wires them in like `clusterctl init`
would, minus the Deployments and cert-manager:

- one test CA signs a serving certificate for 127.0.0.1 that all three webhook servers use;
- CAPI's CRDs are switched from the harness's strategy None to conversion by webhook: each CRD group is
  converted by the manager that owns it (cluster/addons/ipam/runtime by core, bootstrap by the kubeadm
  bootstrap manager, controlplane by the kubeadm control-plane manager), at https://127.0.0.1:<port>/convert;
- the Mutating/ValidatingWebhookConfigurations of each provider (`config/webhook/manifests.yaml` from the
  module, named with the prefix its kustomize layer adds) get a `url` clientConfig on 127.0.0.1.

Start-up waits for each manager's /readyz and then proves the apiserver really converts through the
webhooks: v1beta1 objects of each provider are created with `--dry-run=server` (v1beta1 -> v1beta2 for
admission and storage, and back) and `kubectl get clusters.v1beta1.cluster.x-k8s.io -A` succeeds.
`stop` removes the webhook configurations and puts the CRDs back to strategy None before stopping the
managers, so the control plane works without them again.

The managers watch every namespace, with leader election off and default feature gates (ClusterTopology,
RuntimeSDK off). Their logs go to <artifacts>/capi/<manager>.log. controller-runtime's webhook server has
no bind-address flag, so the webhook ports listen on all interfaces; everything else binds 127.0.0.1.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from capfleet_e2e import crds
from capfleet_e2e.capibin import CAPI_VERSION, ensure_capi_binaries
from capfleet_e2e.controlplane import START_TIMEOUT, ControlPlane, new_log_dir
from capfleet_e2e.pki import CertificateAuthority, write_private
from capfleet_e2e.processes import Component, free_port, wait_for

__all__ = ["PROVIDERS", "CapiManagers", "Manager", "Provider"]

HOST = "127.0.0.1"
CONVERSION_PATH = "/convert"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
KUBECTL_TIMEOUT = 60.0


@dataclass(frozen=True)
class Provider:
    """One of CAPI's managers: its binary, the CRD groups it converts, where its webhooks are described."""

    name: str
    binary: str
    crd_groups: tuple[str, ...]
    webhook_manifests: str  # path inside the sigs.k8s.io/cluster-api module
    name_prefix: str  # the namePrefix of the provider's config/default kustomization
    args: tuple[str, ...] = ()


PROVIDERS = (
    Provider(
        "core",
        "capi-manager",
        (
            "cluster.x-k8s.io",
            "addons.cluster.x-k8s.io",
            "ipam.cluster.x-k8s.io",
            "runtime.cluster.x-k8s.io",
        ),
        "config/webhook/manifests.yaml",
        "capi-",
    ),
    Provider(
        "kubeadm-bootstrap",
        "kubeadm-bootstrap-manager",
        ("bootstrap.cluster.x-k8s.io",),
        "bootstrap/kubeadm/config/webhook/manifests.yaml",
        "capi-kubeadm-bootstrap-",
        # Join tokens live 15 min by default and are kept alive only while the workload API answers; a
        # TCG server writing its image, booting and preloading images takes longer, and a workload API
        # starved of CPU stops answering for minutes (in a run, the token expired 24 min after it was
        # made and `kubeadm join` got Unauthorized). Users set the same with KUBEADM_BOOTSTRAP_TOKEN_TTL.
        ("--bootstrap-token-ttl=90m",),
    ),
    Provider(
        "kubeadm-control-plane",
        "kubeadm-control-plane-manager",
        ("controlplane.cluster.x-k8s.io",),
        "controlplane/kubeadm/config/webhook/manifests.yaml",
        "capi-kubeadm-control-plane-",
    ),
)

# v1beta1 objects (one per provider) created with --dry-run=server: the apiserver converts each to
# v1beta2 for the admission webhooks and for storage, and the answer back to v1beta1.
_CONVERSION_PROBES: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": "capfleet-conversion-probe", "namespace": "default"},
        "spec": {
            "controlPlaneRef": {
                "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmControlPlane",
                "name": "capfleet-conversion-probe",
            }
        },
    },
    {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "capfleet-conversion-probe", "namespace": "default"},
        "spec": {"format": "cloud-config"},
    },
    {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": "capfleet-conversion-probe", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "version": "v1.33.0",
            "machineTemplate": {
                "infrastructureRef": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                    "kind": "HybridMachineTemplate",
                    "name": "capfleet-conversion-probe",
                }
            },
            "kubeadmConfigSpec": {},
        },
    },
)


@dataclass
class Manager:
    """A running manager: its ports (all on 127.0.0.1) and its process."""

    provider: Provider
    webhook_port: int
    health_port: int
    diagnostics_port: int
    component: Component

    @property
    def webhook_url(self) -> str:
        return f"https://{HOST}:{self.webhook_port}"

    @property
    def readyz_url(self) -> str:
        return f"http://{HOST}:{self.health_port}/readyz"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.diagnostics_port}/metrics"


def http_ok(url: str) -> bool | None:
    """True if GET `url` (plain http on loopback) answers 200 "ok", else None: a probe for `wait_for`."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return True if response.read().strip() == b"ok" else None
    except urllib.error.HTTPError as e:
        e.close()
        return None


def _ca_bundle(ca: CertificateAuthority) -> str:
    return base64.b64encode(ca.cert_pem).decode()


def provider_for_group(group: str) -> Provider:
    """The provider whose manager serves conversion for CRDs of API group `group`."""
    for provider in PROVIDERS:
        if group in provider.crd_groups:
            return provider
    raise KeyError(f"no Cluster API provider serves API group {group}")


def webhook_converted_crds(
    capi_crds: Iterable[crds.Crd], urls: dict[str, str], ca: CertificateAuthority
) -> list[crds.Crd]:
    """`capi_crds` with conversion by webhook at `urls[provider name]` + /convert, trusting `ca`."""
    converted = []
    for crd in capi_crds:
        crd = copy.deepcopy(crd)
        url = urls[provider_for_group(crd["spec"]["group"]).name] + CONVERSION_PATH
        crd["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1", "v1beta1"],
                "clientConfig": {"url": url, "caBundle": _ca_bundle(ca)},
            },
        }
        converted.append(crd)
    return converted


def webhook_configurations(
    module_dir: Path, provider: Provider, url: str, ca: CertificateAuthority
) -> list[dict[str, Any]]:
    """The provider's admission webhook configurations, each webhook called at `url` + its path."""
    configurations = []
    for doc in yaml.safe_load_all((module_dir / provider.webhook_manifests).read_text()):
        if not doc or doc.get("kind") not in WEBHOOK_KINDS:
            continue
        doc["metadata"]["name"] = provider.name_prefix + doc["metadata"]["name"]
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url + path, "caBundle": _ca_bundle(ca)}
        configurations.append(doc)
    return configurations


class CapiManagers:
    """CAPI's core, kubeadm bootstrap and kubeadm control-plane managers; use as a context manager."""

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        version: str = CAPI_VERSION,
        start_timeout: float = START_TIMEOUT,
    ):
        self.control_plane = control_plane
        self.kubectl = control_plane.kubectl
        self.version = version
        self.start_timeout = start_timeout
        self.ca = CertificateAuthority.generate("capfleet-capi-webhook-ca")
        self.managers: dict[str, Manager] = {}
        self.webhook_configurations: list[dict[str, Any]] = []
        self.startup_seconds = 0.0
        self.log_dir: Path | None = None
        self._crds_converted = False
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-capi-"))
        self.cert_dir = self._tmp / "webhook-certs"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the managers, wire in their webhooks, check conversion; on failure undo all and re-raise."""
        began = time.monotonic()
        try:
            bin_dir = ensure_capi_binaries(self.version)
            module_dir = crds.capi_module_dir(self.version)
            self._write_serving_cert()
            self.log_dir = new_log_dir("capi")
            for provider in PROVIDERS:
                self.managers[provider.name] = self._start_manager(bin_dir / provider.binary, provider)
            watch = [m.component for m in self.managers.values()]
            for manager in self.managers.values():
                ready = partial(http_ok, manager.readyz_url)
                wait_for(f"{manager.provider.binary} /readyz", ready, self.start_timeout, watch)
            self._install_webhooks(module_dir)
            wait_for(
                "conversion through the CAPI webhooks", self._conversion_works, self.start_timeout, watch
            )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _write_serving_cert(self) -> None:
        self.cert_dir.mkdir(mode=0o700)
        cert, key = self.ca.issue_serving("capi-webhook", ("localhost",), (HOST,))
        write_private(self.cert_dir / "tls.crt", cert)
        write_private(self.cert_dir / "tls.key", key)

    def _start_manager(self, binary: Path, provider: Provider) -> Manager:
        assert self.log_dir is not None
        webhook_port, health_port, diagnostics_port = free_port(), free_port(), free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.control_plane.kubeconfig}",
            "--leader-elect=false",
            f"--webhook-port={webhook_port}",
            f"--webhook-cert-dir={self.cert_dir}",
            f"--health-addr={HOST}:{health_port}",
            f"--diagnostics-address={HOST}:{diagnostics_port}",
            "--insecure-diagnostics",  # plain http without authn/z: metrics for tests, no pprof
            *provider.args,
        ]
        component = Component(provider.binary, argv, self.log_dir)
        return Manager(provider, webhook_port, health_port, diagnostics_port, component)

    def _install_webhooks(self, module_dir: Path) -> None:
        urls = {name: manager.webhook_url for name, manager in self.managers.items()}
        converted = webhook_converted_crds(crds.capi_crds(module_dir), urls, self.ca)
        self._crds_converted = True  # from here on, stop() must put strategy None back
        crds.apply_crds(self.kubectl, converted)
        for provider in PROVIDERS:
            self.webhook_configurations += webhook_configurations(
                module_dir, provider, urls[provider.name], self.ca
            )
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={crds.FIELD_MANAGER}",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": self.webhook_configurations}),
            timeout=KUBECTL_TIMEOUT,
        )

    def _conversion_works(self) -> bool | None:
        """None until the apiserver converts every provider's v1beta1 objects through the webhooks."""
        self.check_alive()
        for probe in _CONVERSION_PROBES:
            answer = json.loads(
                self.kubectl(
                    "create",
                    "--dry-run=server",
                    "-o",
                    "json",
                    "-f",
                    "-",
                    stdin=json.dumps(probe),
                    timeout=KUBECTL_TIMEOUT,
                )
            )
            if answer.get("apiVersion") != probe["apiVersion"]:
                return None
        self.kubectl("get", "clusters.v1beta1.cluster.x-k8s.io", "-A", timeout=KUBECTL_TIMEOUT)
        return True

    def check_alive(self) -> None:
        """Raise if any manager has died (with the tail of its log)."""
        for manager in self.managers.values():
            manager.component.check_alive()

    def stop(self) -> None:
        """Unwire the webhooks (CRDs back to strategy None), then stop the managers."""
        try:
            if self.webhook_configurations:
                for kind in WEBHOOK_KINDS:
                    names = [c["metadata"]["name"] for c in self.webhook_configurations if c["kind"] == kind]
                    self.kubectl(
                        "delete", kind.lower(), *names, "--ignore-not-found", timeout=KUBECTL_TIMEOUT
                    )
                self.webhook_configurations = []
            if self._crds_converted:
                crds.apply_crds(self.kubectl, crds.capi_crds(crds.capi_module_dir(self.version)))
                self._crds_converted = False
        finally:
            for manager in self.managers.values():
                manager.component.stop()
            self.managers.clear()
            shutil.rmtree(self._tmp, ignore_errors=True)
