"""The scripts, seed and token the guests are served (pure)."""

from __future__ import annotations

import json
import logging

from baremetal_provision import booting, markers

OS = {"kernelURL": "http://h/k", "initrdURL": "http://h/i", "kernelArgs": ["console=ttyS0"]}


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


def test_meta_data_has_instance_id_hostname_and_provider_id() -> None:
    data = json.loads(booting.meta_data("ns", "bm1", {"hostname": "node-1"}))
    assert data == {
        "instance-id": "ns-bm1",
        "local-hostname": "node-1",
        "provider-id": "capfleet://metal/ns/bm1",
    }
    given = json.loads(booting.meta_data("ns", "bm1", {"providerID": "capfleet://metal/42"}))
    assert given["provider-id"] == "capfleet://metal/42"
    assert given["local-hostname"] == "bm1"


def test_network_config_only_when_given() -> None:
    assert booting.network_config({}) is None
    assert json.loads(booting.network_config({"networkData": {"version": 2}}) or "") == {"version": 2}


def test_token_depends_on_secret_and_name_but_not_uid() -> None:
    meta = {"name": "bm1", "namespace": "ns", "uid": "a", "annotations": {markers.TOKEN_SECRET: "s" * 64}}
    moved = {**meta, "uid": "b"}
    assert markers.token_of(meta) == markers.token_of(moved)
    assert markers.token_of(meta) != markers.token(("t" * 64), "ns", "bm1")
    assert markers.token_of(meta) != markers.token("s" * 64, "ns", "bm2")
    assert len(markers.token_of(meta) or "") >= 40
    assert markers.token_of({"name": "bm1", "namespace": "ns"}) is None


def test_cleaning_script_calls_back_to_the_cleaning_url_and_has_no_seed() -> None:
    script = booting.cleaning_script(OS, "http://b:1", "tok")
    assert script.splitlines() == [
        "#!ipxe",
        "kernel http://h/k console=ttyS0 capfleet.mode=cleaning capfleet.cleaning=metadata"
        " capfleet.callback=http://b:1/cleaned/tok",
        "initrd http://h/i",
        "boot",
    ]


def test_the_cleaning_profile_is_its_own_or_the_installers() -> None:
    cleaner = {"kernelURL": "http://h/ck", "initrdURL": "http://h/ci"}
    assert booting.cleaning_profile({"os": OS, "cleaningOs": cleaner}) == cleaner
    assert booting.cleaning_profile({"os": OS}) == OS


def test_cleaning_is_for_metadata_cleaning_of_deleted_instances_not_moved() -> None:
    deleted = {"name": "bm", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    assert markers.cleaning_pending(deleted, {"cleaning": "metadata"})
    assert not markers.cleaning_pending(deleted, {"cleaning": "disabled"})
    assert not markers.cleaning_pending({"name": "bm"}, {"cleaning": "metadata"})
    moved = {**deleted, "annotations": {markers.DELETE_FOR_MOVE: ""}}
    assert not markers.cleans(moved, {"cleaning": "metadata"})
    done = {**deleted, "annotations": {markers.CLEANED: "2026-01-01T00:00:01Z"}}
    assert not markers.cleaning_pending(done, {"cleaning": "metadata"})


def test_token_secrets_are_redacted_from_log_lines() -> None:
    secret = "ab" * 32
    line = f"Updating diff: {{'annotations': {{'{markers.TOKEN_SECRET}': '{secret}'}}}}"
    assert secret not in markers.redacted(line)
    assert "<redacted>" in markers.redacted(line)
    assert markers.redacted(f"uid {secret}") == f"uid {secret}", "only lines about the annotation"
    record = logging.LogRecord("kopf.objects", logging.DEBUG, __file__, 1, "body: %s", (line,), None)
    assert markers.RedactTokenSecrets().filter(record)
    assert secret not in record.getMessage()
