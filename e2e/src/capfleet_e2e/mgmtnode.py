"""A node for the test control plane, so the operators run as users run them: pods from capfleet's images.

The session's control plane (controlplane.py) runs no pods. `ManagementNode` adds what a management
cluster needs for that: kube-scheduler, a second kube-controller-manager with the controllers pods need
(Deployments, ReplicaSets, EndpointSlices, ServiceAccounts, the root CA ConfigMap), and one node, all
built from the same Kubernetes module: containerd, runc and the CNI plugins from Debian, a kubelet and a
kube-proxy. Images come only from archives (`ctr images import`), never from a registry: the kubelet never
pulls (`imagePullPolicy: IfNotPresent` finds them).

Network: the node (containerd, the kubelet, kube-proxy and the pods' bridge) lives in a network namespace
the run creates (`capfleet-node-<random>`), with no route out of it. Pods get 172.31.0.0/24 addresses on
the CNI bridge; the API server, which listens on the host's loopback, is reached through a relay pair over
a UNIX socket (baremetal/relay.py), listening on every address of the namespace at the API server's own
port. The lab publishes that relay as the `kubernetes` Service's endpoint (the API server's own endpoint
reconciler is off), so pods reach the API at 10.0.0.1:443 through kube-proxy, with in-cluster config and
their ServiceAccount tokens, as on any cluster. `reach_host` puts any other service of the host's loopback
(a hypervisor's sshd, NetBox, a BMC) at the same port on the pods' gateway, 172.31.0.1, the address the
lab's certificates name for it.

The kubelet runs with the cgroupfs driver and cgroup v1 allowed (`failCgroupV1: false`): this kind of
machine has the v1 hierarchy and no systemd. containerd and the kubelet share the root mount namespace
(nsenter --net, not `ip netns exec`, which would give each its own): runc must see the kubelet's volumes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Self

from capfleet_e2e.baremetal.netns import relay_listening
from capfleet_e2e.baremetal.relay import __file__ as _relay_file
from capfleet_e2e.controlplane import SERVICE_CIDR, ControlPlane
from capfleet_e2e.images import OciArchive
from capfleet_e2e.kubebin import cache_root, ensure_kube_binaries
from capfleet_e2e.pki import POD_NETWORK_GATEWAY, CertificateAuthority, write_private
from capfleet_e2e.processes import Component, free_port, wait_for
from capfleet_images.nodeimage.components import ensure_components
from capfleet_images.nodeimage.containers import ImageSpec, write_docker_archive

NODE_BINARIES = ("kubelet", "kube-proxy", "kube-scheduler")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CNI_BIN_DIR = Path("/usr/lib/cni")
KCM_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "endpointslice-controller",
    "root-ca-certificate-publisher-controller",
    # Lifts the not-ready taint the kubelet registers its node with, once the node is Ready.
    "node-lifecycle-controller",
)
START_TIMEOUT = 180.0
NODE_NAME = "capfleet-mgmt"


def _run(argv: Sequence[str], timeout: float = 120.0) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def pause_archive() -> Path:
    """The sandbox (pause) image as a docker archive, built once from the pause program of the node image."""
    pause = ensure_components(names=("pause",))["pause"]
    out = cache_root() / "mgmt-node" / "pause.tar"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        spec = ImageSpec(PAUSE_IMAGE, {"/pause": (pause, 0o755)}, entrypoint=("/pause",), user="65535:65535")
        write_docker_archive(spec, out.with_suffix(".tmp"))
        out.with_suffix(".tmp").rename(out)
    return out


def containerd_config(root: Path, cni_conf_dir: Path) -> str:
    """containerd 1.6's configuration: everything under `root`, the CRI plugin on cgroupfs and runc."""
    return f"""version = 2
root = "{root}/lib"
state = "{root}/run"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The kubelet asks for oom_score_adj down to -998; this machine's processes may not go below their own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf_dir}"
"""


