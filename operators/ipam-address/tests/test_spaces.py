"""Pool address spaces: parsing, reserved addresses, exclusions and next-fit allocation."""

import ipaddress

import pytest

from capfleet import errors
from ipam_address import spaces


def test_cidr_skips_network_broadcast_and_gateway() -> None:
    space = spaces.build(["10.0.0.0/29"], prefix=29, gateway="10.0.0.1")
    assert space.total == 5  # .2 .. .6
    assert "10.0.0.0" not in space
    assert "10.0.0.7" not in space
    assert "10.0.0.1" not in space
    assert "10.0.0.2" in space


def test_allocate_reserved_keeps_network_and_broadcast() -> None:
    space = spaces.build(["10.0.0.0/30"], prefix=30, allocate_reserved=True)
    assert space.total == 4


def test_ranges_single_ips_and_exclusions_merge() -> None:
    space = spaces.build(
        ["10.0.1.10-10.0.1.20", "10.0.1.21", "10.0.1.5"],
        prefix=24,
        excluded=["10.0.1.12-10.0.1.13", "10.0.1.5"],
    )
    assert space.intervals == (
        (int(ipaddress.ip_address("10.0.1.10")), int(ipaddress.ip_address("10.0.1.11"))),
        (int(ipaddress.ip_address("10.0.1.14")), int(ipaddress.ip_address("10.0.1.21"))),
    )
    assert space.total == 10


def test_ipv6_skips_subnet_router_anycast_only() -> None:
    space = spaces.build(["fd00::/126"], prefix=126)
    assert space.total == 3
    assert "fd00::" not in space
    assert "fd00::3" in space


def test_next_free_is_next_fit_and_wraps_once() -> None:
    space = spaces.build(["10.0.0.1-10.0.0.5"], prefix=24)
    taken = {"10.0.0.4"}
    cursor = int(ipaddress.ip_address("10.0.0.4"))
    assert space.next_free(cursor, taken.__contains__) == "10.0.0.5"
    taken |= {"10.0.0.5"}
    assert space.next_free(cursor, taken.__contains__) == "10.0.0.1"
    taken |= {"10.0.0.1", "10.0.0.2", "10.0.0.3"}
    assert space.next_free(cursor, taken.__contains__) is None


def test_canonical_forms_compare_equal() -> None:
    assert spaces.canonical("fd00:0::1/64") == spaces.canonical("fd00::1") == "fd00::1"


@pytest.mark.parametrize(
    ("addresses", "prefix"),
    [(["10.0.0.0/33"], 24), (["10.0.0.9-10.0.0.1"], 24), (["10.0.0.1", "fd00::1"], 24), (["10.0.0.1"], 40)],
)
def test_invalid_specs_raise_invalid_spec(addresses: list[str], prefix: int) -> None:
    with pytest.raises(errors.InvalidSpec):
        spaces.build(addresses, prefix=prefix)


def test_large_ipv6_pool_is_cheap() -> None:
    space = spaces.build(["fd00::/64"], prefix=64)
    assert space.total == 2**64 - 1
    assert space.next_free(0, lambda _: False) == "fd00::1"
