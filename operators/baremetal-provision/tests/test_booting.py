"""The scripts, seed and token the guests are served (pure)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import ssl
from typing import Any

import pytest
import yaml

from baremetal_provision import booting, markers, ramdisk_args
from capfleet import cloudinit, pausing
from capfleet.api.baremetal import BaremetalInstanceSpec, OSProfile
from capfleet_e2e.pki import CertificateAuthority

OS = OSProfile.model_validate(
    {"kernelURL": "http://h/k", "initrdURL": "http://h/i", "kernelArgs": ["console=ttyS0"]}
)


def spec(**fields: Any) -> BaremetalInstanceSpec:
    """A valid spec with `fields` (wire names) on top."""
    return BaremetalInstanceSpec.model_validate(
        {
            "bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bmc"}},
            "bootMACAddress": "52:54:00:aa:bb:01",
            "os": OS.to_wire(),
            "userDataSecretRef": {"name": "bootstrap"},
            **fields,
        }
    )


def test_boot_script_chains_to_the_per_mac_script() -> None:
    assert booting.boot_script("http://10.0.0.1:8080/") == (
        "#!ipxe\nchain http://10.0.0.1:8080/ipxe?mac=${net0/mac:hexhyp}&uuid=${uuid}\n"
    )


def test_install_script_carries_seed_and_callback_urls() -> None:
    script = booting.install_script(OS, "http://b:1", "tok")
    assert script.splitlines() == [
        "#!ipxe",
        "kernel http://h/k console=ttyS0 ds=nocloud-net;s=http://b:1/seed/tok/ capfleet.callback=http://b:1/callback/tok",
        "initrd http://h/i",
        "boot",
    ]


def test_macs_are_normalized_or_refused() -> None:
    assert booting.normalize_mac("52-54-00-AA-bb-01") == "52:54:00:aa:bb:01"
    assert booting.normalize_mac("52:54:00:aa:bb:01") == "52:54:00:aa:bb:01"
    assert booting.normalize_mac("52:54:00:aa:bb") is None
    assert booting.normalize_mac("${net0/mac}") is None


def test_meta_data_is_yaml_with_instance_id_hostname_and_provider_id() -> None:
    data = yaml.safe_load(booting.meta_data("ns", "bm1", spec(hostname="node-1")))
    assert data == {
        "instance-id": cloudinit.instance_id("ns", "bm1"),
        "local-hostname": "node-1",
        "provider-id": "capfleet://metal/ns/bm1",
    }
    given = yaml.safe_load(booting.meta_data("ns", "bm1", spec(providerID="capfleet://metal/42")))
    assert given["provider-id"] == "capfleet://metal/42"
    assert given["local-hostname"] == "bm1"


def test_meta_data_carries_extra_keys_under_the_fixed_ones() -> None:
    extra = {"rack": "r12", "instance-id": "mine", "local-hostname": "other"}
    data = yaml.safe_load(booting.meta_data("ns", "bm1", spec(metaData=extra)))
    assert data["rack"] == "r12"
    assert data["instance-id"] == cloudinit.instance_id("ns", "bm1")
    assert data["local-hostname"] == "bm1"


def test_network_config_only_when_given() -> None:
    assert booting.network_config(spec()) is None
    assert booting.network_config(spec(networkData={})) is None
    document = {"version": 2, "ethernets": {"eno1": {"dhcp4": True}}}
    assert yaml.safe_load(booting.network_config(spec(networkData=document)) or "") == document


def test_network_config_is_rendered_from_the_interfaces() -> None:
    nic = {
        "name": "eno1",
        "macAddress": "52:54:00:aa:bb:01",
        "addresses": ["10.0.0.5/24"],
        "gateway": "10.0.0.1",
    }
    rendered = yaml.safe_load(booting.network_config(spec(interfaces=[nic])) or "")
    assert rendered == cloudinit.network_document(spec(interfaces=[nic]).interfaces)
    assert rendered["ethernets"]["eno1"]["match"] == {"macaddress": "52:54:00:aa:bb:01"}
    assert rendered["ethernets"]["eno1"]["routes"] == [{"to": "0.0.0.0/0", "via": "10.0.0.1"}]


def test_network_data_wins_over_the_interfaces() -> None:
    nic = {"macAddress": "52:54:00:aa:bb:01"}
    document = {"version": 2, "ethernets": {}}
    chosen = spec(networkData=document, interfaces=[nic])
    assert yaml.safe_load(booting.network_config(chosen) or "") == document


KEY = markers.Tokens(b"k" * 32)


def test_token_depends_on_the_key_the_salt_and_the_name_but_not_the_uid() -> None:
    meta = {"name": "bm1", "namespace": "ns", "uid": "a", "annotations": {markers.TOKEN_SALT: "s" * 32}}
    token = KEY.of(meta)
    assert token == KEY.of({**meta, "uid": "b"})
    assert token != markers.Tokens(b"K" * 32).of(meta), "another operator's key"
    assert token != KEY.token("t" * 32, "ns", "bm1"), "a re-created instance's salt"
    assert token != KEY.token("s" * 32, "ns", "bm2")
    assert len(token or "") >= 40
    assert KEY.of({"name": "bm1", "namespace": "ns"}) is None
    assert "k" * 32 not in repr(KEY), "the key stays out of reprs (and the logs that print them)"


def test_the_annotations_alone_derive_no_token() -> None:
    """An earlier release's token secret, still on an instance, is no longer what tokens come from."""
    legacy = {markers.LEGACY_TOKEN_SECRET: "s" * 64, markers.TOKEN_SALT: "s" * 32}
    meta = {"name": "bm1", "namespace": "ns", "annotations": legacy}
    old_style = hmac.new(b"s" * 64, b"ns/bm1", hashlib.sha256).digest()
    assert KEY.of(meta) != base64.urlsafe_b64encode(old_style).decode().rstrip("=")
    assert KEY.of({**meta, "annotations": {markers.LEGACY_TOKEN_SECRET: "s" * 64}}) is None


