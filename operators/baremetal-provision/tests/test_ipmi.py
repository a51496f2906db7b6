"""The IPMI backend against a lab server behind virtualbmc (pyghmi's IPMI server over the lab's libvirtd):
power on and off, the boot device, and a wrong password, through `IpmiBMC` directly. virtualbmc 3.3
cannot negotiate cipher suite 17, so the backend is told to use suite 3."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from baremetal_provision.backends import base, bmc
from baremetal_provision.backends.ipmi import IpmiBMC
from capfleet import errors
from capfleet_e2e.baremetal.ipmi import VirtualBmc
from capfleet_e2e.baremetal.servers import BareMetalServer
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration


def ipmi_backend(vbmc: VirtualBmc, password: str | None = None) -> IpmiBMC:
    address = bmc.parse_address(vbmc.address)
    assert isinstance(address, base.IpmiAddress)
    credentials = base.Credentials(vbmc.username, password or vbmc.password)
    return IpmiBMC(address, credentials, cipher_suite=3)


async def test_power_and_boot_device_through_ipmi(
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    ipmi_bmcs: Callable[[BareMetalServer], VirtualBmc],
) -> None:
    (server,) = baremetal_servers(1)
    backend = ipmi_backend(ipmi_bmcs(server))
    assert (await backend.facts()).power_state == "Off"

    await backend.set_boot_device("disk", once=False)
    assert (await backend.facts()).boot_device == "disk"
    await backend.set_boot_device("pxe", once=True)
    assert (await backend.facts()).boot_device == "pxe"

    await backend.power_on()

    async def power(state: str) -> bool | None:
        return True if (await backend.facts()).power_state == state else None

    await eventually("the server powered on", lambda: power("On"), within=30)
    await backend.power_off(force=True)
    await eventually("the server powered off", lambda: power("Off"), within=30)
    await backend.close()


async def test_wrong_ipmi_password_is_authentication_failed(
    baremetal_servers: Callable[[int], list[BareMetalServer]],
    ipmi_bmcs: Callable[[BareMetalServer], VirtualBmc],
) -> None:
    (server,) = baremetal_servers(1)
    vbmc = ipmi_bmcs(server)
    with pytest.raises(errors.BackendRejected) as raised:
        await ipmi_backend(vbmc, password="not-the-password").facts()
    assert raised.value.reason == "AuthenticationFailed"
    assert vbmc.password not in raised.value.message
