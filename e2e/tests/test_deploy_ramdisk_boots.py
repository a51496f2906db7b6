"""capfleet's deploy ramdisk, booted: real deployments, failures and cleaning under QEMU.

The built ramdisk boots in QEMU (TCG, direct kernel boot) with sparse disk files; its only network is
QEMU's user mode with `restrict=on`, where 10.0.2.100:80 is forwarded (guestfwd, through busybox nc) to an
HTTP server on 127.0.0.1 that serves a 64 MiB image made here (MBR or GPT, one ext4 partition from
mkfs.ext4 -d), its checksum and a seed, and records the callbacks. The disks are then read from the host.
One boot per case; each prints its timings to the artifacts, and each callback must be signed with the
callback key the ramdisk fetched once (`capfleet.key`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from baremetal_provision.ramdisk_args import (  # type: ignore[import-untyped]
    BASE_ARGS,
    Connection,
    ImageSource,
    cleaning_args,
    deploy_args,
)
from baremetal_provision.reports import signed  # type: ignore[import-untyped]
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_images.deployramdisk.build import DeployRamdisk, ensure_deploy_ramdisk
from capfleet_images.nodeimage.disk import Partition, mbr

MIB, GIB = 2**20, 2**30
IMAGE_BYTES = 64 * MIB
SEED_SECTORS = 32768
SERVER = "http://10.0.2.100"
SECRET = "s3cr3t-bootstrap-token"
CALLBACK_KEY = "c0ffee" * 10
USER_DATA = f"#cloud-config\nruncmd:\n  - kubeadm join --token abcdef.{SECRET}\n".encode()
META_DATA = b"instance-id: bm-1\nlocal-hostname: bm-1\n"
NETWORK_CONFIG = b"version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"
MAC = "52:54:00:de:91:01"
UUID = "6b1f6d52-7b6c-4d8e-9a51-0c7dfe0e2a11"
WWN = "0x5000c50015ea71ac"
BOOT_TIMEOUT = 420.0
GPT_BASIC_DATA = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"


@dataclass
class Callback:
    path: str
    query: dict[str, str]
    body: str
    at: float
    raw: bytes = b""

    def facts(self) -> dict[str, str]:
        """The report's `key: value` lines."""
        return dict(line.split(": ", 1) for line in self.body.splitlines() if ": " in line)


