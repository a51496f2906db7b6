"""Unit tests for the node image's root file system and disk: the content written, the MBR, the assembly.

Fast and without root: the files capfleet writes are checked as text (TOML, systemd units, shell), the
MBR byte for byte, and the disk tools (mkfs.fat, syslinux, mtools, mkfs.ext4, qemu-img) on a tiny tree.
"""

from __future__ import annotations

import os
import struct
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from capfleet_e2e import labimage
from capfleet_images.nodeimage import disk, iptables, rootfiles, rootfs
from capfleet_images.nodeimage.build import NodeImage
from capfleet_images.nodeimage.disk import Partition
from capfleet_images.nodeimage.versions import NodeImageVersions

VERSIONS = NodeImageVersions()


def unit(text: str) -> dict[str, list[str]]:
    """A systemd unit as {"Section.Key": [values in order]} (keys may repeat, as ExecStart= does)."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in text.replace("\\\n", "").splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(f"{section}.{key}", []).append(value)
    return found


def test_mbr_has_code_signature_and_partition_entries() -> None:
    parts = disk.layout(boot_sectors=256 * 2048, root_sectors=3000 * 2048)
    data = disk.mbr(b"\xfa" * 440, parts, disk_id=0x12345678)
    assert len(data) == 512
    assert data[:440] == b"\xfa" * 440
    assert struct.unpack("<I", data[440:444]) == (0x12345678,)
    assert data[510:] == b"\x55\xaa"
    entries = [data[446 + 16 * i : 462 + 16 * i] for i in range(4)]
    assert entries[0][0] == 0x80
    assert entries[1][0] == 0x00
    assert (entries[0][4], entries[1][4]) == (0x0C, 0x83)
    assert struct.unpack("<II", entries[0][8:]) == (2048, 256 * 2048)
    assert struct.unpack("<II", entries[1][8:]) == (2048 + 256 * 2048, 3000 * 2048)
    assert entries[2] == entries[3] == b"\0" * 16
    assert entries[0][1:4] == disk.chs(2048) == bytes((32, 33, 0))  # head 32, sector 33, cylinder 0


def test_chs_saturates_and_layout_aligns_to_mebibytes() -> None:
    assert disk.chs(0) == bytes((0, 1, 0))
    assert disk.chs(10**9) == bytes((254, 0xC0 | 63, 0xFF))
    boot, root = disk.layout(boot_sectors=1000, root_sectors=5000)
    assert boot.start == 2048
    assert root.start == 4096
    assert root.sectors == 5000
    with pytest.raises(ValueError, match="440"):
        disk.mbr(b"x" * 441, [])


def test_syslinux_config_boots_the_kernel_with_root_by_label_on_the_serial_console() -> None:
    config = disk.syslinux_cfg()
    lines = [line.strip() for line in config.splitlines()]
    assert "KERNEL vmlinuz" in lines
    assert "INITRD initrd.img" in lines
    assert "PROMPT 0" in lines
    append = next(line for line in lines if line.startswith("APPEND "))
    args = append.split()[1:]
    assert args[0] == "root=LABEL=rootfs"
    assert [a for a in args if a.startswith("console=")][-1].startswith("console=ttyS0")


def test_containerd_config_uses_the_preloaded_pause_image_and_systemd_cgroups() -> None:
    config = tomllib.loads(rootfiles.containerd_config(VERSIONS))
    assert config["version"] == 2
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == VERSIONS.images()["pause"] == "registry.capfleet.invalid/pause:3.10"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is True
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}


def test_kubelet_units_are_the_official_packages_ones() -> None:
    service = unit(rootfiles.KUBELET_SERVICE)
    assert service["Service.ExecStart"] == ["/usr/bin/kubelet"]
    assert service["Service.Restart"] == ["always"]
    assert service["Service.RestartSec"] == ["10"]
    assert service["Install.WantedBy"] == ["multi-user.target"]
    dropin = unit(rootfiles.KUBEADM_CONF)
    kubelet = "/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS"
    assert dropin["Service.ExecStart"] == ["", f"{kubelet} $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"]
    assert dropin["Service.EnvironmentFile"] == [
        "-/var/lib/kubelet/kubeadm-flags.env",
        "-/etc/default/kubelet",
    ]
    assert dropin["Service.Environment"] == [
        '"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf '
        '--kubeconfig=/etc/kubernetes/kubelet.conf"',
        '"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"',
    ]
    assert all(len(line) < 200 for line in rootfiles.KUBEADM_CONF.splitlines())


def test_preload_unit_runs_once_between_containerd_and_kubelet() -> None:
    preload = unit(rootfiles.PRELOAD_SERVICE)
    assert preload["Unit.After"] == preload["Unit.Requires"] == ["containerd.service"]
    assert preload["Unit.Before"] == ["kubelet.service cloud-final.service"]
    assert preload["Unit.ConditionPathExists"] == [f"!{rootfiles.PRELOAD_DONE}"]
    assert preload["Service.Type"] == ["oneshot"]
    assert preload["Service.ExecStart"] == [rootfiles.PRELOAD_SCRIPT]
    assert preload["Install.WantedBy"] == ["multi-user.target"]
    links = rootfiles.node_links()
    files = rootfiles.node_files(VERSIONS)
    for name in ("kubelet.service", rootfiles.PRELOAD_UNIT):
        assert links[f"{rootfiles.WANTS}/{name}"] in files


def test_preload_script_imports_each_archive_once(tmp_path: Path) -> None:
    images, state, done = tmp_path / "images", tmp_path / "state", tmp_path / "done"
    images.mkdir()
    for name in ("a.tar", "b.tar"):
        (images / name).write_bytes(b"")
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ctr").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    (bin_dir / "ctr").chmod(0o755)
    script = (
        rootfiles.PRELOAD_SH.replace(rootfiles.PRELOAD_STATE, str(state))
        .replace(rootfiles.PRELOAD_DONE, str(done))
        .replace(rootfiles.IMAGES_DIR, str(images))
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for _ in range(2):
        subprocess.run(["sh", "-c", script], env=env, check=True, capture_output=True)
    imports = [line for line in calls.read_text().splitlines() if line != "version"]
    assert imports == [f"-n k8s.io images import {images}/a.tar", f"-n k8s.io images import {images}/b.tar"]
    assert done.exists()
    assert sorted(p.name for p in state.iterdir()) == ["a.tar.done", "b.tar.done"]


def test_node_files_boot_settings() -> None:
    files = {path: content.decode() for path, (content, _) in rootfiles.node_files(VERSIONS).items()}
    assert files["/etc/fstab"] == "LABEL=rootfs / ext4 defaults 0 1\n"
    assert files["/etc/modules-load.d/k8s.conf"].split() == ["overlay", "br_netfilter"]
    sysctl = dict(line.split(" = ") for line in files["/etc/sysctl.d/90-kubernetes.conf"].splitlines())
    assert sysctl == {
        "net.ipv4.ip_forward": "1",
        "net.bridge.bridge-nf-call-iptables": "1",
        "net.bridge.bridge-nf-call-ip6tables": "1",
    }
    cloud = yaml.safe_load(files["/etc/cloud/cloud.cfg.d/99_capfleet.cfg"])
    assert cloud["datasource_list"] == ["NoCloud", "None"]
    assert "source /etc/network/interfaces.d/*" in files["/etc/network/interfaces"]
    argv = rootfs.mmdebstrap_argv(Path("/t"))
    included = next(a for a in argv if a.startswith("--include=")).removeprefix("--include=").split(",")
    for package in ("linux-image-amd64", "initramfs-tools", "cloud-guest-utils", "containerd", "net-tools"):
        assert package in included
    assert not {"apparmor", "openssh-server", "nftables"} & set(included)


def fake_tree(root: Path) -> None:
    """A merged-/usr tree with a kernel, an absolute symlink, and what customise removes."""
    (root / "usr/lib").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    for d in ("etc/ssh", "boot", "var/lib/cloud/instance", "opt/old", "srv"):
        (root / d).mkdir(parents=True)
    (root / "etc/hostname").write_text("buildhost\n")
    (root / "etc/machine-id").write_text("0123\n")
    (root / "etc/ssh/ssh_host_rsa_key").write_text("secret")
    (root / "etc/resolv.conf").symlink_to("/run/somewhere/resolv.conf")
    (root / "data").symlink_to("/srv")
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64"):
        (root / f"boot/vmlinuz-{version}").write_bytes(b"kernel " + version.encode())
        (root / f"boot/initrd.img-{version}").write_bytes(b"initrd " + version.encode())


def test_writes_stay_inside_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fake_tree(root)
    rootfs.write_files(
        root, {"/lib/x/y.conf": (b"y", 0o600), "/data/z": (b"z", 0o644)}, {"/etc/resolv.conf": "a"}
    )
    assert (root / "usr/lib/x/y.conf").read_bytes() == b"y"
    assert (root / "usr/lib/x/y.conf").stat().st_mode & 0o777 == 0o600
    assert (root / "srv/z").read_bytes() == b"z"  # /data -> /srv, resolved within the tree
    assert os.readlink(root / "etc/resolv.conf") == "a"
    assert rootfs.inside(root, "/lib/../etc/./x") == root / "usr/etc/x"  # as a chroot would


def test_customise_installs_binaries_images_and_forgets_the_machine(tmp_path: Path) -> None:
    root = tmp_path / "root"
    fake_tree(root)
    binaries = {}
    for name in ("kubelet", "kubeadm", "kubectl"):
        binaries[name] = tmp_path / name
        binaries[name].write_text(f"#!/bin/sh\necho {name}\n")
    tar = tmp_path / "pause.tar"
    tar.write_bytes(b"archive")
    rootfs.customise(root, binaries, [tar], VERSIONS)
    assert (root / "usr/bin/kubelet").read_text() == "#!/bin/sh\necho kubelet\n"
    assert (root / "usr/bin/kubeadm").stat().st_mode & 0o777 == 0o755
    assert (root / "opt/capfleet/images/pause.tar").read_bytes() == b"archive"
    assert (root / "etc/machine-id").read_bytes() == b""
    assert not (root / "etc/hostname").exists()
    assert not (root / "var/lib/cloud").exists()
    assert not list((root / "etc/ssh").iterdir())
    assert (
        os.readlink(root / "etc/systemd/system/multi-user.target.wants/kubelet.service")
        == rootfiles.KUBELET_UNIT
    )
    assert (root / "usr/lib/systemd/system/kubelet.service").is_file()  # /lib -> usr/lib
    assert rootfs.kernel_files(root) == (
        root / "boot/vmlinuz-6.1.0-10-amd64",
        root / "boot/initrd.img-6.1.0-10-amd64",
    )
    with pytest.raises(rootfs.RootfsError, match="kubectl"):
        rootfs.customise(root, {"kubelet": tar, "kubeadm": tar}, [])


def test_iptables_tree_takes_programs_and_libraries_from_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert iptables.wanted("/usr/sbin/xtables-nft-multi")
    assert iptables.wanted("/lib/x86_64-linux-gnu/libc.so.6")
    assert iptables.wanted("/usr/lib/x86_64-linux-gnu/xtables/libxt_comment.so")
    assert not iptables.wanted("/usr/share/doc/iptables/copyright")
    assert not iptables.wanted("/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so")
    assert not iptables.wanted("/usr/sbin/xtables-legacy-multi")
    root, dest = tmp_path / "root", tmp_path / "tree"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/sbin").mkdir(parents=True)
    (root / "var/lib/dpkg/info").mkdir(parents=True)
    for top in ("lib", "sbin"):
        (root / top).symlink_to(f"usr/{top}")
    (root / "usr/lib/x86_64-linux-gnu/libc.so.6").write_bytes(b"libc")
    (root / "usr/lib/x86_64-linux-gnu/libmnl.so.0.2.0").write_bytes(b"mnl")
    (root / "usr/lib/x86_64-linux-gnu/libmnl.so.0").symlink_to("libmnl.so.0.2.0")
    for program in iptables.PROGRAMS:
        (root / program.lstrip("/")).write_bytes(b"elf")
    lists = {
        "libc6": ["/lib/x86_64-linux-gnu/libc.so.6"],
        "libmnl0": ["/usr/lib/x86_64-linux-gnu/libmnl.so.0"],
        "iptables": ["/usr/sbin/xtables-nft-multi", "/usr/share/man/x"],
        "conntrack": ["/usr/sbin/conntrack"],
    }
    for package in iptables.PACKAGES:
        listed = ["/.", "/usr", *lists.get(package, [])]
        (root / f"var/lib/dpkg/info/{package}:amd64.list").write_text("\n".join(listed) + "\n")
    monkeypatch.setattr(iptables, "ldd", lambda root, program: ["/lib/x86_64-linux-gnu/libc.so.6"])
    iptables.iptables_tree(root, dest)
    assert os.readlink(dest / "lib") == "usr/lib"
    assert os.readlink(dest / "sbin") == "usr/sbin"
    assert (dest / "usr/lib/x86_64-linux-gnu/libc.so.6").read_bytes() == b"libc"
    assert os.readlink(dest / "usr/lib/x86_64-linux-gnu/libmnl.so.0") == "libmnl.so.0.2.0"
    assert (dest / "usr/lib/x86_64-linux-gnu/libmnl.so.0.2.0").read_bytes() == b"mnl"
    for command in ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-nft-restore"):
        assert os.readlink(dest / "usr/sbin" / command) == "xtables-nft-multi"
    assert (dest / "usr/sbin/conntrack").is_file()
    assert not (dest / "usr/share").exists()


def test_disk_from_a_tiny_tree_has_both_partitions(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    fake_tree(tree)
    (tree / "etc/fstab").write_text("LABEL=rootfs / ext4 defaults 0 1\n")
    raw, qcow2 = tmp_path / "disk.raw", tmp_path / "disk.qcow2"
    boot, root = disk.build_disk(tree, raw, qcow2, tmp_path / "work")
    assert boot == Partition(2048, disk.BOOT_MIB * 2048, 0x0C, active=True)
    assert root.start == boot.start + boot.sectors
    assert raw.stat().st_size == (root.start + root.sectors) * 512
    with raw.open("rb") as f:
        assert f.read(512) == disk.mbr(disk.mbr_code(), [boot, root])
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}

    def boot_file(name: str) -> bytes:
        cmd = ["mtype", "-i", f"{raw}@@{boot.start * 512}", f"::{name}"]
        return subprocess.run(cmd, env=env, capture_output=True, check=True).stdout

    assert boot_file("vmlinuz") == b"kernel 6.1.0-10-amd64"
    assert boot_file("syslinux.cfg").decode() == disk.syslinux_cfg()
    listing = subprocess.run(["mdir", "-a", "-b", "-i", f"{raw}@@{boot.start * 512}", "::"], env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "::/ldlinux.sys" in listing.split()
    info = subprocess.run(["qemu-img", "info", "--output=json", str(qcow2)], capture_output=True, check=True)
    assert yaml.safe_load(info.stdout)["format"] == "qcow2"
    part = tmp_path / "root.ext4"
    with raw.open("rb") as f, part.open("wb") as out:
        f.seek(root.start * 512)
        out.write(f.read(root.sectors * 512))
    label = subprocess.run(["/sbin/e2label", str(part)], capture_output=True, text=True, check=True).stdout
    assert label.strip() == "rootfs"
    fstab = subprocess.run(
        ["/sbin/debugfs", "-R", "cat /etc/fstab", str(part)], capture_output=True, check=True
    )
    assert fstab.stdout == b"LABEL=rootfs / ext4 defaults 0 1\n"


def test_lab_variant_changes_only_the_kernel_command_line_and_is_made_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    fake_tree(tree)
    image = NodeImage(tmp_path / "image")
    image.directory.mkdir()
    [boot, _] = disk.build_disk(tree, image.raw, image.qcow2, tmp_path / "work")
    original = image.raw.read_bytes()

    variant = labimage.lab_qcow2(image, "tsc=reliable")
    made = variant.stat().st_mtime_ns
    assert labimage.lab_qcow2(image, "tsc=reliable") == variant
    assert variant.stat().st_mtime_ns == made
    assert labimage.lab_qcow2(image, "nokaslr") != variant
    assert image.raw.read_bytes() == original
    assert sorted(p.name for p in image.directory.iterdir() if not p.name.endswith(".lock")) == sorted(
        ["disk.raw", "disk.qcow2", variant.name, labimage.lab_qcow2(image, "nokaslr").name]
    )

    flat = tmp_path / "variant.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(variant), str(flat)], check=True)
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    config = subprocess.run(["mtype", "-i", f"{flat}@@{boot.start * 512}", "::syslinux.cfg"], env=env,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert config == disk.syslinux_cfg(f"{rootfiles.KERNEL_CMDLINE} tsc=reliable")
    copy = flat.read_bytes()
    assert len(copy) == len(original)
    changed = [i for i in range(0, len(copy), 512) if copy[i : i + 512] != original[i : i + 512]]
    assert changed
    assert all(boot.start <= i // 512 < boot.start + boot.sectors for i in changed)
