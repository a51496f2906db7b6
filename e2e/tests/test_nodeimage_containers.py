"""The node image's container images: importable docker archives, reproducible, named as kubeadm wants."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from capfleet_e2e.kubebin import repo_root
from capfleet_images.nodeimage import components, containers, layers
from capfleet_images.nodeimage.containers import ImageSpec
from capfleet_images.nodeimage.versions import NodeImageVersions


def member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo | str) -> bytes:
    content = tar.extractfile(member)
    assert content is not None
    return content.read()


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: member_bytes(archive, m) for m in archive.getmembers() if m.isfile()}


def layer_members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return {m.name: m for m in tar.getmembers()}


def manifest_and_config(files: dict[str, bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    (manifest,) = json.loads(files["manifest.json"])
    return manifest, json.loads(files[manifest["Config"]])


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "etcd-binary"
    path.write_bytes(b"\x7fELF not really")
    return path


@pytest.fixture
def iptables_root(tmp_path: Path) -> Path:
    """A tiny stand-in for iptables.iptables_tree's output: a program, a library, symlinks."""
    root = tmp_path / "iptables"
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/sbin/xtables-nft-multi").write_bytes(b"program")
    (root / "usr/sbin/xtables-nft-multi").chmod(0o755)
    (root / "usr/lib/x86_64-linux-gnu/libxtables.so.12").write_bytes(b"library")
    (root / "usr/lib/x86_64-linux-gnu/libxtables.so.12").chmod(0o644)
    (root / "usr/sbin/iptables").symlink_to("xtables-nft-multi")
    (root / "sbin").symlink_to("usr/sbin")
    return root


def spec(binary: Path, **overrides: Any) -> ImageSpec:
    files = {"/usr/local/bin/etcd": (binary, 0o755), "/etc/motd": (b"hello\n", 0o600)}
    return ImageSpec(**{"reference": "registry.capfleet.invalid/etcd:3.5.24-0", "files": files, **overrides})


def test_the_archive_has_a_manifest_naming_config_and_layers_by_their_digests(
    binary: Path, tmp_path: Path
) -> None:
    image_id = containers.write_docker_archive(
        spec(binary, entrypoint=("/usr/local/bin/etcd",)), tmp_path / "a.tar"
    )
    files = read_archive(tmp_path / "a.tar")
    manifest, config = manifest_and_config(files)

    assert manifest["RepoTags"] == ["registry.capfleet.invalid/etcd:3.5.24-0"]
    assert manifest["Config"] == f"{hashlib.sha256(files[manifest['Config']]).hexdigest()}.json"
    assert image_id == f"sha256:{manifest['Config'].removesuffix('.json')}"
    (layer_name,) = manifest["Layers"]
    diff_id = f"sha256:{hashlib.sha256(files[layer_name]).hexdigest()}"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [diff_id]}
    assert layer_name == f"{diff_id.removeprefix('sha256:')}/layer.tar"
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/etcd"]
    assert config["config"]["Env"] == [containers.DEFAULT_PATH]
    assert len(config["history"]) == 1
    assert set(files) == {"manifest.json", manifest["Config"], layer_name}


def test_layers_hold_files_with_their_modes_parent_directories_and_fixed_owner_and_time(
    binary: Path, tmp_path: Path
) -> None:
    containers.write_docker_archive(spec(binary), tmp_path / "a.tar")
    files = read_archive(tmp_path / "a.tar")
    manifest, _ = manifest_and_config(files)
    members = layer_members(files[manifest["Layers"][0]])

    assert list(members) == [
        "etc",
        "etc/motd",
        "tmp",
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/bin/etcd",
    ]
    assert {name: (m.type, m.mode) for name, m in members.items() if m.isdir()} == {
        name: (tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755)
        for name in ("etc", "tmp", "usr", "usr/local", "usr/local/bin")
    }
    assert members["usr/local/bin/etcd"].mode == 0o755
    assert members["etc/motd"].mode == 0o600
    assert all((m.uid, m.gid, m.mtime) == (0, 0, layers.MTIME) for m in members.values())
    with tarfile.open(fileobj=io.BytesIO(files[manifest["Layers"][0]])) as tar:
        assert member_bytes(tar, "usr/local/bin/etcd") == binary.read_bytes()


def test_the_same_inputs_give_byte_identical_archives_whatever_the_source_files_times(
    binary: Path, iptables_root: Path, tmp_path: Path
) -> None:
    image = spec(binary, base_tree=iptables_root)
    containers.write_docker_archive(image, tmp_path / "first.tar")
    os.utime(binary, (1, 1))
    os.utime(iptables_root / "usr/sbin/xtables-nft-multi", (2, 2))
    containers.write_docker_archive(image, tmp_path / "second.tar")
    assert (tmp_path / "first.tar").read_bytes() == (tmp_path / "second.tar").read_bytes()


