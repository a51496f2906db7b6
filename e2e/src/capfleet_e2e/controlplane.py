"""A real Kubernetes control plane for the integration tests: etcd, kube-apiserver, kube-controller-manager.

`ControlPlane` starts them on free 127.0.0.1 ports with certificates and tokens generated at start, installs
capfleet's and Cluster API's CRDs, and only then starts kube-controller-manager (garbage-collector,
namespace and service-account controllers) so its garbage collector knows the CRDs at once. The
apiserver writes an audit log (level Metadata, JSON lines, blocking) that tests read with `audit_events`
to count API requests. The ServiceAccount admission plugin is on, as in any cluster: the management node
(mgmtnode.py) runs pods that get their tokens from it.

Set CAPFLEET_TEST_KUBECONFIG=/path/to/kubeconfig to run the tests against an existing cluster instead:
`ExistingCluster` then uses that kubeconfig's current context and installs the same CRDs (Cluster API
CRDs already served through a conversion webhook are left alone). It has no audit log.

Logs go to $CAPFLEET_ARTIFACTS (default <repo>/_artifacts/<timestamp>-<pid>/), one directory per control
plane; binaries come from $CAPFLEET_CACHE (default ~/.cache/capfleet), built on first use.
"""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from capfleet_e2e import crds
from capfleet_e2e.existing import ExistingCluster
from capfleet_e2e.kubebin import KUBE_VERSION, Kubectl, artifacts_dir, ensure_kube_binaries, kube_bin_dir
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.pki import generate_pki, write_private
from capfleet_e2e.processes import Component, free_port, wait_for

__all__ = [
    "KUBE_VERSION",
    "Cluster",
    "ControlPlane",
    "ExistingCluster",
    "apiserver_argv",
    "https_ok",
    "new_log_dir",
]

START_TIMEOUT = 180.0
ADMIN_USER = "admin"
KCM_USER = "system:kube-controller-manager"
# Bootstrap roles the three controllers get when run with their own service accounts.
KCM_CLUSTER_ROLES = (
    "system:controller:generic-garbage-collector",
    "system:controller:namespace-controller",
    "system:controller:service-account-controller",
)
SERVICE_CIDR = "10.0.0.0/24"
"""The Services' cluster IPs (the `kubernetes` Service is its first address)."""
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""
PATCH_BODIES_AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["secrets", "configmaps"]}]
- level: Request
  verbs: ["patch"]
  omitManagedFields: true