def test_each_attempt_has_its_own_token() -> None:
    annotations = {markers.TOKEN_SALT: "s" * 32}
    meta = {"name": "bm1", "namespace": "ns", "annotations": annotations}
    tokens = {KEY.of(meta)}
    for failed in ("1", "2"):
        annotations[markers.FAILED_ATTEMPTS] = failed
        tokens.add(KEY.of(meta))
    assert len(tokens) == 3
    assert KEY.of(meta) == KEY.token("s" * 32, "ns", "bm1", 2)


def test_before_acting_gives_a_salt_once_and_retires_the_legacy_secret() -> None:
    meta = {"name": "bm1", "annotations": {markers.LEGACY_TOKEN_SECRET: "s" * 64}}
    marks = markers.before_acting(meta, opens_window=False)
    assert marks[markers.LEGACY_TOKEN_SECRET] is None, "removed"
    assert len(marks[markers.TOKEN_SALT] or "") == 32
    salted = {"name": "bm1", "annotations": {markers.TOKEN_SALT: "s" * 32, markers.BMC_TOUCHED: "t"}}
    assert markers.before_acting(salted, opens_window=False) == {}


def test_cleaning_script_calls_back_to_the_cleaning_url_and_has_no_seed() -> None:
    script = booting.cleaning_script(spec(), RAMDISK, "http://b:1", "tok")
    assert script.splitlines() == [
        "#!ipxe",
        "kernel http://h/k console=ttyS0 capfleet.mode=cleaning capfleet.cleaning=metadata"
        " capfleet.callback=http://b:1/cleaned/tok capfleet.bootif=52:54:00:aa:bb:01",
        "initrd http://h/i",
        "boot",
    ]
    tls = booting.BootTLS("https://boot.lab", "MIIB")
    by_ramdisk = booting.cleaning_script(image_spec(), RAMDISK, "http://b:1", "tok", tls).split()
    assert by_ramdisk[1:3] == ["kernel", "http://b:1/deploy/vmlinuz"]
    assert "capfleet.callback=https://boot.lab/cleaned/tok" in by_ramdisk
    assert "capfleet.ca=MIIB" in by_ramdisk
    assert "capfleet.key=https://boot.lab/key/tok" in by_ramdisk, "the ramdisk signs its report"


