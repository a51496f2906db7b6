"""The console's pure parts: the Create VM form, the quota bar, "my" VMs, sessions and form tokens."""

from __future__ import annotations

import base64
import json

import pytest

from capfleet.api import kinds
from capfleet.tables import CREATED_BY, CREATOR_LABEL, creator_label
from capfleet_console import views, vmform
from capfleet_console.acting import Identity, impersonable, impersonation_headers
from capfleet_console.sessions import LIFETIME_SECONDS, Sessions, lifetime_of
from capfleet_console.settings import interface_of

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJ3wzYd0GnDnEc6Y6VxVtM1iYgV4bB3f0tTxVN1Z7u9 alice@laptop"
GOOD = {
    "name": "web-1",
    "vcpus": "2",
    "memory_gib": "4",
    "disk_gib": "20",
    "image": "capfleet-node",
    "ssh_key": KEY,
}


def test_a_good_form_makes_a_valid_libvirt_vm_and_its_user_data_secret() -> None:
    wanted, problems = vmform.parse(GOOD, ["capfleet-node"])
    assert problems == {}
    assert wanted is not None
    vm = vmform.libvirt_vm(wanted, "team-a", "alice", {"network": "default"})
    parsed = kinds.LIBVIRT_VM.parse({**vm, "metadata": {**vm["metadata"], "namespace": "team-a"}})
    assert (parsed.spec.vcpus, parsed.spec.memory_mib, parsed.spec.disks[0].size_gib) == (2, 4096, 20)
    assert parsed.spec.cloud_init.user_data_secret_ref.name == "web-1-user-data"
    assert vm["metadata"]["annotations"] == {CREATED_BY: "alice"}
    assert vm["metadata"]["labels"] == {CREATOR_LABEL: creator_label("alice")}
    assert vm["spec"]["interfaces"][0]["macAddress"] == vmform.mac_address("team-a", "web-1")
    secret = vmform.user_data_secret(wanted, "alice")
    assert secret["metadata"]["labels"] == {"libvirt.capfleet.dev/user-data": "true"}  # meant for VMs
    user_data = base64.b64decode(secret["data"]["value"]).decode()
    assert user_data == f"#cloud-config\nssh_authorized_keys:\n  - {KEY}\n"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Web_1"}, "name"),
        ({"vcpus": "0"}, "vcpus"),
        ({"memory_gib": "lots"}, "memory_gib"),
        ({"disk_gib": "99999"}, "disk_gib"),
        ({"image": "windows"}, "image"),
        ({"ssh_key": "not a key"}, "ssh_key"),
        ({"ssh_key": ""}, "ssh_key"),
        ({"ssh_key": "", "user_data": "echo hi"}, "user_data"),
        ({"user_data": "#cloud-config\n"}, "ssh_key"),
    ],
)
def test_each_bad_field_is_named(change: dict[str, str], field: str) -> None:
    wanted, problems = vmform.parse({**GOOD, **change}, ["capfleet-node"])
    assert wanted is None
    assert set(problems) == {field}


def test_the_vm_owns_its_secret_once_made() -> None:
    vm = {
        "apiVersion": "libvirt.capfleet.dev/v1alpha1",
        "kind": "LibvirtVM",
        "metadata": {"name": "a", "uid": "u1"},
    }
    [ref] = vmform.owned_by(vm)["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "libvirt.capfleet.dev/v1alpha1",
        "kind": "LibvirtVM",
        "name": "a",
        "uid": "u1",
    }


def test_the_quota_bar_shows_the_tightest_quota_per_limit() -> None:
    loose = {
        "spec": {"hard": {"vcpus": 16, "memoryMiB": 65536}},
        "status": {"used": {"vcpus": 2, "memoryMiB": 4096}},
    }
    tight = {
        "spec": {"hard": {"vcpus": 4, "storageGiB": 300}},
        "status": {"used": {"vcpus": 2, "storageGiB": 0}},
    }
    bar = views.quota_bar([loose, tight])
    assert [str(item) for item in bar] == ["CPUs 2 / 4", "RAM 4 GiB / 64 GiB", "Disk 0 GiB / 300 GiB"]
    assert [item.percent for item in bar] == [50, 6, 0]
    assert views.quota_bar([]) == []


def test_my_vms_are_those_made_for_me() -> None:
    mine = {"metadata": {"name": "a", "annotations": {CREATED_BY: "alice"}}}
    theirs = {"metadata": {"name": "b", "annotations": {CREATED_BY: "bob"}}}
    capi = {"metadata": {"name": "c"}}
    assert views.mine([mine, theirs, capi], "alice") == [mine]


def test_sessions_expire_and_forms_need_their_token() -> None:
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0], lifetime=10)
    session_id, session = sessions.open(Identity("alice", ("team",)))
    assert sessions.find(session_id) is session
    assert session.accepts(session.form_token)
    assert not session.accepts("forged")
    assert not session.accepts(None)
    now[0] = 11
    assert sessions.find(session_id) is None
    assert sessions.find(None) is None


def jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_a_session_ends_when_its_token_does() -> None:
    """A session lasts as long as the token it was opened with (its `exp`), eight hours at most; a token
    without an expiry (not a JWT) gets the eight hours; a token already expired gets no session."""
    now = 1_800_000_000.0
    assert lifetime_of(jwt({"exp": now + 600, "sub": "x"}), now) == 600
    assert lifetime_of(jwt({"exp": now + 30 * 24 * 3600}), now) == LIFETIME_SECONDS
    assert lifetime_of(jwt({"exp": now - 5}), now) == 0
    assert lifetime_of("static-token-abc", now) == LIFETIME_SECONDS
    assert lifetime_of(jwt({"sub": "no-exp"}), now) == LIFETIME_SECONDS
    assert lifetime_of("a.!!!.c", now) == LIFETIME_SECONDS
    assert lifetime_of(jwt({"exp": True}), now) == LIFETIME_SECONDS
    clock = [0.0]
    sessions = Sessions(clock=lambda: clock[0])
    session_id, _ = sessions.open(Identity("alice"), lifetime_of(jwt({"exp": now + 600}), now))
    clock[0] = 599
    assert sessions.find(session_id) is not None
    clock[0] = 601
    assert sessions.find(session_id) is None, "the token expired: so did the session"


def test_the_console_passes_on_only_the_groups_it_may_impersonate() -> None:
    admin = Identity("root", ("system:masters", "system:authenticated", "team-a"))
    assert impersonable(admin, ["system:authenticated", "team-a"]) == Identity(
        "root", ("system:authenticated", "team-a")
    )
    assert impersonable(admin, []).groups == ()


def test_every_group_is_its_own_impersonation_header() -> None:
    headers = impersonation_headers(Identity("system:serviceaccount:a:b", ("g1", "g2")))
    assert headers.getall("Impersonate-Group") == ["g1", "g2"]
    assert headers["Impersonate-User"] == "system:serviceaccount:a:b"


def test_the_vm_interface_setting() -> None:
    assert interface_of("network:default") == {"network": "default"}
    assert interface_of("bridge:br0") == {"bridge": "br0"}
    assert interface_of("user") == {"userMode": True}
    with pytest.raises(ValueError, match="CAPFLEET_CONSOLE_INTERFACE"):
        interface_of("wifi")
