"""Unit tests for the libvirt harness pieces that need no daemon: cpio, module order, serial parsing."""

from __future__ import annotations

import base64
import io
import subprocess
from pathlib import Path

import pytest

from capfleet_e2e.libvirt.image import seed_from_serial
from capfleet_images.cpio import CpioWriter
from capfleet_images.hostkernel import KernelError, find_kernel, module_files


def test_cpio_archive_is_read_back_by_cpio_tool(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = CpioWriter(out)
    writer.directory("bin")
    writer.file("bin/hello", b"hi\n", 0o755)
    writer.symlink("bin/sh", "hello")
    writer.trailer()
    data = out.getvalue()
    assert len(data) % 512 == 0
    assert data.startswith(b"070701")
    listing = subprocess.run(
        ["busybox", "cpio", "-t"], input=data, capture_output=True, check=True, cwd=tmp_path
    ).stdout.decode()
    assert listing.split() == ["bin", "bin/hello", "bin/sh"]


def test_seed_is_parsed_exactly_from_a_noisy_serial_log() -> None:
    user_data = b"#cloud-config\nno trailing newline"
    encoded = base64.b64encode(user_data).decode()
    log = (
        "[    1.0] noise\r\n"
        "=== capfleet-testimage begin user-data base64 ===\r\n"
        f"{encoded[:10]}\r\n{encoded[10:]}\r\n"
        "=== capfleet-testimage end user-data base64 ===\r\n"
    )
    assert seed_from_serial(log) == {"user-data": user_data}


def test_modules_come_after_their_dependencies() -> None:
    try:
        _, version = find_kernel()
    except KernelError:
        pytest.skip("no Debian kernel installed")
    names = [p.name.split(".ko")[0] for p in module_files(version, ("virtio_net", "sr_mod"))]
    assert names.index("virtio") < names.index("virtio_net")
    assert names.index("cdrom") < names.index("sr_mod")
    assert len(names) == len(set(names))