CA_PEM = CertificateAuthority.generate("boot-ca").cert_pem.decode()
RAMDISK = booting.ramdisk_profile("http://b:1/deploy/vmlinuz", "http://b:1/deploy/initrd.img")
DIGEST = "ab" * 32


def image_spec(**fields: Any) -> BaremetalInstanceSpec:
    """A spec that deploys an image through the deploy ramdisk."""
    base = spec(**fields).to_wire()
    base.pop("os")
    return BaremetalInstanceSpec.model_validate(
        {"image": {"url": "https://images.example/node.raw", "checksum": DIGEST}, **base, **fields}
    )


def test_the_cleaning_profile_is_its_own_or_what_deployed() -> None:
    cleaner = {"kernelURL": "http://h/ck", "initrdURL": "http://h/ci"}
    assert booting.cleaning_profile(spec(cleaningOs=cleaner), RAMDISK) == OSProfile.model_validate(cleaner)
    assert booting.cleaning_profile(spec(), RAMDISK) == OS
    assert booting.cleaning_profile(image_spec(), RAMDISK) == RAMDISK


def test_the_deploy_script_boots_the_ramdisk_with_the_image_hints_seed_and_callback() -> None:
    given = image_spec(rootDeviceHints={"serialNumber": "S1", "minSizeGigabytes": 20})
    lines = booting.deploy_script(given, RAMDISK, "http://b:1/", "tok", cached=False).splitlines()
    assert lines[0] == "#!ipxe"
    assert lines[2:] == ["initrd http://b:1/deploy/initrd.img", "boot"]
    kernel, url, *args = lines[1].split(" ")
    assert (kernel, url) == ("kernel", "http://b:1/deploy/vmlinuz")
    assert args == [
        "console=ttyS0",
        "quiet",
        "loglevel=3",
        "panic=-1",
        "capfleet.mode=deploy",
        "capfleet.image=https://images.example/node.raw",
        f"capfleet.checksum={DIGEST}",
        "capfleet.format=raw",
        "ds=nocloud-net;s=http://b:1/seed/tok/",
        "capfleet.callback=http://b:1/callback/tok",
        "capfleet.hints=serial:S1,min_size_gib:20",
        "capfleet.bootif=52:54:00:aa:bb:01",
        "capfleet.key=http://b:1/key/tok",
    ]


def test_over_tls_the_ramdisk_gets_https_urls_and_the_ca_while_ipxe_stays_on_http() -> None:
    tls = booting.BootTLS("https://boot.lab", ramdisk_args.ca_arg(CA_PEM))
    script = booting.deploy_script(image_spec(), RAMDISK, "http://b:1", "tok", cached=True, tls=tls)
    kernel_line = script.splitlines()[1].split()
    assert kernel_line[1] == "http://b:1/deploy/vmlinuz"  # iPXE fetches these over plain HTTP
    assert "capfleet.image=http://b:1/images/image?token=tok" in kernel_line, "no secret; its checksum holds"
    assert "ds=nocloud-net;s=https://boot.lab/seed/tok/" in kernel_line
    assert "capfleet.callback=https://boot.lab/callback/tok" in kernel_line
    [ca] = [a.split("=", 1)[1] for a in kernel_line if a.startswith("capfleet.ca=")]
    assert base64.b64decode(ca) == ssl.PEM_cert_to_DER_cert(CA_PEM)
    by_url = image_spec(image={"url": "https://i/n.raw", "checksum": "https://i/n.sha256"})
    line = booting.deploy_script(by_url, RAMDISK, "http://b:1", "tok", cached=True, tls=tls).split()
    assert "capfleet.checksum_url=https://boot.lab/images/sha256?token=tok" in line, "the checksum over TLS"


