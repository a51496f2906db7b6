"""BMC addresses are checked before any call, and sushy's errors map to capfleet's (pure)."""

from __future__ import annotations

import pytest
from sushy import exceptions as sushy_errors

from baremetal_provision.backends import bmc
from capfleet import errors


def test_redfish_addresses_are_parsed() -> None:
    parsed = bmc.parse_address("redfish+https://127.0.0.1:8000/redfish/v1/Systems/abc-1")
    assert parsed == bmc.Address("https://127.0.0.1:8000", "/redfish/v1/Systems/abc-1")
    assert bmc.parse_address("redfish+http://h/redfish/v1/Systems/1/").base_url == "http://h"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("ipmi://10.0.0.1:623", "UnsupportedBMC"),
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
    assert "secret" not in repr(bmc.Credentials("admin", "secret"))


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
