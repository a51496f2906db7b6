"""CA bundles as files, for the HTTP clients that verify only against a path (requests, under pynetbox and
sushy).

A connection Secret carries its `caBundle` as PEM text. Each connection used to write it to a temporary
file of its own, removed when the connection closed: a process killed with connections open left them in
/tmp, and NetBox clients never removed theirs. Here a bundle is one file per distinct bundle, named by its
digest, in a directory only this user may write: connections to the same BMCs or NetBox share it, and
nothing accumulates. A CA bundle is public, so the file needs no removing; it is written whole and
renamed into place, so a reader never sees half of it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path


class UnsafeDirectory(RuntimeError):
    """The directory for CA files belongs to another user or others may write to it."""


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"capfleet-ca-{os.getuid()}"


def _checked(directory: Path) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    found = os.lstat(directory)
    # Someone else may have made the directory first (its name is predictable): trust only our own.
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise UnsafeDirectory(f"{directory} is not a directory only this user may write to")
    return directory


def ca_file(pem: str, directory: Path | None = None) -> str:
    """The path of a file holding `pem`, the same path for the same bundle."""
    where = _checked(directory or default_directory())
    path = where / f"{hashlib.sha256(pem.encode()).hexdigest()[:32]}.pem"
    if not path.is_file():
        handle, staging = tempfile.mkstemp(dir=where, suffix=".partial")
        with os.fdopen(handle, "w") as out:
            out.write(pem)
        os.replace(staging, path)
    return str(path)
