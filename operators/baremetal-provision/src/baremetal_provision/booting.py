"""What the guests are served: iPXE scripts, kernel arguments and the NoCloud seed (pure functions).

The HTTP server (`serving`) answers with these; keeping them free of I/O lets the exact scripts and
meta-data be unit-tested. The static `boot.ipxe` chains to a per-MAC script, which network-boots the
instance's OS profile with the seed and callback URLs (behind the instance's token) on its command line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

MAC = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$")


def normalize_mac(value: str) -> str | None:
    """`52-54-00-AA-BB-CC` (iPXE's hexhyp) or colon form → `52:54:00:aa:bb:cc`; None when not a MAC."""
    lowered = value.strip().lower()
    return lowered.replace("-", ":") if MAC.match(lowered) else None


def base_url(url: str) -> str:
    return url.rstrip("/")


def boot_script(boot_url: str) -> str:
    """The static first stage every PXE client gets from DHCP."""
    return f"#!ipxe\nchain {base_url(boot_url)}/ipxe?mac=${{net0/mac:hexhyp}}&uuid=${{uuid}}\n"


def exit_script(reason: str) -> str:
    """A script that makes iPXE give up network boot so the firmware boots the next device (the disk)."""
    return f"#!ipxe\necho capfleet: {reason}\nexit\n"


def kernel_args(boot_url: str, token: str, extra: Sequence[str]) -> list[str]:
    base = base_url(boot_url)
    return [*extra, f"ds=nocloud-net;s={base}/seed/{token}/", f"capfleet.callback={base}/callback/{token}"]


def install_script(os_profile: Mapping[str, Any], boot_url: str, token: str) -> str:
    """The per-MAC script: kernel with the seed/callback arguments, initrd, boot."""
    args = " ".join(kernel_args(boot_url, token, os_profile.get("kernelArgs") or []))
    return f"#!ipxe\nkernel {os_profile['kernelURL']} {args}\ninitrd {os_profile['initrdURL']}\nboot\n"


def cleaning_args(boot_url: str, token: str, extra: Sequence[str]) -> list[str]:
    base = base_url(boot_url)
    return [
        *extra,
        "capfleet.mode=cleaning",
        "capfleet.cleaning=metadata",
        f"capfleet.callback={base}/cleaned/{token}",
    ]


def cleaning_profile(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """`spec.cleaningOs`, or the installer profile `spec.os` (told by `capfleet.mode=cleaning`)."""
    profile: Mapping[str, Any] = spec.get("cleaningOs") or spec["os"]
    return profile


def cleaning_script(os_profile: Mapping[str, Any], boot_url: str, token: str) -> str:
    """The per-MAC script while a deleted instance is cleaned: the cleaning profile, which wipes the disk
    metadata and calls back to the cleaning callback; no seed."""
    args = " ".join(cleaning_args(boot_url, token, os_profile.get("kernelArgs") or []))
    return f"#!ipxe\nkernel {os_profile['kernelURL']} {args}\ninitrd {os_profile['initrdURL']}\nboot\n"


def provider_id(namespace: str, name: str, spec: Mapping[str, Any]) -> str:
    return str(spec.get("providerID") or f"capfleet://metal/{namespace}/{name}")


def meta_data(namespace: str, name: str, spec: Mapping[str, Any]) -> str:
    """NoCloud meta-data (YAML; JSON is YAML) with instance-id, local-hostname and provider-id."""
    data = {
        "instance-id": f"{namespace}-{name}",
        "local-hostname": spec.get("hostname") or name,
        "provider-id": provider_id(namespace, name, spec),
    }
    return json.dumps(data, indent=1) + "\n"


def network_config(spec: Mapping[str, Any]) -> str | None:
    """network-config (v2) from spec.networkData, or None when the guest should use DHCP."""
    data = spec.get("networkData")
    return json.dumps(data, indent=1) + "\n" if data else None
