"""Where the image cache may fetch from.

A cluster author names an image URL and the operator fetches it from inside the management cluster, so
without a rule the cache is a way to make the operator's pod GET anything it can reach: the API server's
loopback ports, a cloud's link-local metadata service, another container of the pod. Every URL the cache
fetches, and every redirect it follows, must be http(s) and its host must resolve only to addresses that
are neither loopback, link-local, unspecified nor multicast, nor one of the operator's own; when
`CAPFLEET_IMAGE_SOURCE_CIDRS` lists networks, only to addresses inside them (which is also how a lab
whose image server is on loopback allows it). Pure but for `resolve`, which `bmcpolicy` shares.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from baremetal_provision.bmcpolicy import resolve

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_REDIRECTS = 5


def networks_of(cidrs: Iterable[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip())


def own_addresses() -> frozenset[str]:
    """The addresses the pod's host name resolves to (its pod IP in Kubernetes)."""
    try:
        _, _, found = socket.gethostbyname_ex(socket.gethostname())
    except OSError:
        return frozenset()
    return frozenset(found)


def refusal(url: str, addresses: Sequence[str], allowed: Sequence[Network], own: Iterable[str]) -> str | None:
    """Why the cache must not fetch `url`, whose host resolved to `addresses`; None if it may."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        return f"image URL {url} is not http(s)"
    if not addresses:
        return f"the host of image URL {url} resolved to no address"
    mine = set(own)
    for text in addresses:
        address = ipaddress.ip_address(text)
        if allowed:
            if not any(address in network for network in allowed):
                listed = ", ".join(str(n) for n in allowed)
                return f"image URL {url} ({text}) is outside CAPFLEET_IMAGE_SOURCE_CIDRS ({listed})"
            continue
        special = address.is_loopback or address.is_link_local or address.is_unspecified
        if special or address.is_multicast or text in mine:
            return (
                f"image URL {url} ({text}) is a loopback, link-local or the operator's own address; list "
                "the networks images come from in CAPFLEET_IMAGE_SOURCE_CIDRS to allow it"
            )
    return None


async def check(url: str, allowed: Sequence[Network], own: Iterable[str]) -> str | None:
    """`refusal` for `url` as its host resolves now."""
    host = urlsplit(url).hostname or ""
    return refusal(url, await resolve(host) if host else [], allowed, own)