- level: Metadata
"""
"""As AUDIT_POLICY, with the body of each patch (but never of a Secret or ConfigMap): what it changed."""


class Cluster(Protocol):
    """What tests may rely on, whether the cluster is local or existing."""

    @property
    def kubeconfig(self) -> Path: ...
    @property
    def server(self) -> str: ...
    @property
    def ca_path(self) -> Path | None: ...
    @property
    def admin_token(self) -> str | None: ...
    @property
    def kubectl(self) -> Kubectl: ...
    @property
    def installed_crds(self) -> list[str]: ...

    def stop(self) -> None: ...


def new_log_dir(name: str) -> Path:
    """A new directory `name` (or `name`-2, -3, ...) in the artifacts directory for some logs."""
    for n in range(1, 1000):
        path = artifacts_dir() / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"too many directories named {name} in {artifacts_dir()}")


def https_ok(url: str, ca: Path, token: str | None = None) -> bool | None:
    """True if GET `url` answers 200 "ok" (TLS verified with `ca`), else None: a probe for `wait_for`."""
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return True if response.read() == b"ok" else None
    except urllib.error.HTTPError as e:  # not ready yet (500, 403 while RBAC bootstraps, ...)
        e.close()
        return None


def _etcd_healthy(url: str) -> bool | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:  # plain http on loopback
            return True if json.loads(response.read()).get("health") == "true" else None
    except urllib.error.HTTPError as e:
        e.close()
        return None


def _etcd_supports(flag: str) -> bool:
    return flag in subprocess.run(["etcd", "--help"], capture_output=True, text=True, check=False).stdout


def apiserver_argv(
    binary: Path,
    *,
    port: int,
    etcd_url: str,
    cert_dir: Path,
    cert: Path,
    key: Path,
    client_ca: Path,
    sa_pub: Path,
    sa_key: Path,
    tokens: Path,
    etcd_prefix: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-apiserver's command line on 127.0.0.1:`port`, as envtest runs it (plus token authentication)."""
    argv = [
        str(binary),
        f"--etcd-servers={etcd_url}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-key-file={sa_pub}",
        f"--service-account-signing-key-file={sa_key}",
        "--authorization-mode=Node,RBAC",
        f"--client-ca-file={client_ca}",
        # Owner references with blockOwnerDeletion need update on the owner's finalizers, as CAPI v1.14's
        # contract requires: every suite checks the operators' RBAC against it.
        "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
        "--allow-privileged=true",
        f"--token-auth-file={tokens}",
    ]
    if etcd_prefix:
        argv.append(f"--etcd-prefix={etcd_prefix}")
    return [*argv, *extra]


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback; use as a context manager."""

    def __init__(
        self,
        version: str = KUBE_VERSION,
        start_timeout: float = START_TIMEOUT,
        apiserver_args: Sequence[str] = (),
        audit_policy: str = AUDIT_POLICY,
        capfleet_crds: bool = True,
    ):
        self.version = version
        self.capfleet_crds = capfleet_crds
        self.audit_policy = audit_policy
        self.apiserver_args = tuple(apiserver_args)
        self.start_timeout = start_timeout
        self.components: list[Component] = []
        self.startup_seconds = 0.0
        self.installed_crds: list[str] = []
        self.etcd_url: str | None = None  # set by start(): a second apiserver may share the etcd
        self._tmp = Path(tempfile.mkdtemp(prefix="capfleet-kube-"))
        shm = Path("/dev/shm")
        self._etcd_dir = Path(tempfile.mkdtemp(prefix="capfleet-etcd-", dir=shm if shm.is_dir() else None))
        self.log_dir = self._new_log_dir()
        self.audit_log = self.log_dir / "audit.jsonl"
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_urlsafe(32)
        self._kcm_token = secrets.token_urlsafe(32)
        self.kubeconfig = self._tmp / "admin.kubeconfig"
        self.ca_path = self._tmp / "pki" / "ca.crt"
        self.kubectl = Kubectl(kube_bin_dir(version) / "kubectl", self.kubeconfig)

    @staticmethod
    def _new_log_dir() -> Path:
        return new_log_dir("controlplane")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start everything and install the CRDs; on any failure stop what was started and re-raise."""
        began = time.monotonic()
        try:
            bin_dir = ensure_kube_binaries(self.version)
            pki = generate_pki(self._tmp / "pki")
            etcd_url = self.etcd_url = self._start_etcd()
            self._start_apiserver(
                bin_dir, pki.serving_cert, pki.serving_key, pki.sa_public_key, pki.sa_private_key, etcd_url
            )
            write_kubeconfig(self.kubeconfig, self.server, self.ca_path, ADMIN_USER, self.admin_token)
            self.installed_crds = crds.install_all(
                self.kubectl, keep_webhook_converted=False, capfleet=self.capfleet_crds
            )
            self._start_controller_manager(bin_dir, pki.serving_cert, pki.serving_key)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _start(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.log_dir)
        self.components.append(component)
        return component

    def _start_etcd(self) -> str:
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        argv = [
            "etcd",
            "--name=default",
            f"--data-dir={self._etcd_dir / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-outputs=stderr",
        ]
        if _etcd_supports("--unsafe-no-fsync"):
            argv.append("--unsafe-no-fsync")
        etcd = self._start("etcd", argv)
        wait_for("etcd /health", partial(_etcd_healthy, client), self.start_timeout, [etcd])
        return client

    def _start_apiserver(
        self, bin_dir: Path, cert: Path, key: Path, sa_pub: Path, sa_key: Path, etcd_url: str
    ) -> None:
        tokens = write_private(
            self._tmp / "tokens.csv",
            (
                f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
                f"{self._kcm_token},{KCM_USER},{KCM_USER}\n"
            ).encode(),
        )
        policy = write_private(self._tmp / "audit-policy.yaml", self.audit_policy.encode())
        argv = apiserver_argv(
            bin_dir / "kube-apiserver",
            port=self.port,
            etcd_url=etcd_url,
            cert_dir=self._tmp / "apiserver",
            cert=cert,
            key=key,
            client_ca=self.ca_path,
            sa_pub=sa_pub,
            sa_key=sa_key,
            tokens=tokens,
            extra=(
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=100000",
                *self.apiserver_args,
            ),
        )
        apiserver = self._start("kube-apiserver", argv)
        ready = partial(https_ok, f"{self.server}/readyz", self.ca_path, self.admin_token)
        wait_for("kube-apiserver /readyz", ready, self.start_timeout, [apiserver])

    def _start_controller_manager(self, bin_dir: Path, cert: Path, key: Path) -> None:
        for role in KCM_CLUSTER_ROLES:
            self.kubectl(
                "create",
                "clusterrolebinding",
                f"capfleet-e2e:{role.rsplit(':', 1)[-1]}",
                f"--clusterrole={role}",
                f"--user={KCM_USER}",
            )
        kubeconfig = write_kubeconfig(
            self._tmp / "kcm.kubeconfig", self.server, self.ca_path, KCM_USER, self._kcm_token
        )
        port = free_port()
        argv = [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # Every namespace gets its `default` ServiceAccount, which the ServiceAccount admission plugin
            # (on, as in any cluster) needs before a pod may be created there.
            "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
        ]
        kcm = self._start("kube-controller-manager", argv)
        healthy = partial(https_ok, f"https://127.0.0.1:{port}/healthz", self.ca_path)
        wait_for("kube-controller-manager /healthz", healthy, self.start_timeout, [kcm])

    def check_alive(self) -> None:
        """Raise if any component has died (with the tail of its log)."""
        for component in self.components:
            component.check_alive()

    def audit_events(self, after: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Audit events written since byte offset `after`, and the offset to pass next time.

        Only complete lines are consumed, so a line the apiserver is still writing is returned next time.
        """
        try:
            with self.audit_log.open("rb") as f:
                f.seek(after)
                data = f.read()
        except FileNotFoundError:
            return [], after
        complete = data[: data.rfind(b"\n") + 1]
        events = [json.loads(line) for line in complete.splitlines() if line.strip()]
        return events, after + len(complete)

    def stop(self) -> None:
        """Stop every component (controller manager first) and remove the temporary directories."""
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        for path in (self._tmp, self._etcd_dir):
            shutil.rmtree(path, ignore_errors=True)