def cni_config(subnet: str) -> str:
    """A bridge network for the pods: host-local addresses in `subnet`, no masquerade, no route out."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "capfleet-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet_config(root: Path, ca: Path, port: int, cluster_dns: str | None = None) -> str:
    config = {
        "podLogsDir": str(root / "pods"),
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{root}/containerd.sock",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "address": "127.0.0.1",
        "port": port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "readOnlyPort": 0,
        "failSwapOn": False,
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        "clusterDNS": [cluster_dns] if cluster_dns else [],
        "serializeImagePulls": False,
        # This machine's disks are shared with the rest of the lab: never evict for disk pressure.
        "evictionHard": {"memory.available": "100Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "enforceNodeAllocatable": [],
        "cgroupsPerQOS": True,
        "localStorageCapacityIsolation": True,
    }
    return json.dumps(config, indent=2)


class ManagementNode:
    """One node in a network namespace of its own, registered to `cp`; use as a context manager."""

    def __init__(self, cp: ControlPlane, archives: Iterable[Path] = ()) -> None:
        self.cp = cp
        self.archives = list(archives)
        # One fixed network: it exists only in this node's namespace, and the lab's certificates name its
        # gateway (pki.POD_NETWORK_GATEWAY).
        self.gateway = POD_NETWORK_GATEWAY
        self.pod_subnet = str(ipaddress.IPv4Interface(f"{POD_NETWORK_GATEWAY}/24").network)
        self.netns = f"capfleet-node-{secrets.token_hex(4)}"
        self.name = NODE_NAME
        self.root = cache_root() / "mgmt-node" / self.netns
        self.log_dir = cp.log_dir / "mgmt-node"
        self.components: list[Component] = []
        self._reached: set[int] = set()
        self._netns_created = False
        self._netns_before: set[str] = set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- running things ----------------------------------------------------------------------------------

    def in_netns(self, argv: Sequence[str]) -> list[str]:
        """`argv` in the node's network namespace, in the host's mount namespace."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def _start(self, name: str, argv: Sequence[str], *, netns: bool = True) -> Component:
        component = Component(name, self.in_netns(argv) if netns else argv, self.log_dir)
        self.components.append(component)
        return component

    def ctr(self, *args: str, timeout: float = 300.0) -> str:
        return _run(["ctr", "--address", str(self.root / "containerd.sock"), "-n", "k8s.io", *args], timeout)

    def load(self, archive: Path) -> str:
        """Import one of capfleet's OCI archives into containerd; return its reference by digest.

        The image is named by its tag and, as a registry would serve it, by `<repository>@<digest>`: a
        release's components pin images by digest, which containerd resolves by that name alone."""
        image = OciArchive(archive)
        self.ctr("images", "import", "--snapshotter=overlayfs", str(archive))
        by_digest = f"{image.name.rsplit(':', 1)[0]}@{image.digest}"
        self.ctr("images", "tag", "--force", image.name, by_digest)
        return by_digest

    def container_log(self, pod: dict[str, object], container: str) -> str:
        """What a container of `pod` (a Pod object) wrote, every restart's log in order: read from the
        kubelet's log directory (`kubectl logs` would need the API server to reach this node by name)."""
        metadata = pod["metadata"]
        assert isinstance(metadata, dict)
        directory = self.root / "pods" / f"{metadata['namespace']}_{metadata['name']}_{metadata['uid']}"
        logs = sorted((directory / container).glob("*.log"), key=lambda p: int(p.stem))
        return "".join(log.read_text(errors="replace") for log in logs)

    def pod_rss(self, uid: str) -> int:
        """Resident memory of a pod's containers in bytes (total_rss of its cgroup v1 memory controller,
        under whichever QoS class the kubelet put it)."""
        for stat in Path("/sys/fs/cgroup/memory/kubepods").glob(f"**/pod{uid}/memory.stat"):
            for line in stat.read_text().splitlines():
                key, value = line.split()
                if key == "total_rss":
                    return int(value)
        raise LookupError(f"no memory cgroup for pod {uid}")

    # -- start and stop -------------------------------------------------------------------------------

    def start(self) -> Self:
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_all(self) -> None:
        began = time.monotonic()
        bin_dir = ensure_kube_binaries(self.cp.version, NODE_BINARIES)
        pause = pause_archive()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("cni", "kubelet", "pki"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        _run(["ip", "netns", "add", self.netns])
        self._netns_created = True
        _run(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        # The pods' bridge, made before the CNI plugin would, so the node's address exists from the start.
        _run(["ip", "-n", self.netns, "link", "add", "cni0", "type", "bridge"])
        _run(["ip", "-n", self.netns, "addr", "add", f"{self.gateway}/24", "dev", "cni0"])
        _run(["ip", "-n", self.netns, "link", "set", "cni0", "up"])
        # The node's own connections to a cluster IP (a relay into a Service) need a route for kube-proxy's
        # rules to rewrite; a real node has its default route. Nothing leaves: cni0 is the pods' bridge.
        _run(["ip", "-n", self.netns, "route", "add", SERVICE_CIDR, "dev", "cni0"])
        _run(
            self.in_netns(
                ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.route_localnet=1"]
            )
        )
        self._relay_api()
        self._publish_api_endpoint()
        self._start_controllers(bin_dir)

        (self.root / "cni" / "10-capfleet.conflist").write_text(cni_config(self.pod_subnet))
        config = self.root / "containerd.toml"
        config.write_text(containerd_config(self.root, self.root / "cni"))
        containerd = self._start("containerd", ["containerd", "--config", str(config)])
        sock = self.root / "containerd.sock"
        wait_for("containerd's socket", lambda: True if sock.exists() else None, 60, [containerd])
        self.ctr("images", "import", "--snapshotter=overlayfs", str(pause))
        for archive in self.archives:
            self.load(archive)

        ca = CertificateAuthority.from_pem(
            self.cp.ca_path.read_bytes(), (self.cp.ca_path.parent / "ca.key").read_bytes()
        )
        kubelet_kubeconfig = self._client_kubeconfig(
            ca, "kubelet", f"system:node:{NODE_NAME}", ("system:nodes",)
        )
        (self.root / "kubelet.yaml").write_text(kubelet_config(self.root, self.cp.ca_path, free_port()))
        self._start(
            "kubelet",
            [
                str(bin_dir / "kubelet"),
                f"--config={self.root / 'kubelet.yaml'}",
                f"--kubeconfig={kubelet_kubeconfig}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.gateway}",
                "--v=1",
            ],
        )
        self.cp.kubectl(
            "create",
            "clusterrolebinding",
            "capfleet-e2e:node-proxier",
            "--clusterrole=system:node-proxier",
            "--user=system:kube-proxy",
        )
        proxy_kubeconfig = self._client_kubeconfig(ca, "kube-proxy", "system:kube-proxy")
        self._start(
            "kube-proxy",
            [
                str(bin_dir / "kube-proxy"),
                f"--kubeconfig={proxy_kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                "--proxy-mode=iptables",
                f"--cluster-cidr={self.pod_subnet}",
                "--conntrack-max-per-core=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
            ],
        )
        wait_for("the management node Ready", self._node_ready, START_TIMEOUT, self.components)
        self.startup_seconds = time.monotonic() - began

    def _client_kubeconfig(
        self, ca: CertificateAuthority, name: str, user: str, groups: Sequence[str] = ()
    ) -> Path:
        cert, key = ca.issue_client(user, groups)
        cert_path = write_private(self.root / "pki" / f"{name}.crt", cert)
        key_path = write_private(self.root / "pki" / f"{name}.key", key)
        path = self.root / f"{name}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "lab",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.cp.port}",
                        "certificate-authority": str(self.cp.ca_path),
                    },
                }
            ],
            "users": [
                {"name": name, "user": {"client-certificate": str(cert_path), "client-key": str(key_path)}}
            ],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": name}}],
            "current-context": "lab",
        }
        write_private(path, json.dumps(config).encode())
        return path

    def reach_host(self, port: int, listen: str | None = None) -> str:
        """The host's 127.0.0.1:`port` at the same port on `listen` in the node (default: the pods'
        gateway), through a relay pair over a UNIX socket, once per port; returns the address pods use."""
        listen = listen or self.gateway
        if port in self._reached:
            return self.gateway
        self._reached.add(port)
        sock = self.root / f"host-{port}.sock"
        relay = [sys.executable, _relay_file]
        host = self._start(
            f"relay-host-{port}", [*relay, f"unix:{sock}", f"tcp:127.0.0.1:{port}"], netns=False
        )
        wait_for(f"the relay socket to port {port}", lambda: relay_listening(host), 20, [host])
        ns = self._start(f"relay-node-{port}", [*relay, f"tcp:{listen}:{port}", f"unix:{sock}"])
        wait_for(f"the relay to port {port} in the node", lambda: relay_listening(ns), 20, [ns])
        return self.gateway

    def join_network(self, netns: str, bridge: str, address: str) -> str:
        """Plug the node into another test namespace's bridge with a veth pair and give it `address`
        (`a.b.c.d/len`) there, as a node on the provisioning network with a load balancer's address (MetalLB
        in L2 mode answers for it from the node): hosts on that bridge then reach the node's Services
        directly, with their own source addresses. Returns the node's end, removed with `leave_network`."""
        suffix = secrets.token_hex(3)
        ours, theirs = f"lb{suffix}", f"lbp{suffix}"
        _run(["ip", "link", "add", ours, "type", "veth", "peer", "name", theirs])
        _run(["ip", "link", "set", ours, "netns", self.netns])
        _run(["ip", "link", "set", theirs, "netns", netns])
        _run(["ip", "-n", netns, "link", "set", theirs, "master", bridge, "up"])
        _run(["ip", "-n", self.netns, "addr", "add", address, "dev", ours])
        _run(["ip", "-n", self.netns, "link", "set", ours, "up"])
        return ours

    def leave_network(self, link: str) -> None:
        """Remove the node's end of a `join_network` pair (which removes the other end too)."""
        with contextlib.suppress(RuntimeError):
            _run(["ip", "-n", self.netns, "link", "delete", link])

    def _relay_api(self) -> None:
        """The API server at port `cp.port` on every address of the namespace (loopback and the bridge)."""
        self.reach_host(self.cp.port, listen="0.0.0.0")

    def _publish_api_endpoint(self) -> None:
        """The `kubernetes` Service's EndpointSlice: the relay on the pods' gateway (the API server's own
        endpoint reconciler is off, and its address, loopback, means nothing in a pod)."""
        slice_ = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.gateway], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self.cp.port, "protocol": "TCP"}],
        }
        self.cp.kubectl("apply", "-f", "-", stdin=json.dumps(slice_))

    def _start_controllers(self, bin_dir: Path) -> None:
        kubeconfig = self.cp.kubeconfig
        port = free_port()
        self._start(
            "kube-controller-manager-pods",
            [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--use-service-account-credentials=false",
                # What the kube-root-ca.crt ConfigMap in every namespace holds: pods verify the API with it.
                f"--root-ca-file={self.cp.ca_path}",
            ],
            netns=False,
        )
        self._start(
            "kube-scheduler",
            [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
            netns=False,
        )

    def _node_ready(self) -> bool | None:
        try:
            out = self.cp.kubectl("get", "node", NODE_NAME, "-o", "json")
        except RuntimeError:
            return None
        conditions = json.loads(out).get("status", {}).get("conditions", [])
        return True if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None

    def stop(self) -> None:
        """Stop the node's processes, the pods' shims, unmount what they mounted and remove everything."""
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        self._kill_shims()
        self._unmount_all()
        # The pods' namespaces, which the CNI plugin would have removed had each pod been stopped.
        if self._netns_created and os.path.isdir("/run/netns"):
            for name in set(os.listdir("/run/netns")) - self._netns_before:
                if name.startswith("cni-"):
                    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        if self._netns_created:
            with contextlib.suppress(RuntimeError):
                _run(["ip", "netns", "delete", self.netns])
            self._netns_created = False
        # The containers' logs outlive the node, with the run's other logs.
        if (self.root / "pods").is_dir():
            shutil.copytree(self.root / "pods", self.log_dir / "pods", dirs_exist_ok=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_shims(self) -> None:
        address = str(self.root / "containerd.sock")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if cmdline and b"containerd-shim" in cmdline[0] and address.encode() in cmdline:
                    os.kill(int(proc.name), 9)

    def _unmount_all(self) -> None:
        prefix = str(self.root)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
