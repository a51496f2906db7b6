"""What the guests are served: iPXE scripts, kernel arguments and the NoCloud seed (pure functions).

The HTTP server (`serving`) answers with these; keeping them free of I/O lets the exact scripts and
meta-data be unit-tested. The static `boot.ipxe` chains to a per-MAC script, which network-boots capfleet's
deploy ramdisk told which image to write where (`ramdisk_args`), or the instance's custom installer, with
the seed and callback URLs (behind the instance's token) on its command line. When the operator caches
images, the ramdisk fetches the image (and a checksum given as a URL) from the operator, by token.
The seed's meta-data and network-config are rendered by `capfleet.cloudinit`, by the same rules as a
VM's, so one HybridMachine network gives the same guest wherever the machine lands. With `BootTLS`, the
deploy ramdisk reaches the seed, the callback key, the image's checksum and the callbacks over https://
and trusts only the CA it is given (the image itself, checked against its checksum, stays on HTTP);
iPXE's own script, kernel and initrd stay on plain HTTP (stock iPXE trusts only the CAs built into it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from baremetal_provision import ramdisk_args
from capfleet import cloudinit
from capfleet.api.baremetal import BaremetalInstanceSpec, Image, OSProfile

MAC = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$")


def normalize_mac(value: str) -> str | None:
    """`52-54-00-AA-BB-CC` (iPXE's hexhyp) or colon form → `52:54:00:aa:bb:cc`; None when not a MAC."""
    lowered = value.strip().lower()
    return lowered.replace("-", ":") if MAC.match(lowered) else None


@dataclass(frozen=True)
class BootTLS:
    """The boot front's https:// base URL, and its CA as the value of `capfleet.ca=`."""

    url: str
    ca: str


def base_url(url: str) -> str:
    return url.rstrip("/")


def boot_script(boot_url: str) -> str:
    """The static first stage every PXE client gets from DHCP."""
    return f"#!ipxe\nchain {base_url(boot_url)}/ipxe?mac=${{net0/mac:hexhyp}}&uuid=${{uuid}}\n"


def exit_script(reason: str) -> str:
    """A script that makes iPXE give up network boot so the firmware boots the next device (the disk)."""
    return f"#!ipxe\necho capfleet: {reason}\nexit\n"


def seed_url(base: str, token: str) -> str:
    return f"{base}/seed/{token}/"


def kernel_args(boot_url: str, token: str, extra: Sequence[str]) -> list[str]:
    base = base_url(boot_url)
    return [*extra, f"ds=nocloud-net;s={seed_url(base, token)}", f"capfleet.callback={base}/callback/{token}"]


def _script(os_profile: OSProfile, args: Sequence[str]) -> str:
    line = ramdisk_args.command_line(args)
    return f"#!ipxe\nkernel {os_profile.kernel_url} {line}\ninitrd {os_profile.initrd_url}\nboot\n"


def install_script(os_profile: OSProfile, boot_url: str, token: str) -> str:
    """The per-MAC script of a custom installer: kernel with the seed/callback arguments, initrd, boot."""
    return _script(os_profile, kernel_args(boot_url, token, os_profile.kernel_args))


def ramdisk_profile(kernel_url: str, initrd_url: str) -> OSProfile:
    """capfleet's deploy ramdisk as a profile: its kernel, initrd and base arguments."""
    return OSProfile(kernel_url=kernel_url, initrd_url=initrd_url, kernel_args=list(ramdisk_args.BASE_ARGS))


def image_source(
    image: Image, base: str, token: str, cached: bool, checksum_base: str | None = None
) -> ramdisk_args.ImageSource:
    """Where the ramdisk fetches the image and its checksum: as given, or from the operator's cache (the
    checksum from `checksum_base` when given: over TLS, while the image itself stays on plain HTTP)."""
    if not cached:
        return ramdisk_args.ImageSource(image.url, image.checksum, image.format)
    # The token goes in the query, which the ramdisk leaves out of everything it prints.
    digest_given = ramdisk_args.SHA256.match(image.checksum)
    checksum = image.checksum if digest_given else f"{checksum_base or base}/images/sha256?token={token}"
    return ramdisk_args.ImageSource(f"{base}/images/image?token={token}", checksum, image.format)


def deploy_script(
    spec: BaremetalInstanceSpec,
    ramdisk: OSProfile,
    boot_url: str,
    token: str,
    *,
    cached: bool,
    tls: BootTLS | None = None,
) -> str:
    """The per-MAC script that has the deploy ramdisk write `spec.image` and the seed, then call back."""
    assert spec.image is not None
    plain = base_url(boot_url)
    base = base_url(tls.url) if tls is not None else plain
    hints = spec.root_device_hints.to_wire() if spec.root_device_hints is not None else None
    # The image itself comes over plain HTTP even with TLS: it holds no secret, its checksum (on the
    # command line, or fetched over TLS) vouches for it, and TLS in a guest without AES instructions
    # (TCG) streamed it at 2 MB/s against 68 MB/s.
    args = ramdisk_args.deploy_args(
        image_source(spec.image, plain, token, cached, checksum_base=base),
        seed_url(base, token),
        f"{base}/callback/{token}",
        hints,
        ramdisk_args.Connection(spec.boot_mac_address, tls.ca if tls else None, key_url(base, token)),
    )
    return _script(ramdisk, [*ramdisk.kernel_args, *args])


def key_url(base: str, token: str) -> str:
    """Where the deploy ramdisk fetches, once, the key it signs its callback with."""
    return f"{base}/key/{token}"


def cleans_with_ramdisk(spec: BaremetalInstanceSpec) -> bool:
    """Whether the deploy ramdisk cleans this instance (an image, no cleaning or custom installer)."""
    return spec.cleaning_os is None and spec.os is None


def cleaning_profile(spec: BaremetalInstanceSpec, ramdisk: OSProfile) -> OSProfile:
    """`spec.cleaningOs`, else what deployed: the deploy ramdisk or the custom installer `spec.os` (both
    told by `capfleet.mode=cleaning`)."""
    return spec.cleaning_os or spec.os or ramdisk


def cleaning_script(
    spec: BaremetalInstanceSpec, ramdisk: OSProfile, boot_url: str, token: str, tls: BootTLS | None = None
) -> str:
    """The per-MAC script while a deleted instance is cleaned: the cleaning profile, which wipes the disk
    metadata and calls back to the cleaning callback (the deploy ramdisk over `tls` when given, with a
    signed report); no seed."""
    if not cleans_with_ramdisk(spec):
        profile = cleaning_profile(spec, ramdisk)
        callback = f"{base_url(boot_url)}/cleaned/{token}"
        args = ramdisk_args.cleaning_args(callback, ramdisk_args.Connection(spec.boot_mac_address))
        return _script(profile, [*profile.kernel_args, *args])
    base = base_url(tls.url if tls is not None else boot_url)
    connection = ramdisk_args.Connection(spec.boot_mac_address, tls.ca if tls else None, key_url(base, token))
    args = ramdisk_args.cleaning_args(f"{base}/cleaned/{token}", connection)
    return _script(ramdisk, [*ramdisk.kernel_args, *args])


def provider_id(namespace: str, name: str, spec: BaremetalInstanceSpec) -> str:
    return spec.provider_id or f"capfleet://metal/{namespace}/{name}"


def meta_data(namespace: str, name: str, spec: BaremetalInstanceSpec) -> str:
    """NoCloud meta-data YAML: instance-id, local-hostname and provider-id, over `spec.metaData`."""
    return cloudinit.meta_data(
        cloudinit.instance_id(namespace, name),
        spec.hostname or name,
        provider_id(namespace, name, spec),
        spec.meta_data,
    ).decode()


def network_config(spec: BaremetalInstanceSpec) -> str | None:
    """network-config (v2): `spec.networkData` as given, else rendered from `spec.interfaces`; None when
    the guest should use DHCP."""
    if spec.network_data:
        return yaml.safe_dump(spec.network_data, sort_keys=False)
    if spec.interfaces:
        return cloudinit.network_config(spec.interfaces).decode()
    return None
