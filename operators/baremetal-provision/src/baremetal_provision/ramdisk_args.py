"""The deploy ramdisk's kernel command line, written from what a BaremetalInstance says (pure functions).

deploy_init.sh reads these arguments; keeping their spelling in one place lets the tests boot exactly what
the operator will put in its iPXE scripts. Root device hints use Metal3's names (`rootDeviceHints`:
deviceName, serialNumber, wwn, minSizeGigabytes); all given hints must match one disk. `capfleet.bootif`
names the NIC that network-booted (its DHCP lease is the address the attempt is bound to), and
`capfleet.ca` the CA (one certificate, base64 DER) the ramdisk alone trusts for the boot server's https://
URLs. A command line longer than the kernel keeps would be cut without a word: it is refused instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# `quiet loglevel=3` also keeps the kernel from printing its command line (it holds the seed's URL).
BASE_ARGS = ("console=ttyS0", "quiet", "loglevel=3", "panic=-1")
HINT_KEYS = {"deviceName": "name", "serialNumber": "serial", "wwn": "wwn", "minSizeGigabytes": "min_size_gib"}
SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
FORMATS = ("raw", "qcow2")
MAX_COMMAND_LINE = 2047  # x86's COMMAND_LINE_SIZE (2048) with its NUL
PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\s*([A-Za-z0-9+/=\s]+?)\s*-----END CERTIFICATE-----"
)


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


def ca_arg(pem: str) -> str:
    """The value of `capfleet.ca=` for a PEM file holding exactly one certificate: its DER, base64."""
    found = PEM_CERTIFICATE.findall(pem)
    if len(found) != 1:
        raise ValueError(f"the boot server's CA must be one PEM certificate, not {len(found)}")
    return "".join(found[0].split())


@dataclass(frozen=True)
class Connection:
    """How the ramdisk reaches the boot server: the NIC to bring up first, the CA to trust for its https://
    URLs, and where it fetches (once) the key it signs its callback with."""

    boot_mac: str | None = None
    ca: str | None = None
    key_url: str | None = None

    def args(self) -> list[str]:
        found = [f"capfleet.bootif={_plain('boot MAC', self.boot_mac)}"] if self.boot_mac else []
        found += [f"capfleet.ca={_plain('ca', self.ca)}"] if self.ca else []
        return [*found, f"capfleet.key={_plain('key url', self.key_url)}"] if self.key_url else found


def command_line(args: Sequence[str]) -> str:
    """`args` as the kernel's command line; ValueError when the kernel would cut it."""
    line = " ".join(args)
    if len(line) > MAX_COMMAND_LINE:
        raise ValueError(f"a kernel command line of {len(line)} characters, over {MAX_COMMAND_LINE}")
    return line


def deploy_args(
    image: ImageSource,
    seed_url: str,
    callback: str,
    hints: Mapping[str, str | int] | None = None,
    connection: Connection | None = None,
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
    return [*args, *(connection or Connection()).args()]


def cleaning_args(callback: str, connection: Connection | None = None) -> list[str]:
    """The arguments that make the ramdisk wipe every disk's metadata, then call back."""
    return [
        "capfleet.mode=cleaning",
        "capfleet.cleaning=metadata",
        f"capfleet.callback={_plain('callback', callback)}",
        *(connection or Connection()).args(),
    ]
