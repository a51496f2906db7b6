"""What `--output` writes: SHA256SUMS exactly as sha256sum writes (and checks) it, the per-file .sha256 a
checksum URL may point at, and copies that keep a disk image's holes."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from capfleet_images.publish import SUMS, copy_sparse, parse_sums, publish, sha256_file, sums_text, write_sums

A, B = hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"b").hexdigest()


def test_sums_are_sha256sum_lines_sorted_by_name() -> None:
    assert sums_text({"disk.raw": B, "disk.qcow2": A}) == f"{A}  disk.qcow2\n{B}  disk.raw\n"
    assert sums_text({}) == ""


@pytest.mark.parametrize(
    ("name", "digest"), [("x", "abc"), ("x", A.upper()), ("x", A + "0"), ("two\nlines", A), ("", A)]
)
def test_sums_refuse_what_sha256sum_would_not_read_back(name: str, digest: str) -> None:
    with pytest.raises(ValueError, match=r"digest|file name"):
        sums_text({name: digest})


def test_sums_are_read_back_in_text_and_binary_mode_and_junk_is_skipped() -> None:
    text = f"{A}  disk.qcow2\n{B} *vmlinuz\nnot a line\n{A[:10]}  short\n\n{B}  name with spaces\n"
    assert parse_sums(text) == {"disk.qcow2": A, "vmlinuz": B, "name with spaces": B}
    assert parse_sums(sums_text({"a": A, "b": B})) == {"a": A, "b": B}


def test_write_sums_keeps_other_files_entries_and_writes_own_checksum_files(tmp_path: Path) -> None:
    (tmp_path / "disk.raw").write_bytes(b"b")
    (tmp_path / "vmlinuz").write_bytes(b"a")
    (tmp_path / SUMS).write_text(f"{A}  vmlinuz\n{A}  gone.img\n{A}  disk.raw\n")
    sums = write_sums(tmp_path, {"disk.raw": B}, own=["disk.raw"])
    assert sums == tmp_path / SUMS
    assert sums.read_text() == f"{B}  disk.raw\n{A}  vmlinuz\n"  # gone.img is gone, disk.raw replaced
    assert (tmp_path / "disk.raw.sha256").read_text() == f"{B}  disk.raw\n"


def test_sums_pass_sha256sum_check(tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum here")
    for name, data in (("disk.qcow2", b"q" * 1000), ("disk.raw", b"r" * 5000)):
        (tmp_path / name).write_bytes(data)
    publish({"disk.qcow2": tmp_path / "disk.qcow2", "disk.raw": tmp_path / "disk.raw"}, tmp_path / "out")
    result = subprocess.run(
        ["sha256sum", "--strict", "-c", SUMS],
        cwd=tmp_path / "out",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _sparse(path: Path, size: int, pieces: dict[int, bytes]) -> None:
    with path.open("wb") as out:
        for offset, data in pieces.items():
            out.seek(offset)
            out.write(data)
        out.truncate(size)


def test_a_copy_has_the_same_bytes_and_keeps_holes(tmp_path: Path) -> None:
    source, target = tmp_path / "disk.raw", tmp_path / "copy.raw"
    size = 64 << 20
    _sparse(source, size, {0: b"mbr" * 100, 20 << 20: b"\x01" * 4096, size - 10: b"end"})
    copy_sparse(source, target)
    assert target.stat().st_size == size
    assert sha256_file(target) == sha256_file(source) == hashlib.sha256(source.read_bytes()).hexdigest()
    if source.stat().st_blocks * 512 < size // 2:  # this file system keeps holes
        assert target.stat().st_blocks * 512 < size // 2


def test_a_copy_of_a_file_without_holes_or_of_nothing(tmp_path: Path) -> None:
    for data in (b"", b"x" * (5 << 20)):
        (tmp_path / "in").write_bytes(data)
        copy_sparse(tmp_path / "in", tmp_path / "out")
        assert (tmp_path / "out").read_bytes() == data


def test_publish_copies_under_final_names_only(tmp_path: Path) -> None:
    (tmp_path / "vmlinuz").write_bytes(b"k")
    (tmp_path / "initrd.img").write_bytes(b"i")
    (tmp_path / "vmlinuz").chmod(0o600)
    out = tmp_path / "a" / "b"
    digests = publish({"vmlinuz": tmp_path / "vmlinuz", "initrd.img": tmp_path / "initrd.img"}, out)
    assert digests == {
        "vmlinuz": hashlib.sha256(b"k").hexdigest(),
        "initrd.img": hashlib.sha256(b"i").hexdigest(),
    }
    assert sorted(p.name for p in out.iterdir()) == [SUMS, "initrd.img", "vmlinuz"]
    assert (out / "vmlinuz").stat().st_mode & 0o777 == 0o644
    assert parse_sums((out / SUMS).read_text()) == digests