def test_a_base_tree_becomes_the_first_layer_with_symlinks_kept(
    binary: Path, iptables_root: Path, tmp_path: Path
) -> None:
    containers.write_docker_archive(spec(binary, base_tree=iptables_root), tmp_path / "a.tar")
    files = read_archive(tmp_path / "a.tar")
    manifest, config = manifest_and_config(files)
    base, top = (layer_members(files[name]) for name in manifest["Layers"])

    assert len(config["rootfs"]["diff_ids"]) == len(config["history"]) == 2
    assert base["sbin"].issym()
    assert base["sbin"].linkname == "usr/sbin"
    assert base["usr/sbin/iptables"].linkname == "xtables-nft-multi"
    assert base["usr/sbin/xtables-nft-multi"].mode == 0o755
    assert base["usr/lib/x86_64-linux-gnu/libxtables.so.12"].mode == 0o644
    assert "usr/local/bin/etcd" in top
    assert "usr/local/bin/etcd" not in base


def test_image_paths_must_be_absolute_and_stay_inside_the_image() -> None:
    for bad in ("usr/bin/x", "/", "/usr/../etc/passwd"):
        with pytest.raises(ValueError, match="image path"):
            layers.in_image(bad)


def fake_binaries(tmp_path: Path, names: tuple[str, ...]) -> dict[str, Path]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    for name in names:
        (tmp_path / "bin" / name).write_bytes(name.encode())
    return {name: tmp_path / "bin" / name for name in names}


def test_the_node_images_are_exactly_the_ones_kubeadm_and_kube_vip_run(
    iptables_root: Path, tmp_path: Path
) -> None:
    fake_binaries(tmp_path, ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"))
    specs = containers.node_image_specs(
        NodeImageVersions(),
        tmp_path / "bin",
        fake_binaries(tmp_path, ("etcd", "coredns", "kube-vip", "pause")),
        iptables_root,
    )
    by_name = {s.reference.split("/")[1].split(":")[0]: s for s in specs}

    assert sorted(s.reference for s in specs) == [
        "registry.capfleet.invalid/coredns:v1.12.0",
        "registry.capfleet.invalid/etcd:3.5.24-0",
        "registry.capfleet.invalid/kube-apiserver:v1.33.13",
        "registry.capfleet.invalid/kube-controller-manager:v1.33.13",
        "registry.capfleet.invalid/kube-proxy:v1.33.13",
        "registry.capfleet.invalid/kube-scheduler:v1.33.13",
        "registry.capfleet.invalid/kube-vip:v1.0.0",
        "registry.capfleet.invalid/pause:3.10",
    ]
    assert by_name["kube-proxy"].base_tree == iptables_root
    assert set(by_name["kube-apiserver"].files) == {"/usr/local/bin/kube-apiserver"}
    assert set(by_name["etcd"].files) == {"/usr/local/bin/etcd"}
    assert {n: by_name[n].entrypoint for n in ("coredns", "pause", "kube-vip")} == {
        "coredns": ("/coredns",),
        "pause": ("/pause",),
        "kube-vip": ("/kube-vip",),
    }


def test_written_node_images_are_tar_files_each_tagged_with_its_reference(
    iptables_root: Path, tmp_path: Path
) -> None:
    fake_binaries(tmp_path, ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"))
    built = fake_binaries(tmp_path, ("etcd", "etcdctl", "coredns", "kube-vip", "pause"))
    versions = NodeImageVersions()
    paths = containers.write_node_images(
        versions, tmp_path / "bin", built, iptables_root, tmp_path / "images"
    )

    tags = {json.loads(read_archive(p)["manifest.json"])[0]["RepoTags"][0]: p.name for p in paths}
    assert sorted(tags) == sorted(versions.images().values())
    assert tags["registry.capfleet.invalid/etcd:3.5.24-0"] == "etcd_3.5.24-0.tar"
    etcd = read_archive(tmp_path / "images" / "etcd_3.5.24-0.tar")
    manifest, _ = manifest_and_config(etcd)
    assert "usr/local/bin/etcdctl" in layer_members(etcd[manifest["Layers"][0]])


def test_kube_proxy_needs_a_tree_with_iptables(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="iptables"):
        containers.node_image_specs(NodeImageVersions(), tmp_path, {}, tmp_path)


def test_the_build_script_defaults_to_the_versions_the_harness_uses() -> None:
    script = (repo_root() / components.BUILD_SCRIPT).read_text()
    defaults = dict(re.findall(r'"\$\{([A-Z_]+):-([^}]+)\}"', script))
    env = components.script_env(NodeImageVersions())
    assert {name: defaults[name] for name in env} == env
    assert {c.name for c in components.COMPONENTS} == set(defaults["NODE_COMPONENTS"].split())
