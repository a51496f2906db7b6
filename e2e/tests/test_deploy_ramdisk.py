"""capfleet's deploy ramdisk without booting it: the kernel arguments, the shell functions, the cache key.

deploy_lib.sh runs with the host's busybox against a made-up sysfs (hint matching, the seed partition's
place); `test_deploy_ramdisk_boots.py` boots the built ramdisk for each outcome.
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from baremetal_provision.ramdisk_args import (  # type: ignore[import-untyped]
    ImageSource,
    cleaning_args,
    deploy_args,
    hints_arg,
)
from baremetal_provision.reports import signature  # type: ignore[import-untyped]
from capfleet_e2e.pki import CertificateAuthority
from capfleet_images.deployramdisk import build
from capfleet_images.deployramdisk.build import recipe_digest

LIB = build.PACKAGE_DIR / "deploy_lib.sh"
MIB, GIB = 2**20, 2**30
SEED_SECTORS = 32768
WWN = "0x5000c50015ea71ac"


def test_deploy_args_spell_what_the_ramdisk_reads() -> None:
    digest = "AB" * 32
    args = deploy_args(
        ImageSource("http://10.0.0.1/disk.raw", digest),
        "http://10.0.0.1/seed/tok",
        "http://10.0.0.1/callback/tok",
        {"deviceName": "/dev/sdb", "serialNumber": "S1", "wwn": WWN, "minSizeGigabytes": 20},
    )
    assert args == [
        "capfleet.mode=deploy",
        "capfleet.image=http://10.0.0.1/disk.raw",
        f"capfleet.checksum={digest.lower()}",
        "capfleet.format=raw",
        "ds=nocloud-net;s=http://10.0.0.1/seed/tok/",
        "capfleet.callback=http://10.0.0.1/callback/tok",
        f"capfleet.hints=name:/dev/sdb,serial:S1,wwn:{WWN},min_size_gib:20",
    ]
    by_url = deploy_args(
        ImageSource("http://h/d.qcow2", "http://h/d.sha256", "qcow2"), "http://h/s/", "http://h/c"
    )
    assert "capfleet.checksum_url=http://h/d.sha256" in by_url
    assert "capfleet.format=qcow2" in by_url
    assert not any(a.startswith("capfleet.hints") for a in by_url)
    assert cleaning_args("http://h/c") == [
        "capfleet.mode=cleaning", "capfleet.cleaning=metadata", "capfleet.callback=http://h/c",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("hints", "message"),
    [
        ({"hctl": "0:0:0:0"}, "unsupported root device hint"),
        ({"serialNumber": "has space"}, "without spaces"),
        ({"serialNumber": "a,b"}, "without spaces or commas"),
        ({"minSizeGigabytes": "2.5"}, "whole number"),
    ],
)
def test_hints_the_ramdisk_cannot_express_are_refused(hints: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hints_arg(hints)


def test_bad_image_sources_are_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        deploy_args(ImageSource("http://h/i", "a" * 64, "vmdk"), "http://h/s/", "http://h/c")
    with pytest.raises(ValueError, match="SHA-256"):
        deploy_args(ImageSource("http://h/i", "md5:abc"), "http://h/s/", "http://h/c")


# --- unit: the recipe digest ------------------------------------------------------------------------------


def test_recipe_digest_follows_the_init_script_and_the_host_files(tmp_path: Path) -> None:
    recipe = tmp_path / "deployramdisk"
    shutil.copytree(build.PACKAGE_DIR, recipe, ignore=shutil.ignore_patterns("__pycache__"))
    host_file = tmp_path / "busybox"
    host_file.write_bytes(b"x")
    first = recipe_digest([recipe], [host_file])
    assert recipe_digest([recipe], [host_file]) == first
    init = recipe / "deploy_init.sh"
    init.write_text(init.read_text() + "# changed\n")
    second = recipe_digest([recipe], [host_file])
    assert second != first
    host_file.write_bytes(b"xy")  # another package version: another size (and mtime)
    assert recipe_digest([recipe], [host_file]) not in (first, second)


# --- unit: deploy_lib.sh with busybox ---------------------------------------------------------------------


def lib(
    script: str, sysfs: Path | None = None, cmdline: str = "", ca_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "SYS": str(sysfs or "/nonexistent"), "CMDLINE": cmdline}
    env["CA_DIR"] = str(ca_dir or "/nonexistent")
    return subprocess.run(
        ["busybox", "sh", "-c", f"set -f; . {LIB}; {script}"],
        env=env, capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def out(script: str, sysfs: Path | None = None, cmdline: str = "", ca_dir: Path | None = None) -> str:
    result = lib(script, sysfs, cmdline, ca_dir)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def fake_disk(sysfs: Path, name: str, gib: float, **attrs: str | bytes) -> None:
    """A block device in a made-up /sys: size in sectors, plus files such as `serial` or `device/wwid`."""
    disk = sysfs / "block" / name
    disk.mkdir(parents=True)
    (disk / "size").write_text(f"{int(gib * GIB) // 512}\n")
    (disk / "removable").write_text("0\n")
    (disk / "ro").write_text("0\n")
    for key, value in attrs.items():
        path = disk / key.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value if isinstance(value, bytes) else value.encode())


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    fake_disk(root, "vda", 1, serial="SMALL\n")
    fake_disk(root, "vdb", 8, serial="  BIG01  \n")
    fake_disk(
        root, "sda", 100, device__wwid="naa.5000C50015EA71AC\n", device__vpd_pg80=b"\x00\x80\x00\x08SAS00042"
    )
    fake_disk(root, "nvme0n1", 500, device__serial="NVME-9\n", wwid="eui.0025388b91d2a001\n")
    fake_disk(root, "sr0", 0.5, removable="1\n")
    fake_disk(root, "loop0", 2)
    fake_disk(root, "sdc", 16, removable="1\n")  # a USB stick
    fake_disk(root, "sdd", 16, ro="1\n")
    (root / "block" / "vdb" / "vdb1").mkdir()
    (root / "block" / "vdb" / "vdb1" / "partition").write_text("1\n")
    return root


def test_kernel_arguments_are_read_whole_with_globbing_off() -> None:
    cmdline = "quiet capfleet.image=http://h/i.raw?sig=a*b ds=nocloud-net;s=http://h/seed/t/ capfleet.stay"
    assert out("karg capfleet.image", cmdline=cmdline) == "http://h/i.raw?sig=a*b"
    assert out("karg capfleet.stay", cmdline=cmdline) == "yes"
    assert lib("karg capfleet.hints", cmdline=cmdline).returncode == 1
    assert out("seed_url", cmdline=cmdline) == "http://h/seed/t/"
    assert out("seed_url", cmdline="ds=nocloud;seedfrom=http://h/s/") == "http://h/s/"
    assert out("redact 'http://h/i.raw?sig=secret'") == "http://h/i.raw"
    assert out("redact 'https://user:pw@h/i.raw'") == "https://h/i.raw"
    assert out("with_query http://h/cb 'mac=m'") == "http://h/cb?mac=m"
    assert out("with_query 'http://h/cb?t=1' 'mac=m'") == "http://h/cb?t=1&mac=m"


def test_the_nic_that_network_booted_gets_its_lease_first(tmp_path: Path) -> None:
    for nic, mac in (
        ("lo", "00:00:00:00:00:00"),
        ("eno1", "52:54:00:00:00:01"),
        ("eno2", "52:54:00:00:00:02"),
    ):
        (tmp_path / "class" / "net" / nic).mkdir(parents=True)
        (tmp_path / "class" / "net" / nic / "address").write_text(f"{mac}\n")
    assert out("nics", tmp_path).split() == ["eno1", "eno2"]
    assert out("nics", tmp_path, "capfleet.bootif=52:54:00:00:00:02").split() == ["eno2", "eno1"]
    assert out("nics", tmp_path, "capfleet.bootif=52:54:00:00:00:0A").split() == ["eno1", "eno2"]


def test_only_the_boot_servers_https_urls_are_checked_against_its_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority.generate("boot-ca")
    der = ssl.PEM_cert_to_DER_cert(ca.cert_pem.decode())
    cmdline = f"capfleet.ca={base64.b64encode(der).decode()}"
    # busybox stands in for itself here: it says which CA file each wget would be checked against.
    spy = 'busybox() { echo "${SSL_CERT_FILE:-debian} $*"; }'
    script = (
        f"{spy}; trust_boot_ca https://boot.lab:8443/callback/t || exit 9; echo $boot_origin; "
        "wget -q https://boot.lab:8443/seed/t/user-data; wget -q https://images.example/n.raw; "
        "wget -q https://boot.lab:8443.evil.example/x"
    )
    lines = out(script, cmdline=cmdline, ca_dir=tmp_path).splitlines()
    assert lines == [
        "https://boot.lab:8443",
        f"{tmp_path}/boot-ca.pem wget -q https://boot.lab:8443/seed/t/user-data",
        "debian wget -q https://images.example/n.raw",
        "debian wget -q https://boot.lab:8443.evil.example/x",
    ]
    assert (tmp_path / "boot-ca.der").read_bytes() == der
    assert ssl.PEM_cert_to_DER_cert((tmp_path / "boot-ca.pem").read_text()) == der
    assert out(f"{spy}; trust_boot_ca http://boot.lab/callback/t; wget -q http://boot.lab/x") == (
        "debian wget -q http://boot.lab/x"
    ), "no CA given: nothing changes"
    assert (
        lib(
            "trust_boot_ca https://boot.lab/c", cmdline="capfleet.ca=bm90LWEtY2VydA==", ca_dir=tmp_path
        ).returncode
        == 1
    )


@pytest.mark.parametrize(("result", "reason"), [("deployed", ""), ("failed", "BadChecksum")])
def test_the_callback_is_signed_as_the_operator_checks_it(tmp_path: Path, result: str, reason: str) -> None:
    key, report = tmp_path / "callback.key", tmp_path / "report"
    key.write_text("9f" * 32)
    report.write_bytes(b"deployed http://h/i.raw\nresult: deployed\nseconds_total: 41.5\n")
    signed = out(f"sign {key} {result} '{reason}' {report}")
    assert signed == signature("9f" * 32, result, reason, report.read_bytes())
    assert signed != signature("9f" * 32, result, reason, report.read_bytes() + b"x")


def test_candidate_disks_leave_out_removable_read_only_and_virtual_devices(sysfs: Path) -> None:
    assert out("disks", sysfs).split() == ["nvme0n1", "sda", "vda", "vdb"]
    assert out("partitions vdb", sysfs) == "vdb1"
    assert out("disk_serial vdb; disk_serial sda; disk_serial nvme0n1", sysfs).split() == [
        "BIG01",
        "SAS00042",
        "NVME-9",
    ]
    assert out("disk_wwn sda; disk_wwn nvme0n1", sysfs).split() == ["5000c50015ea71ac", "0025388b91d2a001"]


@pytest.mark.parametrize(
    ("hints", "chosen"),
    [
        ("", "nvme0n1"),  # the first, by name, of at least 4 GiB
        ("name:/dev/vda", "vda"),  # a name needs no minimum size
        ("name:vdb", "vdb"),
        ("serial:BIG01", "vdb"),
        ("serial:SAS00042", "sda"),
        (f"wwn:{WWN}", "sda"),
        ("wwn:0X5000C50015EA71AC", "sda"),
        ("min_size_gib:200", "nvme0n1"),
        ("min_size_gib:8,name:/dev/vdb", "vdb"),
        ("min_size_gib:9,name:/dev/vdb", None),
        ("serial:BIG01,wwn:5000c50015ea71ac", None),  # every hint must match the same disk
        ("serial:nope", None),
        ("name:/dev/sdc", None),  # removable
        ("model:QEMU", None),  # an unknown hint matches nothing
        ("min_size_gib:x", None),
    ],
)
def test_root_device_hints_choose_the_disk(sysfs: Path, hints: str, chosen: str | None) -> None:
    result = lib(f"choose_disk '{hints}'", sysfs)
    assert (result.stdout.strip() or None) == chosen
    assert result.returncode == (0 if chosen else 1)


def test_no_hints_skip_disks_under_4_gib(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    fake_disk(root, "vda", 3.99)
    fake_disk(root, "vdb", 4)
    assert out("choose_disk ''", root) == "vdb"
    listing = out("describe_disks", root)
    assert "vda size=3GiB" in listing
    assert "vdb size=4GiB(8388608 sectors)" in listing


def test_streamed_length_comes_from_content_length_checked_against_dd_records() -> None:
    headers = "  HTTP/1.1 302 Found\n  content-length: 5\n  HTTP/1.1 200 OK\n  Content-Length: 10000000\n  \n"
    assert out(f"printf '{headers}' | content_length") == "10000000"
    assert out("echo '  HTTP/1.1 200 OK' | content_length") == ""
    assert out("stream_bytes 2+1 10000000") == "10000000"
    assert out("stream_bytes 16+0 67108864") == "67108864"
    assert out("stream_bytes 16+0 ''") == "67108864"  # no Content-Length: whole blocks only
    for records, length in (("2+1", ""), ("1+1", "10000000"), ("2+0", "10000000"), ("", "1")):
        assert lib(f"stream_bytes '{records}' '{length}'").returncode == 1, (records, length)


@pytest.mark.parametrize(
    ("label", "fat32", "found"), [("CIDATA", False, True), ("cidata", True, True), ("BOOT", False, False)]
)
def test_cidata_file_systems_are_recognised_by_their_fat_label(
    tmp_path: Path, label: str, fat32: bool, found: bool
) -> None:
    fs = tmp_path / "fs.img"
    mkfs = ["mkfs.fat", "-C", *(["-F", "32"] if fat32 else []), "-n", label, str(fs), str(40 * 1024)]
    subprocess.run(mkfs, check=True, capture_output=True, timeout=120)
    assert lib(f"is_cidata {fs}").returncode == (0 if found else 1)


def test_seed_partition_goes_at_the_disks_end_after_the_image() -> None:
    sectors = 5 * GIB // 512
    start = int(out(f"seed_start {sectors}"))
    assert start % 2048 == 0
    assert sectors - 2048 - SEED_SECTORS - 2048 < start <= sectors - 2048 - SEED_SECTORS
    dump = (
        "label: dos\nunit: sectors\n\n"
        "/dev/vda1 : start=        2048, size=      129024, type=83\n"
        f"/dev/vda3 : start=     {start}, size=       32768, type=c\n"
    )
    assert out(f"dump_partition_at '{dump}' {start}") == "/dev/vda3"
    assert out(f"dump_end '{dump}'") == str(start + SEED_SECTORS)
    assert out("dump_end 'label: gpt'") == "0"
