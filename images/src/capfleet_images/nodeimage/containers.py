"""The container images kubeadm runs, written as docker archives for containerd to import at first boot.

No registry is reachable from a node, so every image `kubeadm init/join` (and kube-vip) needs is built here
from the binaries built from Go modules and preloaded: `ctr -n k8s.io images import` takes a `docker save`
archive and names the image by its RepoTags. An archive holds manifest.json, the image config
(<sha256>.json) and one uncompressed <diff-id>/layer.tar per layer (see layers.py: reproducible, so equal
inputs give byte-identical archives and the same image IDs).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from capfleet_images.nodeimage import layers
from capfleet_images.nodeimage.layers import MTIME, Files
from capfleet_images.nodeimage.versions import NodeImageVersions

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CREATED = "2000-01-01T00:00:00Z"  # layers.MTIME as a time stamp


@dataclass(frozen=True)
class ImageSpec:
    """One image: its full reference, the files of its top layer, how it runs.

    `base_tree`, if given, is a host directory copied as the image's first layer as it is (files, modes,
    symlinks), below the layer of `files`.
    """

    reference: str
    files: Files
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = (DEFAULT_PATH,)
    user: str = ""
    working_dir: str = "/"
    base_tree: Path | None = None
    # Like distroless images (the upstream base), a world-writable /tmp.
    directories: Mapping[str, int] = field(default_factory=lambda: {"/tmp": 0o1777})

    @property
    def archive_name(self) -> str:
        """A file name for the archive: "registry.x/etcd:3.5.24-0" → "etcd_3.5.24-0.tar"."""
        return self.reference.rsplit("/", 1)[-1].replace(":", "_") + ".tar"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def image_layers(spec: ImageSpec) -> list[tuple[str, bytes]]:
    """(what made it, layer tar) for each layer of the image, bottom first."""
    built: list[tuple[str, bytes]] = []
    if spec.base_tree is not None:
        base = layers.layer_tar(layers.tree_entries(spec.base_tree))
        built.append(("capfleet: base directory tree", base))
    top = layers.file_entries(spec.files, spec.directories)
    built.append((f"capfleet: {', '.join(sorted(spec.files))}", layers.layer_tar(top)))
    return built


def image_config(spec: ImageSpec, history: list[str], diff_ids: list[str]) -> dict[str, object]:
    """The image config (the OCI/Docker image JSON) for layers with these `diff_ids`."""
    config: dict[str, object] = {"Env": list(spec.env), "WorkingDir": spec.working_dir}
    if spec.entrypoint:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config["Cmd"] = list(spec.cmd)
    if spec.user:
        config["User"] = spec.user
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": CREATED, "created_by": step} for step in history],
    }


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, MTIME
    tar.addfile(info, io.BytesIO(data))


def write_docker_archive(spec: ImageSpec, out_path: Path) -> str:
    """Write `spec` as a docker archive to `out_path`; return the image ID ("sha256:" + config digest)."""
    built = image_layers(spec)
    layer_hexes = [sha256_hex(tar) for _, tar in built]
    config = canonical_json(image_config(spec, [s for s, _ in built], [f"sha256:{h}" for h in layer_hexes]))
    config_hex = sha256_hex(config)
    manifest = [
        {
            "Config": f"{config_hex}.json",
            "RepoTags": [spec.reference],
            "Layers": [f"{h}/layer.tar" for h in layer_hexes],
        }
    ]
    with tarfile.open(out_path, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for layer_hex, (_, tar) in zip(layer_hexes, built, strict=True):
            _add(archive, f"{layer_hex}/layer.tar", tar)
        _add(archive, f"{config_hex}.json", config)
        _add(archive, "manifest.json", canonical_json(manifest))
    return f"sha256:{config_hex}"


def node_image_specs(
    versions: NodeImageVersions, kube_bin: Path, components: Mapping[str, Path], iptables_root: Path
) -> list[ImageSpec]:
    """Every image kubeadm init/join and kube-vip run, named as `versions.images()` names them.

    `kube_bin` holds the Kubernetes binaries (hack/build-kube.sh); `components` maps binary names (etcd,
    coredns, kube-vip, pause, and etcdctl if built) to files (components.ensure_components()).
    `iptables_root` is a tree holding iptables(-save/-restore) backed by nft under /usr/sbin, with every
    library they load (iptables.iptables_tree makes it from the node's own Debian packages): kube-proxy
    runs those commands inside its container, so the tree is its image's base layer.
    """
    if not os.path.lexists(iptables_root / "usr/sbin/iptables"):
        raise ValueError(f"{iptables_root} has no usr/sbin/iptables: kube-proxy's image needs one")
    refs = versions.images()

    def kube(name: str, base_tree: Path | None = None) -> ImageSpec:
        binary = f"/usr/local/bin/{name}"
        return ImageSpec(
            refs[name], {binary: (kube_bin / name, 0o755)}, entrypoint=(binary,), base_tree=base_tree
        )

    def at_root(name: str, user: str = "") -> ImageSpec:
        return ImageSpec(
            refs[name], {f"/{name}": (components[name], 0o755)}, entrypoint=(f"/{name}",), user=user
        )

    etcd_tools = {
        f"/usr/local/bin/{b}": (components[b], 0o755) for b in ("etcd", "etcdctl") if b in components
    }
    return [
        kube("kube-apiserver"),
        kube("kube-controller-manager"),
        kube("kube-scheduler"),
        kube("kube-proxy", base_tree=iptables_root),
        ImageSpec(refs["etcd"], etcd_tools, entrypoint=("/usr/local/bin/etcd",)),
        # Root, not upstream's nonroot user with a file capability: kubeadm's Deployment drops every
        # capability but NET_BIND_SERVICE, which then binds port 53 without file xattrs in the layer.
        at_root("coredns"),
        at_root("pause", user="65535:65535"),
        at_root("kube-vip"),
    ]


def write_node_images(
    versions: NodeImageVersions,
    kube_bin: Path,
    components: Mapping[str, Path],
    iptables_root: Path,
    out_dir: Path,
) -> list[Path]:
    """Write every node image (node_image_specs) as a docker archive into `out_dir`; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in node_image_specs(versions, kube_bin, components, iptables_root):
        path = out_dir / spec.archive_name
        write_docker_archive(spec, path)
        written.append(path)
    return written
