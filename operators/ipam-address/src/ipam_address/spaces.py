"""The set of addresses a pool may hand out, as sorted disjoint integer intervals.

A HybridIPPool lists CIDRs, ranges and single addresses, minus exclusions, the gateway and (unless asked)
reserved network/broadcast addresses. Allocation must not enumerate every address of a pool per claim,
so the pool becomes a few intervals once per spec change, and `next_free` walks them from a cursor,
asking an O(1) "taken?" question per candidate.
"""

from __future__ import annotations

import ipaddress
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from capfleet import errors

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Interval = tuple[int, int]  # inclusive bounds


def canonical(address: str) -> str:
    """An address in canonical text form (no mask), so that index keys compare equal."""
    return str(ipaddress.ip_address(address.split("/", 1)[0].strip()))


def _interval(entry: str, *, skip_reserved: bool) -> tuple[int, Interval]:
    """(IP version, interval) of one address entry: an IP, a CIDR, or a 'first-last' range."""
    text = entry.strip()
    try:
        if "-" in text:
            first_text, last_text = (part.strip() for part in text.split("-", 1))
            first, last = ipaddress.ip_address(first_text), ipaddress.ip_address(last_text)
            if first.version != last.version or int(first) > int(last):
                raise ValueError(f"{text!r} is not a range from a lower to a higher address of one family")
            return first.version, (int(first), int(last))
        if "/" in text:
            network = ipaddress.ip_network(text, strict=False)
            low, high = int(network.network_address), int(network.broadcast_address)
            if skip_reserved and network.num_addresses > 2:
                low += 1  # the network address (IPv6: the subnet-router anycast address)
                if network.version == 4:
                    high -= 1  # the broadcast address
            return network.version, (low, high)
        address = ipaddress.ip_address(text)
        return address.version, (int(address), int(address))
    except ValueError as exc:
        raise errors.InvalidSpec(f"invalid address entry {entry!r}: {exc}", reason="InvalidAddress") from exc


def _normalise(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _subtract(intervals: Sequence[Interval], holes: Sequence[Interval]) -> list[Interval]:
    result: list[Interval] = []
    for low, high in intervals:
        pieces = [(low, high)]
        for hole_low, hole_high in holes:
            next_pieces: list[Interval] = []
            for piece_low, piece_high in pieces:
                if hole_high < piece_low or hole_low > piece_high:
                    next_pieces.append((piece_low, piece_high))
                    continue
                if piece_low < hole_low:
                    next_pieces.append((piece_low, hole_low - 1))
                if hole_high < piece_high:
                    next_pieces.append((hole_high + 1, piece_high))
            pieces = next_pieces
        result.extend(pieces)
    return result


@dataclass(frozen=True)
class AddressSpace:
    """The allocatable addresses of one pool: one IP version, sorted disjoint inclusive intervals."""

    version: int
    intervals: tuple[Interval, ...]

    @property
    def total(self) -> int:
        return sum(high - low + 1 for low, high in self.intervals)

    def __contains__(self, address: str) -> bool:
        value = ipaddress.ip_address(address)
        if value.version != self.version:
            return False
        position = bisect_right(self.intervals, (int(value), 1 << 129)) - 1
        return position >= 0 and self.intervals[position][0] <= int(value) <= self.intervals[position][1]

    def text(self, value: int) -> str:
        return str(ipaddress.ip_address(value) if self.version == 4 else ipaddress.IPv6Address(value))

    def next_free(self, cursor: int, taken: Callable[[str], bool]) -> str | None:
        """The first address at or after `cursor`, wrapping around once, that is not `taken`.

        Next-fit: with the cursor just past the last allocation, a burst of claims finds a free address
        at the first candidate instead of re-walking everything allocated before it.
        """
        for low, high in self._segments_from(cursor):
            for value in range(low, high + 1):
                candidate = self.text(value)
                if not taken(candidate):
                    return candidate
        return None

    def _segments_from(self, cursor: int) -> Iterator[Interval]:
        for low, high in self.intervals:
            if high >= cursor:
                yield max(low, cursor), high
        for low, high in self.intervals:
            if low < cursor:
                yield low, min(high, cursor - 1)


def build(
    addresses: Sequence[str],
    *,
    prefix: int,
    gateway: str | None = None,
    excluded: Sequence[str] = (),
    allocate_reserved: bool = False,
) -> AddressSpace:
    """The address space of a pool spec; raises `InvalidSpec` for entries that are not addresses."""
    parsed = [_interval(entry, skip_reserved=not allocate_reserved) for entry in addresses]
    versions = {version for version, _ in parsed}
    if len(versions) != 1:
        raise errors.InvalidSpec("a pool holds addresses of exactly one IP family", reason="InvalidAddress")
    version = versions.pop()
    max_prefix = 32 if version == 4 else 128
    if not 0 <= prefix <= max_prefix:
        raise errors.InvalidSpec(f"prefix {prefix} is out of range for IPv{version}", reason="InvalidPrefix")
    holes = [interval for _, interval in (_interval(entry, skip_reserved=False) for entry in excluded)]
    if gateway:
        holes.append(_interval(gateway, skip_reserved=False)[1])
    if not allocate_reserved and prefix < max_prefix - 1:
        first = ipaddress.ip_address(parsed[0][1][0])
        network = ipaddress.ip_network(f"{first}/{prefix}", strict=False)
        holes.append((int(network.network_address), int(network.network_address)))
        if version == 4:
            holes.append((int(network.broadcast_address), int(network.broadcast_address)))
    intervals = _subtract(_normalise(interval for _, interval in parsed), _normalise(holes))
    return AddressSpace(version, tuple(_normalise(intervals)))
