"""The `cidata` ISO a VM boots with, holding its NoCloud seed: user-data, meta-data and network-config.

cloud-init (and capfleet's test image) finds its seed on a volume labelled `cidata`. The ISO is built in
memory with pycdlib (no genisoimage on the operator's image) and uploaded through the libvirt connection,
so nothing is written to the operator's disk. meta-data and network-config are rendered by
`capfleet.cloudinit`, the fleet's one renderer, so a VM and a server on one network boot alike.
Pure functions, though two builds of the same files differ in their timestamps: compare seeds by the files
they hold (`files_of`), not byte for byte.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Mapping

import pycdlib

SEED_FILES = ("user-data", "meta-data", "network-config")


def seed_files(user_data: bytes, meta: bytes, network: bytes) -> dict[str, bytes]:
    return {"user-data": user_data, "meta-data": meta, "network-config": network}


def cidata_iso(files: Mapping[str, bytes]) -> bytes:
    """An ISO 9660 image labelled `cidata`; Rock Ridge and Joliet keep the file names as written."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    try:
        for name in sorted(files):
            data = files[name]
            short = re.sub(r"[^A-Z0-9]", "", name.upper())[:8]
            iso.add_fp(io.BytesIO(data), len(data), f"/{short}.;1", rr_name=name, joliet_path=f"/{name}")
        out = io.BytesIO()
        iso.write_fp(out)
    finally:
        iso.close()
    return out.getvalue()


def files_of(iso: bytes) -> dict[str, bytes] | None:
    """The seed files `iso` holds; None when it is no readable ISO (an upload cut off by a kill)."""
    reader = pycdlib.PyCdlib()
    try:
        reader.open_fp(io.BytesIO(iso))
    except pycdlib.pycdlibexception.PyCdlibException:
        return None
    found: dict[str, bytes] = {}
    try:
        for name in SEED_FILES:
            out = io.BytesIO()
            try:
                reader.get_file_from_iso_fp(out, rr_path=f"/{name}")
            except pycdlib.pycdlibexception.PyCdlibException:
                continue
            found[name] = out.getvalue()
    except (ValueError, OSError):
        return None  # extents past the end of a truncated image
    finally:
        reader.close()
    return found


def digest(files: Mapping[str, bytes]) -> str:
    """A digest of the seed's files (not of the ISO's bytes, which differ between builds)."""
    hashed = hashlib.sha256()
    for name in sorted(files):
        hashed.update(f"{name}\0{len(files[name])}\0".encode())
        hashed.update(files[name])
    return hashed.hexdigest()
