"""Which instances the deadline watch and the resync timer reconcile and the HTTP server serves, decided
from the object alone (pure), and the BMC call metrics (against a closed loopback port)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from boot_server_harness import TOKENS
from prometheus_client import REGISTRY

from baremetal_provision import markers, provisioning
from baremetal_provision.backends import base, bmc
from baremetal_provision.served import served_of
from capfleet import errors
from capfleet.api import kinds

SPEC = {
    "bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bm-bmc"}},
    "bootMACAddress": "52:54:00:aa:bb:01",
    "os": {"kernelURL": "http://h/k", "initrdURL": "http://h/i"},
    "userDataSecretRef": {"name": "bm-bootstrap"},
}


def instance(meta: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{kinds.BAREMETAL_GROUP}/{kinds.VERSION}",
        "kind": "BaremetalInstance",
        "metadata": meta,
        "spec": {**SPEC, **spec},
    }


def body(phase: str | None = None, **annotations: str) -> dict[str, Any]:
    status = {"phase": phase} if phase else {}
    return {**instance({"name": "bm", "namespace": "ns", "annotations": annotations}), "status": status}


def test_a_lost_status_is_rebuilt_once_the_server_was_network_booted() -> None:
    booted = {markers.NETWORK_BOOTED: markers.now()}
    assert provisioning.needs_attention(body(None, **booted))
    assert not provisioning.needs_attention(body(None))
    assert not provisioning.needs_attention(body("NetworkBooting", **booted))


def test_a_callback_not_acted_on_needs_attention() -> None:
    marks = {markers.NETWORK_BOOTED: markers.now(), markers.CALLED_BACK: markers.now()}
    assert provisioning.needs_attention(body("Installing", **marks))
    assert not provisioning.needs_attention(body("Provisioned", **marks))


def test_a_reported_failure_not_acted_on_needs_attention() -> None:
    marks = {markers.NETWORK_BOOTED: markers.now(), markers.FAILURE_REPORTED: "BadChecksum: x"}
    assert provisioning.needs_attention(body("Installing", **marks))
    assert not provisioning.needs_attention(body("Failed", **marks)), "every attempt failed: nothing to do"


def test_only_provisioned_instances_are_resynced() -> None:
    assert provisioning.needs_resync(body("Provisioned"))
    assert not provisioning.needs_resync(body("Failed"))
    assert not provisioning.needs_resync(body(None))


def test_deleted_instances_are_served_only_while_they_are_cleaned() -> None:
    meta: dict[str, Any] = {
        "name": "bm",
        "namespace": "ns",
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {markers.TOKEN_SALT: "s" * 32},
    }
    cleaning = served_of(instance(meta, cleaning="metadata"), TOKENS)
    assert cleaning is not None
    assert cleaning.cleaning
    assert served_of(instance(meta, cleaning="disabled"), TOKENS) is None
    cleaned = {**meta, "annotations": {**meta["annotations"], markers.CLEANED: markers.now()}}
    assert served_of(instance(cleaned, cleaning="metadata"), TOKENS) is None
    live = served_of(instance({**meta, "deletionTimestamp": None}, cleaning="metadata"), TOKENS)
    assert live is not None
    assert not live.cleaning
    assert live.spec.boot_mac_address == "52:54:00:aa:bb:01"


async def test_bmc_calls_are_counted_by_backend_operation_and_outcome() -> None:
    labels = {"backend": "redfish", "operation": "facts", "outcome": "BackendUnavailable"}
    before = REGISTRY.get_sample_value("capfleet_backend_call_duration_seconds_count", labels) or 0.0
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    target = bmc.connect(
        f"redfish+http://127.0.0.1:{port}/redfish/v1/Systems/1", base.Credentials("u", "p"), verify=True
    )
    with pytest.raises(errors.BackendUnavailable):
        await target.facts()
    await target.close()
    after = REGISTRY.get_sample_value("capfleet_backend_call_duration_seconds_count", labels)
    assert after == before + 1
