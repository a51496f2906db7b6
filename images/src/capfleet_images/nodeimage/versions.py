"""Which versions of what go into the node image, and the image names kubeadm will look for.

One place, because three consumers must agree: the component builds, the containerd preload in the
root file system, and the cluster templates (`imageRepository`, `kubernetesVersion`). The versions are
kubeadm v1.33's own defaults (cmd/kubeadm/app/constants), so `kubeadm config images list` names exactly
the images built here.
"""

from __future__ import annotations

from dataclasses import dataclass

from capfleet_images.cache import KUBE_VERSION

# A name no registry answers to: kubeadm finds every image already present and never pulls.
IMAGE_REPOSITORY = "registry.capfleet.invalid"
ETCD_VERSION = "v3.5.24"
ETCD_IMAGE_TAG = "3.5.24-0"
COREDNS_VERSION = "v1.12.0"
PAUSE_TAG = "3.10"
KUBE_VIP_VERSION = "v1.0.0"
CONTROL_PLANE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
NODE_BINARIES = ("kubelet", "kubeadm", "kubectl")


@dataclass(frozen=True)
class NodeImageVersions:
    """The versions one node image is built for."""

    kubernetes: str = KUBE_VERSION
    image_repository: str = IMAGE_REPOSITORY

    def image(self, name: str, tag: str) -> str:
        return f"{self.image_repository}/{name}:{tag}"

    def images(self) -> dict[str, str]:
        """Component name → full image reference, for every image kubeadm init/join or kube-vip runs."""
        refs = {c: self.image(c, self.kubernetes) for c in CONTROL_PLANE_COMPONENTS}
        refs["etcd"] = self.image("etcd", ETCD_IMAGE_TAG)
        refs["coredns"] = self.image("coredns", COREDNS_VERSION)
        refs["pause"] = self.image("pause", PAUSE_TAG)
        refs["kube-vip"] = self.image("kube-vip", KUBE_VIP_VERSION)
        return refs
