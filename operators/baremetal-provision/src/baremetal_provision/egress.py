"""Where the image cache may fetch from.

A cluster author names an image URL and the operator fetches it from inside the management cluster, so
without a rule the cache is a way to make the operator's pod GET anything it can reach: the API server's
loopback ports, a cloud's link-local metadata service, another container of the pod. Every URL the cache
fetches, and every redirect it follows, must be http(s) and its host must resolve only to addresses that
are neither loopback, link-local, unspecified nor multicast, nor one of the operator's own; when
`CAPFLEET_IMAGE_SOURCE_CIDRS` lists networks, only to addresses inside them (which is also how a lab
whose image server is on loopback allows it). A host name is checked where it is resolved for the
connection (`CheckedResolver`, the cache's HTTP client's resolver), so the addresses checked are the
ones connected to: a DNS answer that changes between a check and the connection (DNS rebinding) cannot
slip past it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

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
    return address_refusal(f"image URL {url}", addresses, allowed, own)


def address_refusal(
    what: str, addresses: Sequence[str], allowed: Sequence[Network], own: Iterable[str]
) -> str | None:
    """Why the cache must not connect to `addresses` (those of `what`); None if it may."""
    if not addresses:
        return f"the host of {what} resolved to no address"
    mine = set(own)
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if allowed:
            if not any(address in network for network in allowed):
                listed = ", ".join(str(n) for n in allowed)
                return f"{what} ({text}) is outside CAPFLEET_IMAGE_SOURCE_CIDRS ({listed})"
            continue
        special = address.is_loopback or address.is_link_local or address.is_unspecified
        if special or address.is_multicast or text in mine:
            return (
                f"{what} ({text}) is a loopback, link-local or the operator's own address; list "
                "the networks images come from in CAPFLEET_IMAGE_SOURCE_CIDRS to allow it"
            )
    return None


def url_refusal(url: str, allowed: Sequence[Network], own: Iterable[str]) -> str | None:
    """What can be refused before connecting: a scheme other than http(s), a host that is an address
    (the HTTP client resolves no address, so `CheckedResolver` never sees it). A host name is checked
    when the connection resolves it."""
    if urlsplit(url).scheme not in {"http", "https"}:
        return f"image URL {url} is not http(s)"
    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None if host else f"image URL {url} names no host"
    return refusal(url, [host], allowed, own)


class RefusedAddress(OSError):
    """A host name resolved to an address the cache may not fetch from."""


class CheckedResolver(AbstractResolver):
    """The image cache's resolver: the addresses a host name resolves to for a connection are checked
    (`address_refusal`) before the connection is made to them; refused, RefusedAddress."""

    def __init__(
        self, allowed: Sequence[Network], own: Iterable[str], inner: AbstractResolver | None = None
    ) -> None:
        self.allowed, self.own = tuple(allowed), frozenset(own)
        self.inner = inner or aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        refused = address_refusal(f"image host {host}", [r["host"] for r in found], self.allowed, self.own)
        if refused is not None:
            raise RefusedAddress(refused)
        return found

    async def close(self) -> None:
        await self.inner.close()


def session(
    allowed: Sequence[Network],
    own: Iterable[str],
    inner: AbstractResolver | None = None,
    timeout: aiohttp.ClientTimeout | None = None,
) -> aiohttp.ClientSession:
    """An HTTP client (TLS verified) that connects only to addresses the policy allows."""
    connector = aiohttp.TCPConnector(resolver=CheckedResolver(allowed, own, inner))
    return aiohttp.ClientSession(connector=connector, timeout=timeout or aiohttp.ClientTimeout(sock_read=300))