def test_one_ca_certificate_and_a_command_line_the_kernel_keeps_whole() -> None:
    with pytest.raises(ValueError, match="one PEM certificate, not 2"):
        ramdisk_args.ca_arg(CA_PEM + CA_PEM)
    with pytest.raises(ValueError, match="one PEM certificate, not 0"):
        ramdisk_args.ca_arg(
            CertificateAuthority.generate("boot-ca").key_pem.decode()
        )  # a key, no certificate
    long_url = "https://images.example/" + "n" * 1900
    given = image_spec(image={"url": long_url, "checksum": DIGEST})
    with pytest.raises(ValueError, match="over 2047"):
        booting.deploy_script(given, RAMDISK, "http://b:1", "tok", cached=False)


def test_a_cached_image_and_its_checksum_url_are_fetched_from_the_operator_by_token() -> None:
    by_url = image_spec(
        image={"url": "https://i/n.qcow2", "checksum": "https://i/n.sha256", "format": "qcow2"}
    )
    script = booting.deploy_script(by_url, RAMDISK, "http://b:1", "tok", cached=True)
    # The token in the query: the ramdisk prints URLs without their query.
    assert "capfleet.image=http://b:1/images/image?token=tok" in script.split()
    assert "capfleet.checksum_url=http://b:1/images/sha256?token=tok" in script.split()
    assert "capfleet.format=qcow2" in script.split()
    by_digest = booting.deploy_script(image_spec(), RAMDISK, "http://b:1", "tok", cached=True)
    assert f"capfleet.checksum={DIGEST}" in by_digest.split()
    uncached = booting.deploy_script(by_url, RAMDISK, "http://b:1", "tok", cached=False)
    assert "capfleet.checksum_url=https://i/n.sha256" in uncached.split()


def test_cleaning_defaults_to_metadata_with_an_image_and_disabled_with_an_installer() -> None:
    assert image_spec().cleans_metadata
    assert not image_spec(cleaning="disabled").cleans_metadata
    assert not spec().cleans_metadata
    assert spec(cleaning="metadata").cleans_metadata


def test_cleaning_is_for_metadata_cleaning_of_deleted_instances_not_moved() -> None:
    deleted = {"name": "bm", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    metadata, disabled = spec(cleaning="metadata"), spec(cleaning="disabled")
    assert markers.cleaning_pending(deleted, metadata)
    assert not markers.cleaning_pending(deleted, disabled)
    assert not markers.cleaning_pending({"name": "bm"}, metadata)
    moved = {**deleted, "annotations": {pausing.DELETE_FOR_MOVE_ANNOTATION: ""}}
    assert not markers.cleans(moved, metadata)
    done = {**deleted, "annotations": {markers.CLEANED: "2026-01-01T00:00:01Z"}}
    assert not markers.cleaning_pending(done, metadata)


def test_token_secrets_are_redacted_from_log_lines() -> None:
    secret = "ab" * 32
    line = f"Updating diff: {{'annotations': {{'{markers.LEGACY_TOKEN_SECRET}': '{secret}'}}}}"
    assert secret not in markers.redacted(line)
    assert "<redacted>" in markers.redacted(line)
    assert markers.redacted(f"uid {secret}") == f"uid {secret}", "only lines about the annotation"
    record = logging.LogRecord("kopf.objects", logging.DEBUG, __file__, 1, "body: %s", (line,), None)
    assert markers.RedactTokenSecrets().filter(record)
    assert secret not in record.getMessage()
