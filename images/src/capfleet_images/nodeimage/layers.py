"""Container image layers as reproducible, uncompressed tars, made from a file mapping or a directory tree.

A layer of a docker archive is a plain tar of the files it adds. Here every member is owned by 0:0, has one
fixed mtime and comes in path order, and each file's parent directories are added, so the same inputs give
byte-identical layers (and so the same image IDs) on every build and every machine.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# 2000-01-01T00:00:00Z: any fixed time will do; 0 would make some tools show files as "from 1970".
MTIME = 946684800
DIRECTORY_MODE = 0o755
SYMLINK_MODE = 0o777

Content = bytes | Path
# In-image absolute path → (the content, or the host file holding it; permission bits).
Files = Mapping[str, tuple[Content, int]]


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a regular file (`content`), a symlink (`link`), or else a directory."""

    path: str  # relative to the image root: "usr/local/bin/etcd"
    mode: int
    content: Content | None = None
    link: str | None = None


def in_image(path: str) -> str:
    """An absolute in-image path as a layer member name ("/usr/bin/x" → "usr/bin/x")."""
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts or len(pure.parts) < 2:
        raise ValueError(f"an image path must be absolute, below / and without '..': {path!r}")
    return str(pure.relative_to("/"))


def file_entries(files: Files, directories: Mapping[str, int] = {}) -> list[Entry]:
    """Entries for `files` and for `directories` ({absolute path: mode})."""
    entries = [Entry(in_image(path), mode, content=content) for path, (content, mode) in files.items()]
    return entries + [Entry(in_image(path), mode) for path, mode in directories.items()]


def tree_entries(root: Path) -> list[Entry]:
    """Entries for everything below the host directory `root` (files, directories, symlinks as such)."""
    entries: list[Entry] = []

    def visit(directory: Path, prefix: PurePosixPath) -> None:
        for item in sorted(os.scandir(directory), key=lambda e: e.name):
            path = prefix / item.name
            mode = stat.S_IMODE(item.stat(follow_symlinks=False).st_mode)
            if item.is_symlink():
                entries.append(Entry(str(path), SYMLINK_MODE, link=os.readlink(item.path)))
            elif item.is_dir():
                entries.append(Entry(str(path), mode))
                visit(Path(item.path), path)
            elif item.is_file():
                entries.append(Entry(str(path), mode, content=Path(item.path)))
            else:
                raise ValueError(f"{item.path}: only files, directories and symlinks go into a layer")

    visit(root, PurePosixPath())
    return entries


def with_parents(entries: Iterable[Entry]) -> list[Entry]:
    """`entries` plus each parent directory none of them names (mode 0755), parents first, by path."""
    by_path = {entry.path: entry for entry in entries}
    for path in list(by_path):
        for parent in PurePosixPath(path).parents[:-1]:  # [-1] is "."
            by_path.setdefault(str(parent), Entry(str(parent), DIRECTORY_MODE))
    return [by_path[path] for path in sorted(by_path, key=lambda p: PurePosixPath(p).parts)]


def _header(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mode = entry.mode
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if entry.link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, entry.link
    elif entry.content is None:
        info.type = tarfile.DIRTYPE
    elif isinstance(entry.content, Path):
        info.size = entry.content.stat().st_size
    else:
        info.size = len(entry.content)
    return info


def layer_tar(entries: Iterable[Entry]) -> bytes:
    """The uncompressed layer tar holding `entries` and their parent directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in with_parents(entries):
            info = _header(entry)
            if isinstance(entry.content, Path):
                with entry.content.open("rb") as source:
                    tar.addfile(info, source)
            elif isinstance(entry.content, bytes):
                tar.addfile(info, io.BytesIO(entry.content))
            else:
                tar.addfile(info)
    return buffer.getvalue()
