"""baremetal-provision's settings keep their environment variable names, and bad values are refused at
startup (pure)."""

from __future__ import annotations

import pytest

from baremetal_provision.settings import BaremetalSettings


def test_defaults() -> None:
    settings = BaremetalSettings.load({})
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", 8081)
    assert settings.boot_url is None
    assert settings.files_dir is None
    assert (settings.shutdown_seconds, settings.power_wait_seconds) == (60.0, 30.0)
    assert settings.ipmi_cipher_suite == 17


def test_every_variable_keeps_its_name() -> None:
    assert BaremetalSettings.variables() == {
        "boot_listen": "CAPFLEET_BOOT_LISTEN",
        "boot_socket": "CAPFLEET_BOOT_SOCKET",
        "boot_tls_url": "CAPFLEET_BOOT_TLS_URL",
        "boot_tls_ca_file": "CAPFLEET_BOOT_TLS_CA_FILE",
        "boot_url": "CAPFLEET_BOOT_URL",
        "files_dir": "CAPFLEET_BOOT_FILES_DIR",
        "deploy_ramdisk_dir": "CAPFLEET_DEPLOY_RAMDISK_DIR",
        "deploy_kernel_url": "CAPFLEET_DEPLOY_KERNEL_URL",
        "deploy_initrd_url": "CAPFLEET_DEPLOY_INITRD_URL",
        "image_cache_dir": "CAPFLEET_IMAGE_CACHE_DIR",
        "image_cache_max_gib": "CAPFLEET_IMAGE_CACHE_MAX_GIB",
        "image_source_cidrs": "CAPFLEET_IMAGE_SOURCE_CIDRS",
        "shutdown_seconds": "CAPFLEET_BMC_SHUTDOWN_SECONDS",
        "power_wait_seconds": "CAPFLEET_BMC_POWER_WAIT_SECONDS",
        "ipmi_cipher_suite": "CAPFLEET_IPMI_CIPHER_SUITE",
        "token_key_namespace": "CAPFLEET_TOKEN_KEY_NAMESPACE",
    }


def test_the_deploy_ramdisk_is_served_by_the_operator_unless_configured_elsewhere() -> None:
    served = BaremetalSettings.load({})
    assert served.deploy_ramdisk("http://b:1") == (
        "http://b:1/deploy/vmlinuz",
        "http://b:1/deploy/initrd.img",
    )
    elsewhere = BaremetalSettings.load(
        {"CAPFLEET_DEPLOY_KERNEL_URL": "https://s/k", "CAPFLEET_DEPLOY_INITRD_URL": "https://s/i"}
    )
    assert elsewhere.deploy_ramdisk("http://b:1") == ("https://s/k", "https://s/i")


def test_values_are_read_from_the_environment() -> None:
    settings = BaremetalSettings.load(
        {
            "CAPFLEET_BOOT_LISTEN": "127.0.0.1:9000",
            "CAPFLEET_BOOT_URL": "http://10.0.0.1:9000",
            "CAPFLEET_BOOT_FILES_DIR": "/srv/boot",
            "CAPFLEET_BMC_SHUTDOWN_SECONDS": "3",
            "CAPFLEET_BMC_POWER_WAIT_SECONDS": "20",
            "CAPFLEET_IPMI_CIPHER_SUITE": "3",
        }
    )
    assert (settings.listen_host, settings.listen_port) == ("127.0.0.1", 9000)
    assert settings.boot_url == "http://10.0.0.1:9000"
    assert settings.files_dir == "/srv/boot"
    assert (settings.shutdown_seconds, settings.power_wait_seconds) == (3.0, 20.0)
    assert settings.ipmi_cipher_suite == 3


def test_a_listen_address_without_host_listens_everywhere() -> None:
    settings = BaremetalSettings.load({"CAPFLEET_BOOT_LISTEN": ":8082"})
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", 8082)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CAPFLEET_IPMI_CIPHER_SUITE", "5"),
        ("CAPFLEET_BOOT_LISTEN", "0.0.0.0"),
        ("CAPFLEET_BOOT_LISTEN", "0.0.0.0:99999"),
        ("CAPFLEET_BMC_SHUTDOWN_SECONDS", "soon"),
        ("CAPFLEET_BOOT_TLS_URL", "http://boot.lab"),
        ("CAPFLEET_BOOT_TLS_URL", "https://172.30.1.1"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable):
        BaremetalSettings.load({variable: value})


def test_tls_for_the_ramdisk_needs_both_its_url_and_its_ca() -> None:
    both = {
        "CAPFLEET_BOOT_TLS_URL": "https://boot.lab:8443/",
        "CAPFLEET_BOOT_TLS_CA_FILE": "/etc/boot/ca.crt",
    }
    assert BaremetalSettings.load(both).boot_tls_url == "https://boot.lab:8443"
    for alone in both:
        with pytest.raises(ValueError, match="go together"):
            BaremetalSettings.load({alone: both[alone]})
