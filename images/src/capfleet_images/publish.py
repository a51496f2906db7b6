"""Copying built artefacts out of the cache into a directory an operator publishes, with their checksums.

The cache (~/.cache/capfleet/...) is the builder's; what goes to hypervisors' storage pools and to the
HTTP server bare-metal servers fetch from is a copy in a directory of the operator's choosing, next to a
SHA256SUMS file in `sha256sum` format (`sha256sum -c SHA256SUMS` checks it after any transfer). A file
can also get a `<name>.sha256` of its own: baremetal-provision and the deploy ramdisk read the first word
of a checksum URL's file, so CAPFLEET_IMAGE_CHECKSUM may point at disk.raw.sha256 (but not at SHA256SUMS,
whose first word may be another file's digest). Copies keep their holes: disk.raw is mostly holes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

SUMS = "SHA256SUMS"
CHUNK = 1 << 22


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of the file at `path`."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_digest(text: str) -> bool:
    """Whether `text` is a SHA-256 digest as sha256sum writes it (64 lower-case hex digits)."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def sums_text(digests: Mapping[str, str]) -> str:
    """`sha256sum` output for file name → hex digest, one `<digest>  <name>` line each, sorted by name."""
    for name, digest in digests.items():
        if not is_digest(digest):
            raise ValueError(f"not a hex SHA-256 digest for {name}: {digest!r}")
        if not name or "\n" in name or "\\" in name:
            raise ValueError(f"a file name sha256sum cannot list plainly: {name!r}")
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def parse_sums(text: str) -> dict[str, str]:
    """File name → hex digest from `sha256sum` output (text mode `  ` or binary mode ` *`); lines that are
    not such entries are left out."""
    digests: dict[str, str] = {}
    for line in text.splitlines():
        digest, sep, name = line.partition(" ")
        if sep and is_digest(digest) and name[:1] in (" ", "*") and name[1:]:
            digests[name[1:]] = digest
    return digests


def write_sums(directory: Path, digests: Mapping[str, str], own: Iterable[str] = ()) -> Path:
    """Write directory/SHA256SUMS for `digests` (name → hex digest), keeping the entries of a SHA256SUMS
    already there for other files that still exist (the node image and the ramdisk may share a
    directory), and <name>.sha256 for each of `own`; return SHA256SUMS's path."""
    for name in own:
        (directory / f"{name}.sha256").write_text(sums_text({name: digests[name]}))
    sums = directory / SUMS
    kept = parse_sums(sums.read_text()) if sums.is_file() else {}
    kept = {name: d for name, d in kept.items() if name not in digests and (directory / name).is_file()}
    sums.write_text(sums_text({**kept, **digests}))
    return sums


def copy_sparse(source: Path, target: Path) -> None:
    """Copy `source` to `target`, leaving its holes as holes (where the file system reports them)."""
    with source.open("rb") as src, target.open("wb") as dst:
        size = os.fstat(src.fileno()).st_size
        try:
            extents = list(_data_extents(src.fileno(), size))
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            shutil.copyfileobj(src, dst, CHUNK)
            return
        for start, end in extents:
            offset = start
            while offset < end:
                chunk = os.pread(src.fileno(), min(CHUNK, end - offset), offset)
                if not chunk:
                    break
                os.pwrite(dst.fileno(), chunk, offset)
                offset += len(chunk)
        dst.truncate(size)


def _data_extents(fd: int, size: int) -> Iterable[tuple[int, int]]:
    """(start, end) of each stretch of data in the open file `fd` of `size` bytes, holes skipped."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as error:
            if error.errno == errno.ENXIO:  # only a hole is left
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        offset = end


def publish(files: Mapping[str, Path], output: Path, own: Iterable[str] = ()) -> dict[str, str]:
    """Copy `files` (name in `output` → source) into directory `output` (made if missing), each through a
    temporary name so a half-copied file never has its final name, then write SHA256SUMS (and a
    <name>.sha256 for each of `own`). Returns name → hex digest of what was written."""
    output.mkdir(parents=True, exist_ok=True)
    digests: dict[str, str] = {}
    for name, source in files.items():
        target = output / name
        partial = output / f".{name}.partial"
        try:
            copy_sparse(source, partial)
            partial.chmod(0o644)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        digests[name] = sha256_file(target)
    write_sums(output, digests, own)
    return digests
