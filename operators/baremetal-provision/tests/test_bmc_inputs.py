"""BMC addresses are checked before any call, and sushy's and pyghmi's errors map to capfleet's (pure)."""

from __future__ import annotations

import pytest
from pyghmi import exceptions as ipmi_errors
from sushy import exceptions as sushy_errors

from baremetal_provision.backends import base, bmc
from capfleet import errors


def test_redfish_addresses_are_parsed() -> None:
    parsed = bmc.parse_address("redfish+https://127.0.0.1:8000/redfish/v1/Systems/abc-1")
    assert parsed == base.Address("https://127.0.0.1:8000", "/redfish/v1/Systems/abc-1")
    assert bmc.parse_address("redfish+http://h/redfish/v1/Systems/1/") == base.Address(
        "http://h", "/redfish/v1/Systems/1"
    )


def test_ipmi_addresses_are_parsed() -> None:
    assert bmc.parse_address("ipmi://10.0.0.1:6230") == base.IpmiAddress("10.0.0.1", 6230)
    assert bmc.parse_address("ipmi://bmc.example") == base.IpmiAddress("bmc.example", 623)
    assert bmc.parse_address("ipmi://[fd00::1]:624") == base.IpmiAddress("fd00::1", 624)


def test_ipmi_errors_map_to_capfleet_errors() -> None:
    address = bmc.parse_address("ipmi://10.0.0.1")
    refused = bmc.wire_error(ipmi_errors.IpmiException("Unauthorized name"), address)
    assert isinstance(refused, errors.BackendRejected)
    assert refused.reason == "AuthenticationFailed"
    silent = bmc.wire_error(ipmi_errors.IpmiException("timeout"), address)
    assert isinstance(silent, errors.BackendUnavailable)
    assert silent.reason == "BMCUnreachable"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("ipmi://u:p@10.0.0.1:623", "InvalidBMCAddress"),
        ("ipmi://10.0.0.1/x", "InvalidBMCAddress"),
        ("ipmi://10.0.0.1:99999", "InvalidBMCAddress"),
        ("ipmi://", "InvalidBMCAddress"),
        ("https://h/redfish/v1/Systems/1", "InvalidBMCAddress"),
        ("redfish+https://h/redfish/v1/Managers/1", "InvalidBMCAddress"),
        ("redfish+https://h/redfish/v1/Systems/", "InvalidBMCAddress"),
        ("redfish+https://u:p@h/redfish/v1/Systems/1", "InvalidBMCAddress"),
    ],
)
def test_bad_addresses_are_refused(address: str, reason: str) -> None:
    with pytest.raises(errors.InvalidSpec) as raised:
        bmc.parse_address(address)
    assert raised.value.reason == reason
    assert "p@" not in raised.value.message


def test_credentials_hide_the_password() -> None:
    assert "secret" not in repr(base.Credentials("admin", "secret"))


def test_wire_errors_map_to_capfleet_errors() -> None:
    address = bmc.parse_address("redfish+https://h/redfish/v1/Systems/1")
    unreachable = bmc.wire_error(sushy_errors.ConnectionError(url="https://h", error="refused"), address)
    assert isinstance(unreachable, errors.BackendUnavailable)
    assert unreachable.reason == "BMCUnreachable"
    tls = bmc.wire_error(
        sushy_errors.ConnectionError(url="https://h", error="CERTIFICATE_VERIFY_FAILED"), address
    )
    assert (type(tls), tls.reason) == (errors.BackendRejected, "CertificateNotTrusted")
    other = bmc.wire_error(ValueError("x"), address)
    assert isinstance(other, errors.BackendUnavailable)
