"""Secret holds' pure parts: finalizer names the API server accepts, the record of what is held.

Holding and letting go on a real API server, and `kubectl delete namespace` with live holders, are
proven in each operator's suite and in e2e/tests/test_hybrid_flow.py.
"""

import re

from capfleet import secretholds
from capfleet.resources import Resource

# The API server's rule for a finalizer (a qualified name with a DNS-subdomain prefix).
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def valid_finalizer(value: str) -> bool:
    prefix, _, name = value.partition("/")
    return (
        bool(DNS_SUBDOMAIN.match(prefix))
        and len(prefix) <= 253
        and bool(NAME_PART.match(name))
        and len(name) <= 63
    )


def test_a_finalizer_names_the_holder_readably_when_it_fits() -> None:
    assert secretholds.finalizer_of("NetboxDevice", "team-a", "web-md-0-x7k2p") == (
        "team-a.netboxdevice.holds.capfleet.dev/web-md-0-x7k2p"
    )
    assert secretholds.finalizer_of("Hypervisor", None, "hv1") == "hypervisor.holds.capfleet.dev/hv1"


def test_every_object_name_gives_a_valid_finalizer_and_distinct_names_distinct_ones() -> None:
    names = [
        "a",
        "x" * 63,
        "x" * 64,
        "x" * 253,
        "x" * 252 + "y",
        "a.b-c.d",
        "web." + "-" * 70 + "z",  # a hash tail must not leave separators at the cut
    ]
    found = {name: secretholds.finalizer_of("LibvirtVM", "n" * 63, name) for name in names}
    assert all(valid_finalizer(f) for f in found.values()), found
    assert len(set(found.values())) == len(names)
    assert found["x" * 63].endswith("/" + "x" * 63)


def test_the_record_lists_each_secret_once_and_ignores_garbage() -> None:
    meta = {"annotations": {secretholds.HELD_ANNOTATION: "ns/netbox,,bad,ns/a/b,/x,ns/bmc"}}
    assert secretholds.held(meta) == ["ns/netbox", "ns/bmc"]
    assert secretholds.held({}) == []
    assert secretholds.held_after(["ns/old", "ns/keep"], ["ns/keep", "ns/new"]) == [
        "ns/old",
        "ns/keep",
        "ns/new",
    ]


def test_a_finalizer_is_added_only_when_missing_and_never_to_a_secret_being_deleted() -> None:
    holder = secretholds.Holder(Resource("g", "v1", "things", "Thing"), {"name": "t", "namespace": "ns"})
    free = {"metadata": {"name": "s", "namespace": "ns"}}
    held = {"metadata": {"name": "s", "namespace": "ns", "finalizers": [holder.finalizer]}}
    going = {"metadata": {"name": "s", "namespace": "ns", "deletionTimestamp": "2026-11-26T00:00:00Z"}}
    assert secretholds.needs_finalizer(free, holder.finalizer)
    assert not secretholds.needs_finalizer(held, holder.finalizer)
    assert not secretholds.needs_finalizer(going, holder.finalizer)
    assert secretholds.key_of(free) == "ns/s"


def test_the_grants_are_the_namespaces_of_the_secrets_held_each_once() -> None:
    meta = {"annotations": {secretholds.GRANTS_ANNOTATION: "team-a,,team-b"}}
    assert secretholds.held_grants(meta) == ["team-a", "team-b"]
    assert secretholds.held_grants({}) == []
    assert secretholds.namespaces_of(["team-a/netbox", "hv/ssh", "team-a/bmc"]) == ["team-a", "hv"]
