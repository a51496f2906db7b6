"""The `cidata` ISO a VM boots with, holding its NoCloud seed: user-data, meta-data and network-config.

cloud-init (and capfleet's test image) finds its seed on a volume labelled `cidata`. The ISO is built in
memory with pycdlib (no genisoimage on the operator's image) and uploaded through the libvirt connection,
so nothing is written to the operator's disk. meta-data and network-config are rendered by
`capfleet.cloudinit`, the fleet's one renderer, so a VM and a server on one network boot alike.
The user-data comes only from a Secret meant for VMs (`meant_for_vms`): libvirt-vm reads Secrets
with its own rights, and a user who may create a VM but not read the cluster's CA Secret must not get
it written into their VM's seed by naming it. Pure functions, though two builds of the same files
differ in their timestamps: compare seeds by the files they hold (`files_of`), not byte for byte.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Mapping
from typing import Any

import pycdlib

from capfleet.api.libvirt import BOOTSTRAP_GROUP, CAPI_SECRET_TYPE, USER_DATA_LABEL

SEED_FILES = ("user-data", "meta-data", "network-config")
USER_DATA_NOT_FOR_VMS = "UserDataSecretNotForVMs"


def meant_for_vms(secret: Mapping[str, Any]) -> bool:
    """Whether a Secret may give a VM its user-data: one labelled `libvirt.capfleet.dev/user-data: "true"`
    (which its writer chose to label), or Cluster API's bootstrap data, a `cluster.x-k8s.io/secret` owned
    by a bootstrap config. The cluster's CA, kubeconfig and etcd Secrets are of the same type but owned by
    the control plane, so they are not."""
    meta = secret.get("metadata") or {}
    if (meta.get("labels") or {}).get(USER_DATA_LABEL) == "true":
        return True
    owners = meta.get("ownerReferences") or []
    by_bootstrap = any(str(o.get("apiVersion", "")).split("/")[0] == BOOTSTRAP_GROUP for o in owners)
    return secret.get("type") == CAPI_SECRET_TYPE and by_bootstrap


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
