"""capfleet-images without building anything: its arguments, what `versions` prints, and what `node` and
`ramdisk` print and publish (the builds replaced by artefacts made up in a temporary directory)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from capfleet_images import cli
from capfleet_images.cache import BuildError
from capfleet_images.deployramdisk.build import DeployRamdisk
from capfleet_images.nodeimage import versions
from capfleet_images.nodeimage.build import NodeImage
from capfleet_images.nodeimage.rootfs import SUITE
from capfleet_images.publish import SUMS, parse_sums


def test_each_command_parses_with_and_without_an_output(tmp_path: Path) -> None:
    parse = cli.parser().parse_args
    assert (parse(["node"]).command, parse(["node"]).output) == ("node", None)
    assert parse(["node", "--output", str(tmp_path)]).output == tmp_path
    assert parse(["ramdisk", "-o", "out"]).output == Path("out")
    assert parse(["versions"]).command == "versions"


@pytest.mark.parametrize("argv", [[], ["versions", "--output", "x"], ["node", "--bogus"], ["image"]])
def test_a_wrong_command_line_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.parser().parse_args(argv)
    assert exit_.value.code == 2
    assert "usage: capfleet-images" in capsys.readouterr().err


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("node", "ramdisk", "versions", "CAPFLEET_CACHE"):
        assert command in out


def test_versions_prints_what_goes_into_the_node_image(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["versions"]) == 0
    out = capsys.readouterr().out
    rows = dict(line.split("  ", 1) for line in out.split("\n\n")[0].splitlines())
    rows = {what.strip(): version.strip() for what, version in rows.items()}
    chosen = versions.NodeImageVersions()
    assert rows == {
        "Kubernetes": chosen.kubernetes,
        "etcd": f"{versions.ETCD_VERSION} (image tag {versions.ETCD_IMAGE_TAG})",
        "CoreDNS": versions.COREDNS_VERSION,
        "kube-vip": versions.KUBE_VIP_VERSION,
        "pause": versions.PAUSE_TAG,
        "Debian suite": SUITE,
        "image repository": chosen.image_repository,
    }
    for reference in chosen.images().values():
        assert f"  {reference}\n" in out


def test_versions_lines_are_aligned_and_follow_the_versions_given() -> None:
    text = cli.versions_text(versions.NodeImageVersions("v1.34.0", "registry.example"))
    table = text.split("\n\n")[0].splitlines()
    column = len("image repository") + 2  # the longest name, then two spaces
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in table)
    assert table[0] == "Kubernetes".ljust(column) + "v1.34.0"
    assert table[-1] == "image repository".ljust(column) + "registry.example"
    assert "  registry.example/kube-apiserver:v1.34.0\n" in text


def _node_image(directory: Path) -> NodeImage:
    directory.mkdir()
    (directory / "disk.qcow2").write_bytes(b"QFI\xfb qcow2")
    with (directory / "disk.raw").open("wb") as raw:
        raw.write(b"\xeb\x63\x90 mbr")
        raw.truncate(8 << 20)  # mostly a hole, like the real disk.raw
    (directory / "build.json").write_text(json.dumps({"versions": "v", "seconds": {"disk": 1.0}}))
    return NodeImage(directory)


def _ramdisk(directory: Path) -> DeployRamdisk:
    directory.mkdir()
    (directory / "vmlinuz").write_bytes(b"kernel" * 1000)
    (directory / "initrd.img").write_bytes(b"initrd" * 2000)
    (directory / "build.json").write_text(json.dumps({"kernel_version": "6.1.0-test", "seconds": 1.5}))
    return DeployRamdisk(directory)


def _returning(value: object) -> Callable[..., object]:
    return lambda **_: value


def test_node_prints_the_cached_image_without_an_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _node_image(tmp_path / "cache")
    monkeypatch.setattr(cli, "ensure_node_image", _returning(image))
    assert cli.main(["node"]) == 0
    out = capsys.readouterr().out
    assert f"qcow2 (VM base volume): {image.qcow2}\n" in out
    assert f"raw (bare-metal disks): {image.raw}\n" in out
    assert not list(tmp_path.glob("**/" + SUMS))


def test_node_output_holds_the_disks_and_their_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _node_image(tmp_path / "cache")
    monkeypatch.setattr(cli, "ensure_node_image", _returning(image))
    out_dir = tmp_path / "publish" / "v1.33.13"
    assert cli.main(["node", "--output", str(out_dir)]) == 0
    raw_digest = hashlib.sha256(image.raw.read_bytes()).hexdigest()
    assert sorted(p.name for p in out_dir.iterdir()) == [SUMS, "disk.qcow2", "disk.raw", "disk.raw.sha256"]
    assert (out_dir / "disk.raw").read_bytes() == image.raw.read_bytes()
    assert parse_sums((out_dir / SUMS).read_text()) == {
        "disk.qcow2": hashlib.sha256(image.qcow2.read_bytes()).hexdigest(),
        "disk.raw": raw_digest,
    }
    assert (out_dir / "disk.raw.sha256").read_text() == f"{raw_digest}  disk.raw\n"
    printed = capsys.readouterr().out
    assert f"raw (bare-metal disks): {out_dir / 'disk.raw'} (sha256 {raw_digest}" in printed
    assert f"checksums: {out_dir / SUMS}\n" in printed


def test_ramdisk_output_holds_kernel_initrd_and_checksums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ramdisk = _ramdisk(tmp_path / "cache")
    monkeypatch.setattr(cli, "ensure_deploy_ramdisk", _returning(ramdisk))
    out_dir = tmp_path / "deploy"
    assert cli.main(["ramdisk", "-o", str(out_dir)]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == [SUMS, "initrd.img", "vmlinuz"]
    assert parse_sums((out_dir / SUMS).read_text()) == {
        name: hashlib.sha256((ramdisk.directory / name).read_bytes()).hexdigest()
        for name in ("initrd.img", "vmlinuz")
    }
    printed = capsys.readouterr().out
    assert f"kernel: {out_dir / 'vmlinuz'} (6.1.0-test, 0.0 MB)\n" in printed
    assert f"initrd: {out_dir / 'initrd.img'} (0.0 MB)\n" in printed


def test_a_build_that_cannot_run_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(**_: object) -> NodeImage:
        raise BuildError("Go >= 1.24 is needed")

    monkeypatch.setattr(cli, "ensure_node_image", fail)
    assert cli.main(["node"]) == 1
    assert capsys.readouterr().err == "capfleet-images: error: Go >= 1.24 is needed\n"