@dataclass
class Site:
    """What the HTTP server serves (path → bytes) and the callbacks it received."""

    files: dict[str, bytes] = field(default_factory=dict)
    callbacks: list[Callback] = field(default_factory=list)
    port: int = 0


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = site.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            site.callbacks.append(
                Callback(url.path, query, raw.decode(errors="replace"), time.monotonic(), raw)
            )
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    served = Site(files={f"/key/{SECRET}": CALLBACK_KEY.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()


@dataclass(frozen=True)
class Images:
    raw: Path  # MBR, partition 1 ext4
    gpt_raw: Path  # GPT, partition 1 ext4 (the qcow2's contents)
    qcow2: Path


def _tool(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, check=True, capture_output=True, timeout=120, **kwargs)  # type: ignore[call-overload, no-any-return]


def _ext4(workdir: Path, sectors: int) -> Path:
    tree = workdir / "tree"
    (tree / "etc").mkdir(parents=True, exist_ok=True)
    (tree / "etc" / "hostname").write_text("deployed\n")
    (tree / "payload.bin").write_bytes(hashlib.sha256(b"capfleet").digest() * 16384)  # 512 KiB
    part = workdir / f"root-{sectors}.ext4"
    _tool("mkfs.ext4", "-q", "-F", "-L", "rootfs", "-d", str(tree), str(part), f"{sectors // 2}k")
    return part


def sparse(path: Path, size: int) -> Path:
    path.unlink(missing_ok=True)
    path.touch()
    os.truncate(path, size)
    return path


def head(path: Path, size: int = MIB) -> bytes:
    with path.open("rb") as f:
        return f.read(size)


def _place(image: Path, part: Path, offset: int) -> None:
    with image.open("r+b") as disk:
        disk.seek(offset)
        disk.write(part.read_bytes())


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Images:
    workdir = tmp_path_factory.mktemp("images")
    raw = workdir / "mbr.raw"
    sectors = IMAGE_BYTES // 512 - 2048
    raw.write_bytes(mbr(b"", [Partition(2048, sectors, 0x83, active=True)]))
    os.truncate(raw, IMAGE_BYTES)
    _place(raw, _ext4(workdir, sectors), 2048 * 512)
    gpt = sparse(workdir / "gpt.raw", IMAGE_BYTES)
    _tool("sfdisk", "-q", str(gpt), input=b"label: gpt\nstart=2048, type=L\n")
    table = json.loads(_tool("sfdisk", "--json", str(gpt)).stdout)["partitiontable"]["partitions"]
    _place(gpt, _ext4(workdir, table[0]["size"]), table[0]["start"] * 512)
    qcow2 = workdir / "gpt.qcow2"
    _tool("qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(gpt), str(qcow2))
    return Images(raw, gpt, qcow2)


@pytest.fixture(scope="module")
def ramdisk() -> DeployRamdisk:
    return ensure_deploy_ramdisk()


@dataclass(frozen=True)
class Disk:
    path: Path
    interface: str = "virtio"  # virtio, ahci or scsi
    serial: str = ""
    wwn: str = ""


def disk_file(path: Path, gib: float) -> Disk:
    return Disk(sparse(path, int(gib * GIB)))


def _disk_args(disks: list[Disk]) -> list[str]:
    argv: list[str] = []
    controllers = {d.interface for d in disks}
    if "ahci" in controllers:
        argv += ["-device", "ahci,id=ahci"]
    if "scsi" in controllers:
        argv += ["-device", "virtio-scsi-pci,id=scsi"]
    for i, d in enumerate(disks):
        argv += ["-drive", f"if=none,id=d{i},file={d.path},format=raw"]
        extra = (f",serial={d.serial}" if d.serial else "") + (f",wwn={d.wwn}" if d.wwn else "")
        device = {"virtio": "virtio-blk-pci", "ahci": "ide-hd,bus=ahci.0", "scsi": "scsi-hd,bus=scsi.0"}
        argv += ["-device", f"{device[d.interface]},drive=d{i}{extra}"]
    return argv


@dataclass(frozen=True)
class Boot:
    callback: Callback
    console: str
    seconds: float  # QEMU started → callback received


def boot(
    ramdisk: DeployRamdisk,
    site: Site,
    name: str,
    args: list[str],
    disks: list[Disk],
    nic: str = "virtio-net-pci",
) -> Boot:
    """Boot the ramdisk with `args`, wait until it calls back and powers off; the callback and console."""
    workdir = artifacts_dir() / "deploy-ramdisk" / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    log = workdir / "serial.log"
    relay = f"busybox nc 127.0.0.1 {site.port}"
    argv = [
        "qemu-system-x86_64", "-accel", "tcg", "-machine", "pc", "-m", "1024", "-smp", "1",
        "-nodefaults", "-nographic", "-monitor", "none", "-serial", f"file:{log}", "-no-reboot",
        "-uuid", UUID, "-kernel", str(ramdisk.kernel), "-initrd", str(ramdisk.initrd),
        "-append", " ".join([*BASE_ARGS, *args]),
        "-netdev", f"user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:80-cmd:{relay}",
        "-device", f"{nic},netdev=n0,mac={MAC}",
        *_disk_args(disks),
    ]  # fmt: skip
    seen = len(site.callbacks)
    started = time.monotonic()
    with (workdir / "qemu.log").open("wb") as qemu_log:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qemu_log, stderr=qemu_log)
        try:
            qemu.wait(timeout=BOOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            qemu.kill()
            qemu.wait(timeout=30)
    console = log.read_text(errors="replace") if log.exists() else ""
    calls = site.callbacks[seen:]
    assert qemu.returncode == 0, (
        f"QEMU did not power off by itself ({qemu.returncode}); console:\n{console[-4000:]}"
    )
    assert len(calls) == 1, f"{len(calls)} callbacks; console:\n{console[-4000:]}"
    assert SECRET not in console, "the console shows the seed or its URL"
    assert CALLBACK_KEY not in console, "the console shows the callback key"
    assert signed(calls[0].query, calls[0].raw, CALLBACK_KEY), f"unsigned callback {calls[0].query}"
    assert "/seed/" not in console, "the console shows the seed's URL"
    result = Boot(calls[0], console, calls[0].at - started)
    (workdir / "report.txt").write_text(
        f"query: {result.callback.query}\nboot_to_callback_s: {result.seconds:.1f}\n{result.callback.body}"
    )
    return result


def serve(site: Site, images: Images) -> None:
    raw_sum = hashlib.sha256(images.raw.read_bytes()).hexdigest()
    site.files.update({
        "/images/disk.raw": images.raw.read_bytes(),
        "/images/disk.raw.sha256": f"{raw_sum}  disk.raw\n".encode(),
        "/images/disk.qcow2": images.qcow2.read_bytes(),
        f"/seed/{SECRET}/user-data": USER_DATA,
        f"/seed/{SECRET}/meta-data": META_DATA,
        f"/seed/{SECRET}/network-config": NETWORK_CONFIG,
    })  # fmt: skip


KEYED = Connection(key_url=f"{SERVER}/key/{SECRET}")


def args_for(image: ImageSource, hints: dict[str, str | int] | None = None) -> list[str]:
    return list(deploy_args(image, f"{SERVER}/seed/{SECRET}/", f"{SERVER}/callback/{SECRET}", hints, KEYED))


def partitions(disk: Path) -> list[dict[str, object]]:
    table = json.loads(_tool("sfdisk", "--json", str(disk)).stdout)["partitiontable"]
    found: list[dict[str, object]] = table["partitions"]
    return found


def read_seed(disk: Path, part: dict[str, object]) -> dict[str, bytes]:
    """The files of the FAT seed partition `part` of disk file `disk`, and its label (key `label`)."""
    image = f"{disk}@@{int(str(part['start'])) * 512}"
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    names = _tool("mdir", "-b", "-i", image, "::", env=env).stdout.decode().split()
    files = {n.removeprefix("::/"): _tool("mtype", "-i", image, n, env=env).stdout for n in names}
    files["label"] = _tool("mlabel", "-s", "-i", image, "::", env=env).stdout.strip()
    return files


def add_seed_partition(disk: Path, workdir: Path) -> int:
    """Give disk file `disk` a cidata partition at its end holding USER_DATA, as a deployment leaves it;
    its offset in bytes."""
    start = ((disk.stat().st_size // 512 - 2048 - SEED_SECTORS) // 2048) * 2048
    entry = f"start={start}, size={SEED_SECTORS}, type=c\n"
    _tool("sfdisk", "-q", "--append", str(disk), input=entry.encode())
    fs, user_data = workdir / "cidata.fat", workdir / "user-data"
    user_data.write_bytes(USER_DATA)
    _tool("mkfs.fat", "-C", "-n", "CIDATA", str(fs), str(SEED_SECTORS // 2))
    _tool("mcopy", "-i", str(fs), str(user_data), "::user-data", env={**os.environ, "MTOOLS_SKIP_CHECK": "1"})
    _place(disk, fs, start * 512)
    return start * 512


def check_deployed(result: Boot, target: Path, image: Path, label: str) -> None:
    assert result.callback.query["result"] == "deployed", result.callback.body
    assert result.callback.query["mac"] == MAC
    assert result.callback.query["uuid"] == UUID
    with target.open("rb") as disk:
        written = disk.read(IMAGE_BYTES)
    # The partition table gained the seed partition; everything after it is the image, byte for byte.
    assert written[MIB:] == image.read_bytes()[MIB:]
    parts = partitions(target)
    assert len(parts) == 2
    seed = parts[-1]
    sectors = target.stat().st_size // 512
    assert seed["size"] == SEED_SECTORS
    assert sectors - 2048 - 2 * SEED_SECTORS < int(str(seed["start"])) < sectors - SEED_SECTORS
    assert seed["type"] == label
    files = read_seed(target, seed)
    assert files["label"] == b"Volume label is CIDATA"
    assert files["user-data"] == USER_DATA
    assert files["meta-data"] == META_DATA
    assert files["network-config"] == NETWORK_CONFIG


def record(line: str) -> None:
    """Append a case's figures to the artifacts' deploy-ramdisk/timings.txt."""
    with (artifacts_dir() / "deploy-ramdisk" / "timings.txt").open("a") as timings_file:
        timings_file.write(line)


def timings(result: Boot) -> str:
    facts = result.callback.facts()
    steps = " ".join(
        f"{k.removeprefix('seconds_')}={v}" for k, v in facts.items() if k.startswith("seconds_")
    )
    return f"boot->callback {result.seconds:.1f}s; {steps}; throughput {facts.get('throughput_mb_s')} MB/s"


@pytest.mark.integration
@pytest.mark.timeout(BOOT_TIMEOUT + 120)
def test_raw_image_is_streamed_to_the_hinted_disk_with_a_cidata_seed(
    ramdisk: DeployRamdisk, site: Site, images: Images, tmp_path: Path
) -> None:
    serve(site, images)
    other = disk_file(tmp_path / "other.raw", 5)
    target = disk_file(tmp_path / "target.raw", 5)
    image = ImageSource(f"{SERVER}/images/disk.raw", f"{SERVER}/images/disk.raw.sha256")
    args = args_for(image, {"serialNumber": "TARGET-01", "minSizeGigabytes": 4})
    disks = [Disk(other.path, serial="OTHER-01"), Disk(target.path, serial="TARGET-01")]
    result = boot(ramdisk, site, "raw", args, disks)
    check_deployed(result, target.path, images.raw, "c")
    assert result.callback.facts()["disk"] == "/dev/vdb"
    assert result.callback.facts()["bytes_written"] == str(IMAGE_BYTES)
    assert not any(head(other.path)), "the other disk was written"
    record(f"raw: {timings(result)}\n")


@pytest.mark.integration
@pytest.mark.timeout(BOOT_TIMEOUT + 120)
def test_qcow2_image_is_converted_onto_the_first_big_enough_disk(
    ramdisk: DeployRamdisk, site: Site, images: Images, tmp_path: Path
) -> None:
    serve(site, images)
    small = disk_file(tmp_path / "small.raw", 1)
    target = disk_file(tmp_path / "target.raw", 5)
    digest = hashlib.sha256(images.qcow2.read_bytes()).hexdigest()
    args = args_for(ImageSource(f"{SERVER}/images/disk.qcow2", digest, "qcow2"))
    result = boot(ramdisk, site, "qcow2", args, [small, target], nic="e1000")
    check_deployed(result, target.path, images.gpt_raw, GPT_BASIC_DATA)
    assert result.callback.facts()["disk"] == "/dev/vdb"
    # The GPT's backup header moved to the disk's end: the table verifies.
    _tool("sfdisk", "--verify", str(target.path))
    record(f"qcow2: {timings(result)}\n")


@pytest.mark.integration
@pytest.mark.timeout(BOOT_TIMEOUT + 120)
@pytest.mark.parametrize("case", ["BadChecksum", "DownloadFailed", "NoMatchingDisk"])
def test_failures_are_reported_by_name(
    ramdisk: DeployRamdisk, site: Site, images: Images, tmp_path: Path, case: str
) -> None:
    serve(site, images)
    target = disk_file(tmp_path / "target.raw", 5)
    raw = f"{SERVER}/images/disk.raw"
    if case == "BadChecksum":  # on an AHCI disk, found by its WWN: the image is written, then fails its check
        args = args_for(ImageSource(raw, "0" * 64), {"wwn": WWN})
        disks = [Disk(target.path, "ahci", wwn=WWN)]
    elif case == "DownloadFailed":
        args = args_for(ImageSource(f"{SERVER}/images/missing.raw", "0" * 64))
        disks = [target]
    else:  # on virtio-scsi: the report lists the disk it saw
        args = args_for(ImageSource(raw, "0" * 64), {"serialNumber": "NO-SUCH-DISK"})
        disks = [Disk(target.path, "scsi", serial="SCSI-01")]
    result = boot(ramdisk, site, case, args, disks)
    assert result.callback.query["result"] == "failed"
    assert result.callback.query["reason"] == case, result.callback.body
    facts = result.callback.facts()
    if case == "BadChecksum":
        assert facts["disk"] == "/dev/sda"
        assert facts["bytes_written"] == str(IMAGE_BYTES)
        assert facts["wiped"] == "/dev/sda"  # the bad image cannot boot
        assert not any(head(target.path))
    elif case == "DownloadFailed":
        assert "404" in result.callback.body
        assert not any(head(target.path))
    else:
        assert "sda size=5GiB" in result.callback.body
        assert "serial=SCSI-01" in result.callback.body
    record(f"{case}: {timings(result)}\n")


@pytest.mark.integration
@pytest.mark.timeout(BOOT_TIMEOUT + 120)
def test_cleaning_wipes_partition_tables_at_both_ends_of_every_disk(
    ramdisk: DeployRamdisk, site: Site, images: Images, tmp_path: Path
) -> None:
    mbr_disk = disk_file(tmp_path / "mbr.raw", 5)
    gpt_disk = disk_file(tmp_path / "gpt.raw", 5)
    for disk, image in ((mbr_disk, images.raw), (gpt_disk, images.gpt_raw)):
        _place(disk.path, image, 0)
    _tool("sfdisk", "-q", "--relocate", "gpt-bak-std", str(gpt_disk.path))
    seed_offset = add_seed_partition(mbr_disk.path, tmp_path)
    assert partitions(gpt_disk.path)
    assert partitions(mbr_disk.path)
    result = boot(
        ramdisk, site, "cleaning", cleaning_args(f"{SERVER}/cleaned/{SECRET}", KEYED), [mbr_disk, gpt_disk]
    )
    assert result.callback.query["result"] == "cleaned", result.callback.body
    assert result.callback.path == f"/cleaned/{SECRET}"
    assert result.callback.facts()["disks_cleaned"] == "/dev/vda /dev/vdb"
    for disk in (mbr_disk, gpt_disk):
        size = disk.path.stat().st_size
        with disk.path.open("rb") as f:
            head = f.read(2 * MIB)
            f.seek(size - MIB)
            tail = f.read()
        assert not any(head[:MIB]), f"{disk.path.name}: metadata left at the start"
        assert not any(tail), f"{disk.path.name}: metadata left at the end"
        assert head[MIB + 1080 : MIB + 1082] != b"\x53\xef", (
            f"{disk.path.name}: the ext4 superblock is intact"
        )
        listing = subprocess.run(["sfdisk", "--dump", str(disk.path)], capture_output=True, check=False)
        assert listing.returncode != 0, listing.stdout
    with mbr_disk.path.open("rb") as f:
        f.seek(seed_offset)
        assert not any(f.read(SEED_SECTORS * 512)), "the cidata partition (and its secrets) is still there"
    assert result.callback.facts()["cidata_zeroed"] == "/dev/vda2"
    record(f"cleaning: {timings(result)}\n")
