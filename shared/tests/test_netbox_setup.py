"""`capfleet netbox-setup` against real NetBox releases, and the plan it makes from what it finds."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from capfleet import netbox
from capfleet.cli import main
from capfleet.netboxschema import BMC_ADDRESS, FIELDS, OWNER, PREVIOUS, field_problem, plan, release_problem
from capfleet.netboxsetup import setup
from capfleet_e2e.netbox.fixtures import NetboxInstance

RELEASES = pytest.mark.parametrize("netbox", ["4.4.10", "4.6.8"], indirect=True)


def record(wanted: Any, **changes: Any) -> dict[str, Any]:
    """A custom field as NetBox's API renders it (choices as value/label pairs)."""
    body = wanted.body()
    body.update(changes)
    return {
        **body,
        "id": 7,
        "type": {"value": body["type"], "label": body["type"].title()},
        "filter_logic": {"value": body["filter_logic"], "label": body["filter_logic"].title()},
    }


def test_an_empty_netbox_gets_every_field_and_the_tag() -> None:
    changes, unfixable = plan([], [])
    assert [c.body["name"] for c in changes] == [f.name for f in FIELDS] + ["capfleet"]
    assert all(c.record_id is None for c in changes)
    assert unfixable == []


def test_a_netbox_that_is_ready_gets_no_change() -> None:
    changes, unfixable = plan([record(f) for f in FIELDS], [{"slug": "capfleet"}])
    assert changes == []
    assert unfixable == []


def test_loose_filter_logic_on_the_owner_field_is_fixed_and_a_missing_object_type_added() -> None:
    owner = record(OWNER, filter_logic="loose", object_types=["dcim.device"])
    changes, _ = plan([owner, record(PREVIOUS), record(BMC_ADDRESS)], [{"slug": "capfleet"}])
    (change,) = changes
    assert change.record_id == 7
    assert change.body == {
        "filter_logic": "exact",
        "object_types": ["dcim.device", "ipam.ipaddress", "virtualization.virtualmachine"],
    }


def test_a_field_of_another_type_is_reported_not_changed() -> None:
    changes, unfixable = plan(
        [record(OWNER, type="integer"), record(PREVIOUS), record(BMC_ADDRESS)], [{"slug": "capfleet"}]
    )
    assert changes == []
    assert "capfleet_owner is of type integer" in unfixable[0]


def test_problems_name_the_setup_command() -> None:
    assert "capfleet netbox-setup" in (field_problem([], OWNER, "ipam.ipaddress") or "")
    loose = record(OWNER, filter_logic="loose")
    assert "filter logic exact, not loose" in (field_problem([loose], OWNER, "dcim.device") or "")
    assert field_problem([record(OWNER)], OWNER, "ipam.ipaddress") is None


def run_setup(instance: NetboxInstance, *, check: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    connection = netbox.Connection(url=instance.url, token=instance.token)
    code = asyncio.run(setup(connection, check_only=check, out=out))
    return code, out.getvalue()


@pytest.mark.integration
@RELEASES
def test_setup_on_an_empty_netbox_then_again(netbox: NetboxInstance) -> None:
    assert run_setup(netbox, check=True)[0] == 1
    code, said = run_setup(netbox)
    assert code == 0, said
    fields = {f["name"]: f for f in netbox.client.list_all("extras/custom-fields/")}
    for wanted in FIELDS:
        found = fields[wanted.name]
        assert sorted(found["object_types"]) == sorted(wanted.object_types)
        assert found["filter_logic"]["value"] == wanted.filter_logic
        assert found["type"]["value"] == "text"
    assert netbox.client.list_all("extras/tags/", slug="capfleet")
    netbox.faults.reset_log()
    code, said = run_setup(netbox)
    assert code == 0, said
    assert "changes" not in said
    writes = [r for r in netbox.faults.requests() if r.method in {"POST", "PATCH", "PUT", "DELETE"}]
    assert writes == []
    assert run_setup(netbox, check=True)[0] == 0


@pytest.mark.integration
@RELEASES
def test_setup_fixes_the_owner_fields_filter_logic(
    netbox: NetboxInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = OWNER.body() | {"filter_logic": "loose", "object_types": ["dcim.device"]}
    netbox.client.create("extras/custom-fields/", body)
    code, said = run_setup(netbox, check=True)
    assert code == 1
    assert "filter logic loose → exact" in said
    monkeypatch.setenv("NETBOX_TOKEN", netbox.token)
    assert main(["netbox-setup", "--url", netbox.url]) == 0
    (owner,) = netbox.client.list_all("extras/custom-fields/", name=OWNER.name)
    assert owner["filter_logic"]["value"] == "exact"
    assert sorted(owner["object_types"]) == sorted(OWNER.object_types)
    assert field_problem([owner], OWNER, "ipam.ipaddress") is None


@pytest.mark.integration
@RELEASES
def test_a_read_only_token_is_refused_with_a_clear_message(
    netbox: NetboxInstance, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert netbox.read_only_token is not None
    monkeypatch.setenv("NETBOX_TOKEN", netbox.read_only_token)
    assert main(["netbox-setup", "--url", netbox.url]) == 2
    err = capsys.readouterr().err
    assert "refused the token (403)" in err
    assert netbox.read_only_token not in err


@pytest.mark.parametrize(
    ("version", "supported"),
    [("4.1.11", False), ("4.2.0", True), ("4.4.10", True), ("4.6.8-Docker-3.3", True), ("", False)],
)
def test_releases_before_4_2_are_refused_by_name(version: str, supported: bool) -> None:
    problem = release_problem({"netbox-version": version})
    assert (problem is None) == supported
    if problem:
        assert "older than 4.2, the oldest release capfleet supports" in problem
