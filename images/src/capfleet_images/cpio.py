"""A minimal writer for the `newc` cpio format, the format the Linux kernel unpacks an initramfs from.

Writing the archive in Python keeps the deploy ramdisk (and the test harness's test image, which uses it
too) reproducible and free of external tools (no `cpio`, no root for device nodes: /dev/console is just an
archive entry).
"""

from __future__ import annotations

from typing import Protocol

_S_IFDIR = 0o040000
_S_IFREG = 0o100000
_S_IFLNK = 0o120000
_S_IFCHR = 0o020000


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class CpioWriter:
    """Appends entries to a binary stream; call `trailer()` last."""

    def __init__(self, stream: _Sink):
        self.stream = stream
        self.inode = 1
        self.offset = 0

    def _write(self, data: bytes) -> None:
        self.stream.write(data)
        self.offset += len(data)

    def _pad(self) -> None:
        self._write(b"\0" * (-self.offset % 4))

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        encoded = name.encode() + b"\0"
        fields = (
            self.inode, mode, 0, 0,  # ino, mode, uid, gid
            2 if mode & _S_IFDIR == _S_IFDIR else 1, 0, len(data),  # nlink, mtime, filesize
            0, 0, rdev[0], rdev[1], len(encoded), 0,  # dev major/minor, rdev major/minor, namesize, check
        )  # fmt: skip
        self.inode += 1
        self._write(b"070701" + b"".join(f"{f:08X}".encode() for f in fields))
        self._write(encoded)
        self._pad()
        self._write(data)
        self._pad()

    def directory(self, name: str, perms: int = 0o755) -> None:
        self._entry(name, _S_IFDIR | perms)

    def file(self, name: str, data: bytes, perms: int = 0o644) -> None:
        self._entry(name, _S_IFREG | perms, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, _S_IFLNK | 0o777, target.encode())

    def char_device(self, name: str, major: int, minor: int, perms: int = 0o600) -> None:
        self._entry(name, _S_IFCHR | perms, rdev=(major, minor))

    def trailer(self) -> None:
        self._entry("TRAILER!!!", 0)
        self._write(b"\0" * (-self.offset % 512))
