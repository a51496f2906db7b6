"""The files that make a Debian tree a capfleet Kubernetes node, as pure data: {path: (content, mode)}.

Kept apart from the code that writes them (rootfs.py) so each can be read and unit-tested as text:
containerd's CRI config (pause image from versions.py, systemd cgroups, Debian's CNI directory), the
kernel modules and sysctls kubeadm's preflight wants, kubelet's units exactly as the official
Kubernetes packages ship them, the one-shot import of the preloaded images, cloud-init's NoCloud-only
datasource list, and the root file system's fstab (by label: clones and bare-metal disks all match).
"""

from __future__ import annotations

from capfleet_images.nodeimage.versions import NodeImageVersions

ROOT_LABEL = "rootfs"
KERNEL_CMDLINE = f"root=LABEL={ROOT_LABEL} ro console=tty0 console=ttyS0,115200n8 apparmor=0"
IMAGES_DIR = "/opt/capfleet/images"
PRELOAD_SCRIPT = "/usr/libexec/capfleet/preload-images"
PRELOAD_UNIT = "capfleet-preload-images.service"
PRELOAD_STATE = "/var/lib/capfleet/preload"
PRELOAD_DONE = "/var/lib/capfleet/images-imported"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
CNI_CONF_DIR = "/etc/cni/net.d"
KUBELET_UNIT = "/lib/systemd/system/kubelet.service"
KUBEADM_DROPIN = "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
WANTS = "/etc/systemd/system/multi-user.target.wants"

Files = dict[str, tuple[bytes, int]]


def containerd_config(versions: NodeImageVersions) -> str:
    """containerd 1.6 (bookworm) config, version 2: CRI with the preloaded pause image and systemd cgroups."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return (
        "version = 2\n\n"
        f"[{cri}]\n"
        f'  sandbox_image = "{versions.images()["pause"]}"\n\n'
        f"[{cri}.containerd]\n"
        '  default_runtime_name = "runc"\n\n'
        f"[{cri}.containerd.runtimes.runc]\n"
        '  runtime_type = "io.containerd.runc.v2"\n\n'
        f"[{cri}.containerd.runtimes.runc.options]\n"
        "  SystemdCgroup = true\n\n"
        f"[{cri}.cni]\n"
        f'  bin_dir = "{CNI_BIN_DIR}"\n'
        f'  conf_dir = "{CNI_CONF_DIR}"\n'
    )


KUBELET_SERVICE = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_CONF = """\
# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the \
KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, \
the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS \
should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS \
$KUBELET_EXTRA_ARGS
"""

PRELOAD_SERVICE = f"""\
[Unit]
Description=Import the container images the node image carries into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service cloud-final.service
ConditionPathExists=!{PRELOAD_DONE}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={PRELOAD_SCRIPT}
TimeoutStartSec=1h

[Install]
WantedBy=multi-user.target
"""

PRELOAD_SH = f"""\
#!/bin/sh
# Imports each image archive in {IMAGES_DIR} into containerd's k8s.io namespace (the CRI's), once:
# a stamp per archive, and {PRELOAD_DONE} when all are in, so later boots skip the unit.
set -eu
mkdir -p {PRELOAD_STATE}
tries=0
until ctr version >/dev/null 2>&1; do
  tries=$((tries + 1))
  [ "$tries" -lt 120 ] || {{ echo "containerd does not answer" >&2; exit 1; }}
  sleep 1
done
for archive in {IMAGES_DIR}/*.tar; do
  [ -e "$archive" ] || continue
  stamp="{PRELOAD_STATE}/$(basename "$archive").done"
  [ -e "$stamp" ] && continue
  echo "importing $archive"
  ctr -n k8s.io images import "$archive"
  touch "$stamp"
done
touch {PRELOAD_DONE}
"""

CLOUD_CFG = """\
# capfleet: machines get their seed from a NoCloud volume labelled cidata (a CD-ROM for VMs).
datasource_list: [NoCloud, None]
datasource:
  NoCloud:
    fs_label: cidata
# The hostname (meta-data local-hostname) resolves locally, so kubeadm's preflight needs no DNS.
manage_etc_hosts: localhost
# Debian's default (en_US.UTF-8) is not generated in the image, and cc_locale fails on it.
locale: C.UTF-8
"""

NETWORK_INTERFACES = """\
# interfaces(5) file used by ifup(8) and ifdown(8)
# cloud-init renders the machine's network-config to /etc/network/interfaces.d/50-cloud-init
source /etc/network/interfaces.d/*
"""


def node_files(versions: NodeImageVersions) -> Files:
    """Every file capfleet writes into the tree, by absolute path."""
    text: dict[str, tuple[str, int]] = {
        "/etc/containerd/config.toml": (containerd_config(versions), 0o644),
        "/etc/modules-load.d/k8s.conf": ("overlay\nbr_netfilter\n", 0o644),
        "/etc/sysctl.d/90-kubernetes.conf": (
            "net.ipv4.ip_forward = 1\n"
            "net.bridge.bridge-nf-call-iptables = 1\n"
            "net.bridge.bridge-nf-call-ip6tables = 1\n",
            0o644,
        ),
        KUBELET_UNIT: (KUBELET_SERVICE, 0o644),
        KUBEADM_DROPIN: (KUBEADM_CONF, 0o644),
        "/etc/default/kubelet": ("KUBELET_EXTRA_ARGS=\n", 0o644),
        f"/etc/systemd/system/{PRELOAD_UNIT}": (PRELOAD_SERVICE, 0o644),
        PRELOAD_SCRIPT: (PRELOAD_SH, 0o755),
        "/etc/cloud/cloud.cfg.d/99_capfleet.cfg": (CLOUD_CFG, 0o644),
        "/etc/network/interfaces": (NETWORK_INTERFACES, 0o644),
        "/etc/fstab": (f"LABEL={ROOT_LABEL} / ext4 defaults 0 1\n", 0o644),
    }
    return {path: (content.encode(), mode) for path, (content, mode) in text.items()}


def node_links() -> dict[str, str]:
    """Symlinks: the enabled units, and resolv.conf as resolvconf (fed by ifupdown) maintains it."""
    return {
        f"{WANTS}/kubelet.service": KUBELET_UNIT,
        f"{WANTS}/{PRELOAD_UNIT}": f"/etc/systemd/system/{PRELOAD_UNIT}",
        "/etc/resolv.conf": "../run/resolvconf/resolv.conf",
    }
