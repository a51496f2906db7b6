"""The deploy ramdisk's kernel command line, written from what a BaremetalInstance says (pure functions).

deploy_init.sh reads these arguments; keeping their spelling in one place lets the tests boot exactly what
the operator will put in its iPXE scripts. Root device hints use Metal3's names (`rootDeviceHints`:
deviceName, serialNumber, wwn, minSizeGigabytes); all given hints must match one disk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# `quiet loglevel=3` also keeps the kernel from printing its command line (it holds the seed's URL).
BASE_ARGS = ("console=ttyS0", "quiet", "loglevel=3", "panic=-1")
HINT_KEYS = {"deviceName": "name", "serialNumber": "serial", "wwn": "wwn", "minSizeGigabytes": "min_size_gib"}
SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
FORMATS = ("raw", "qcow2")


@dataclass(frozen=True)
class ImageSource:
    """An image to deploy: `checksum` is a SHA-256 hex digest or the URL of a file that starts with one."""

    url: str
    checksum: str
    format: str = "raw"


def hints_arg(hints: Mapping[str, str | int]) -> str:
    """Metal3 root device hints as the value of `capfleet.hints=` (`name:/dev/sdb,min_size_gib:20`)."""
    parts = []
    for key, value in hints.items():
        if key not in HINT_KEYS:
            raise ValueError(f"unsupported root device hint {key!r} (supported: {', '.join(HINT_KEYS)})")
        text = str(value)
        if not text or re.search(r"[\s,]", text):
            raise ValueError(f"root device hint {key}={text!r} must be non-empty, without spaces or commas")
        if key == "minSizeGigabytes" and not text.isdigit():
            raise ValueError(f"minSizeGigabytes must be a whole number, not {text!r}")
        parts.append(f"{HINT_KEYS[key]}:{text}")
    return ",".join(parts)


def _plain(name: str, value: str) -> str:
    if not value or re.search(r"\s", value):
        raise ValueError(f"{name} must be non-empty and without spaces: {value!r}")
    return value


def deploy_args(
    image: ImageSource, seed_url: str, callback: str, hints: Mapping[str, str | int] | None = None
) -> list[str]:
    """The arguments (after BASE_ARGS) that make the ramdisk write `image` and the seed, then call back."""
    if image.format not in FORMATS:
        raise ValueError(f"image format must be one of {', '.join(FORMATS)}, not {image.format!r}")
    checksum = _plain("checksum", image.checksum)
    by = "capfleet.checksum" if SHA256.match(checksum) else "capfleet.checksum_url"
    if by == "capfleet.checksum_url" and not checksum.startswith(("http://", "https://")):
        raise ValueError("checksum must be a SHA-256 hex digest or an http(s) URL to one")
    args = [
        "capfleet.mode=deploy",
        f"capfleet.image={_plain('image url', image.url)}",
        f"{by}={checksum.lower() if by == 'capfleet.checksum' else checksum}",
        f"capfleet.format={image.format}",
        f"ds=nocloud-net;s={_plain('seed url', seed_url).rstrip('/')}/",
        f"capfleet.callback={_plain('callback', callback)}",
    ]
    if hints:
        args.append(f"capfleet.hints={hints_arg(hints)}")
    return args


def cleaning_args(callback: str) -> list[str]:
    """The arguments that make the ramdisk wipe every disk's metadata, then call back."""
    return [
        "capfleet.mode=cleaning",
        "capfleet.cleaning=metadata",
        f"capfleet.callback={_plain('callback', callback)}",
    ]
