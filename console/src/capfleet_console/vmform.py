"""The "Create VM" form: checked field by field, then made into a LibvirtVM and its user-data Secret.

Pure. The form asks for what a user knows (name, size, image, an SSH public key or their own user-data);
the rest comes from the console's settings (the network VMs attach to). The Secret holds the user-data
the VM boots with; the console creates it first and then the VM, and makes the VM its owner, so the
Secret goes with the VM. Both record who asked (`capfleet.dev/created-by`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capfleet.api import kinds
from capfleet.api.libvirt import USER_DATA_LABEL
from capfleet.tables import CREATED_BY, CREATOR_LABEL, creator_label

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")
SSH_KEY = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( .*)?$"
)
USER_DATA_LIMIT = 16 * 1024
SIZES = {"vcpus": (1, 64), "memory_gib": (1, 512), "disk_gib": (1, 4096)}


@dataclass(frozen=True)
class VMRequest:
    name: str
    vcpus: int
    memory_gib: int
    disk_gib: int
    image: str
    user_data: str


def parse(form: Mapping[str, str], images: Sequence[str]) -> tuple[VMRequest | None, dict[str, str]]:
    """The request, or None and what is wrong, by field name."""
    problems: dict[str, str] = {}
    name = form.get("name", "").strip()
    if not NAME.match(name):
        problems["name"] = "lower-case letters, digits and '-', at most 52, starting and ending alphanumeric"
    numbers: dict[str, int] = {}
    for field, (low, high) in SIZES.items():
        text = form.get(field, "").strip()
        if not text.isdigit() or not low <= int(text) <= high:
            problems[field] = f"a whole number from {low} to {high}"
        else:
            numbers[field] = int(text)
    image = form.get("image", "")
    if image not in images:
        problems["image"] = "one of the images offered"
    user_data = user_data_of(form.get("ssh_key", "").strip(), form.get("user_data", "").strip(), problems)
    if problems:
        return None, problems
    return VMRequest(name, numbers["vcpus"], numbers["memory_gib"], numbers["disk_gib"], image, user_data), {}


def user_data_of(ssh_key: str, user_data: str, problems: dict[str, str]) -> str:
    if bool(ssh_key) == bool(user_data):
        problems["ssh_key"] = "give either an SSH public key or your own user-data"
        return ""
    if ssh_key:
        if not SSH_KEY.match(ssh_key) or "\n" in ssh_key:
            problems["ssh_key"] = "one OpenSSH public key line (ssh-ed25519 AAAA… you@host)"
            return ""
        return f"#cloud-config\nssh_authorized_keys:\n  - {ssh_key}\n"
    if len(user_data.encode()) > USER_DATA_LIMIT:
        problems["user_data"] = f"at most {USER_DATA_LIMIT // 1024} KiB"
    elif not user_data.startswith(("#cloud-config", "#!")):
        problems["user_data"] = "cloud-config (starting #cloud-config) or a script (starting #!)"
    return user_data


def secret_name(vm: str) -> str:
    return f"{vm}-user-data"


def user_data_secret(request: VMRequest, creator: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(request.name),
            "labels": {USER_DATA_LABEL: "true"},
            "annotations": {CREATED_BY: creator},
        },
        "type": "Opaque",
        "data": {"value": base64.b64encode(request.user_data.encode()).decode()},
    }


def mac_address(namespace: str, name: str) -> str:
    """A locally administered MAC from the VM's namespace and name: the same VM asked for twice gets the
    same one (the creator chooses MACs, deterministically, as the glue does)."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def libvirt_vm(
    request: VMRequest, namespace: str, creator: str, interface: Mapping[str, Any]
) -> dict[str, Any]:
    """The LibvirtVM; `interface` is the console's setting for the VMs' one NIC."""
    return {
        "apiVersion": kinds.LIBVIRT_VM.resource.api_version,
        "kind": kinds.LIBVIRT_VM.kind,
        "metadata": {
            "name": request.name,
            "annotations": {CREATED_BY: creator},
            "labels": {CREATOR_LABEL: creator_label(creator)},
        },
        "spec": {
            "vcpus": request.vcpus,
            "memoryMiB": request.memory_gib * 1024,
            "disks": [{"name": "root", "sizeGiB": request.disk_gib, "sourceImage": request.image}],
            "interfaces": [{**interface, "macAddress": mac_address(namespace, request.name)}],
            "cloudInit": {
                "userDataSecretRef": {"name": secret_name(request.name), "key": "value"},
                "hostname": request.name,
            },
        },
    }


def owned_by(vm: Mapping[str, Any]) -> dict[str, Any]:
    """The patch that makes the VM the owner of its user-data Secret (garbage-collected with it)."""
    meta = vm["metadata"]
    ref = {"apiVersion": vm["apiVersion"], "kind": vm["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {"metadata": {"ownerReferences": [ref]}}
