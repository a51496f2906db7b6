"""Where the BMC credentials may go: https or IPMI unless plain Redfish is allowed, and, with
bmcAddressCIDRs, only to hosts whose every address is inside them."""

from __future__ import annotations

import pytest

from baremetal_provision import bmcpolicy
from capfleet import errors
from capfleet.api.baremetal import BMC

SECRET = {"name": "bmc"}


def given(address: str, **extra: object) -> BMC:
    return BMC.model_validate({"address": address, "credentialsSecretRef": SECRET, **extra})


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("redfish+https://10.0.0.5/redfish/v1/Systems/1", "10.0.0.5"),
        ("redfish+https://bmc-7.example:8443/redfish/v1/Systems/a", "bmc-7.example"),
        ("redfish+https://[fd00::5]:443/redfish/v1/Systems/1", "fd00::5"),
        ("ipmi://10.0.0.6:6230", "10.0.0.6"),
        ("ipmi://[fd00::6]", "fd00::6"),
    ],
)
def test_the_host_of_each_kind_of_address(address: str, host: str) -> None:
    assert bmcpolicy.host_of(address) == host


def test_plain_redfish_is_refused_unless_allowed() -> None:
    address = "redfish+http://10.0.0.5/redfish/v1/Systems/1"
    reason = bmcpolicy.refusal(given(address), ["10.0.0.5"])
    assert reason is not None
    assert "unencrypted" in reason
    assert "allowRedfishHTTP" in reason
    assert bmcpolicy.refusal(given(address, allowRedfishHTTP=True), ["10.0.0.5"]) is None
    assert bmcpolicy.refusal(given("ipmi://10.0.0.5"), []) is None
    assert bmcpolicy.refusal(given("redfish+https://h/redfish/v1/Systems/1"), []) is None


def test_with_cidrs_every_resolved_address_must_be_inside() -> None:
    bmc = given("redfish+https://bmc.example/redfish/v1/Systems/1", addressCIDRs=["10.1.0.0/16", "fd00::/64"])
    assert bmcpolicy.refusal(bmc, ["10.1.2.3"]) is None
    assert bmcpolicy.refusal(bmc, ["10.1.2.3", "fd00::9"]) is None
    outside = bmcpolicy.refusal(bmc, ["10.1.2.3", "192.0.2.7"])
    assert outside is not None
    assert "(192.0.2.7)" in outside
    assert "resolved to no address" in (bmcpolicy.refusal(bmc, []) or "")


async def test_admit_resolves_names_and_raises_a_refusal() -> None:
    inside = given(
        "redfish+https://localhost:8000/redfish/v1/Systems/1", addressCIDRs=["127.0.0.0/8", "::1/128"]
    )
    await bmcpolicy.admit(inside)
    outside = given("ipmi://127.0.0.1", addressCIDRs=["10.0.0.0/8"])
    with pytest.raises(errors.InvalidSpec) as refused:
        await bmcpolicy.admit(outside)
    assert refused.value.reason == bmcpolicy.REFUSED
    with pytest.raises(errors.InvalidSpec) as plain:
        await bmcpolicy.admit(given("redfish+http://127.0.0.1/redfish/v1/Systems/1"))
    assert plain.value.reason == bmcpolicy.REFUSED


async def test_a_host_that_does_not_resolve_is_retried_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def nothing(host: str) -> list[str]:  # a name DNS does not know (without asking any DNS server)
        return []

    monkeypatch.setattr(bmcpolicy, "resolve", nothing)
    with pytest.raises(errors.BackendUnavailable) as later:
        await bmcpolicy.admit(given("ipmi://bmc-7.example", addressCIDRs=["10.0.0.0/8"]))
    assert later.value.reason == "BMCAddressUnresolved"
