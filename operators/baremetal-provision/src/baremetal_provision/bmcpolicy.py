"""Which BMCs the operator sends a cluster's BMC credentials to.

A BMC address comes from NetBox (a device's custom field or out-of-band IP), so whoever can edit a device
there chooses where the password goes. Before the credentials Secret is even read, the address must use a
protocol that does not send them in the clear (Redfish over HTTPS, or IPMI's RMCP+; `redfish+http` only
when the HybridCluster opts in) and, when the cluster lists `bmcAddressCIDRs`, its host must resolve only
to addresses inside them. A refusal is InvalidSpec with reason `BMCAddressRefused`: the instance shows it
as its Ready condition and an Event, and nothing is retried until the spec changes (a host name that does
not resolve is retried, as an unreachable BMC is).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from baremetal_provision.backends import bmc
from baremetal_provision.backends.base import IpmiAddress
from capfleet import errors
from capfleet.api.baremetal import BMC

REFUSED = "BMCAddressRefused"


def host_of(address: str) -> str:
    """The host part of a BMC address (validated by bmc.parse_address; raises InvalidSpec)."""
    parsed = bmc.parse_address(address)
    if isinstance(parsed, IpmiAddress):
        return parsed.host.strip("[]")
    return urlsplit(parsed.base_url).hostname or ""


def refusal(given: BMC, resolved: Iterable[str]) -> str | None:
    """Why the credentials must not be sent to `given` whose host resolved to `resolved`; None if they may."""
    if given.address.startswith("redfish+http://") and not given.allow_redfish_http:
        return (
            f"BMC address {given.address} is plain HTTP, which would send the credentials unencrypted: use"
            " redfish+https, or set allowRedfishHTTP on the HybridCluster"
        )
    if not given.address_cidrs:
        return None
    networks = [ipaddress.ip_network(cidr, strict=False) for cidr in given.address_cidrs]
    addresses = sorted(set(resolved))
    if not addresses:
        return f"the host of BMC address {given.address} resolved to no address"
    outside = [a for a in addresses if not any(ipaddress.ip_address(a) in n for n in networks)]
    if outside:
        return (
            f"BMC address {given.address} ({', '.join(outside)}) is outside the cluster's bmcAddressCIDRs"
            f" ({', '.join(given.address_cidrs)})"
        )
    return None


async def resolve(host: str) -> Sequence[str]:
    """Every address `host` resolves to (itself when it is an address); [] when it does not resolve."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])) for info in found]


async def admit(given: BMC) -> None:
    """Raise InvalidSpec (reason BMCAddressRefused) unless the credentials may be sent to `given`."""
    host = host_of(given.address)
    resolved = await resolve(host) if given.address_cidrs else []
    if given.address_cidrs and not resolved:
        # A name that does not resolve now may later (DNS being down is no reason to give up).
        raise errors.BackendUnavailable(f"BMC host {host} does not resolve", reason="BMCAddressUnresolved")
    reason = refusal(given, resolved)
    if reason is not None:
        raise errors.InvalidSpec(reason, reason=REFUSED)
