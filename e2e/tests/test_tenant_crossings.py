"""What a tenant (a console user: the shipped ClusterRole capfleet-console-user bound in their namespace)
may not do to the fleet, tried with the tenant's own token against a real API server with deploy/base's
admission policies and the operators' shipped RBAC.

- A LibvirtVM that names its hypervisor skips placement, capacity and the VMQuota: a tenant may not set
  or change `spec.hypervisorName`; libvirt-vm (which places VMs) and cluster administrators may.
- A LibvirtVM annotated `libvirt.capfleet.dev/detached` is deleted leaving its domain running and no longer
  counted: a tenant may not add the annotation; administrators may.
- Secrets: the role writes Secrets it may not read (a VM's user-data); it may write only those, Opaque and
  labelled `libvirt.capfleet.dev/user-data=true` (policy `capfleet-tenant-secrets`), not the NetBox
  connection, a BMC password or Cluster API's Secrets.
- A LibvirtVM a HybridMachine owns is its Cluster's: a tenant may neither change nor delete it, nor make a
  VM claiming such an owner (policy `capfleet-cluster-owned-vms`); the glue and administrators may.
- A BaremetalInstance it may read carries only a public salt: its boot tokens also need the operator's
  token key, in a Secret the tenant cannot read.
- A disk whose base image names another VM's volume (`<namespace>_<name>_...`) would copy its disk or
  seed: the API server refuses such a name.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from baremetal_provision import markers, tokenkey  # type: ignore[import-untyped]
from capfleet.api import kinds
from capfleet.api.samples import valid_samples
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import HarnessError, Kubectl, repo_root
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.kustomize import build, documents
from capfleet_e2e.serviceaccounts import apply_operator_rbac, service_account_kubeconfig

pytestmark = pytest.mark.integration

TENANT_ROLE = "capfleet-console-user"
PLACEMENT_REFUSED = "needs update on libvirtvms/placement"
DETACHED = "libvirt.capfleet.dev/detached"


def tenant_role() -> dict[str, Any]:
    """The console user's ClusterRole as the console overlay ships it."""
    objects = documents(build(repo_root() / "deploy" / "overlays" / "console"))
    [role] = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == TENANT_ROLE]
    return role


def vm(name: str, **spec: Any) -> str:
    [sample] = [s for s in valid_samples() if s["kind"] == kinds.LIBVIRT_VM.kind]
    sample["metadata"]["name"] = name
    sample["spec"].pop("hypervisorName", None)
    sample["spec"].update(spec)
    return json.dumps(sample)


@pytest.fixture
def tenant(control_plane: Cluster, tmp_path: Path) -> Iterator[tuple[Kubectl, Kubectl, str]]:
    """A namespace with a tenant ServiceAccount bound to the shipped console user role: (the tenant's
    kubectl, the admin's, the namespace)."""
    admin = control_plane.kubectl
    apply_operator_rbac(admin, "libvirt-vm")  # with deploy/base's admission policies
    admin("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(tenant_role()))
    namespace = f"tenant-{secrets.token_hex(3)}"
    admin("create", "namespace", namespace)
    admin("create", "serviceaccount", "alice", "-n", namespace)
    admin(
        "create",
        "rolebinding",
        "alice",
        f"--clusterrole={TENANT_ROLE}",
        "--serviceaccount",
        f"{namespace}:alice",
        "-n",
        namespace,
    )
    token = admin("create", "token", "alice", "-n", namespace).strip()
    if control_plane.ca_path is None:
        pytest.skip("the cluster's CA is unknown; cannot write a verified kubeconfig")
    user = f"system:serviceaccount:{namespace}:alice"
    kubeconfig = write_kubeconfig(
        tmp_path / "alice.kubeconfig", control_plane.server, control_plane.ca_path, user, token
    )
    yield Kubectl(admin.binary, kubeconfig), admin, namespace
    admin("delete", "namespace", namespace, "--wait=false")


def sample(kind: str, name: str) -> dict[str, Any]:
    [found] = [s for s in valid_samples() if s["kind"] == kind]
    found["metadata"]["name"] = name
    return found


def secret(name: str, labels: dict[str, str] | None = None, type_: str = "Opaque") -> str:
    meta = {"name": name, "labels": labels or {}}
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": type_})


def until_refused(
    kubectl: Kubectl, admin: Kubectl, undo: tuple[str, ...], *args: str, stdin: str | None = None
) -> str:
    """kubectl's refusal of a request, retried while a policy just applied is not in force yet (the API
    server's informer has not seen it): what went through is undone with `undo`, as the admin."""
    deadline = time.monotonic() + 30
    while (error := refused(kubectl, *args, stdin=stdin)) is None:
        admin(*undo)
        assert time.monotonic() < deadline, f"never refused: {args}"
        time.sleep(0.5)
    return error


def call(kubectl: Kubectl, method: str, path: str, body: dict[str, Any] | None = None) -> str | None:
    """One request to the API server as the kubeconfig's user (a merge patch for PATCH), as the console
    sends it: the error's message, None if it went through."""
    config = yaml.safe_load(kubectl.kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    headers = {"Authorization": f"Bearer {user['token']}", "Content-Type": "application/merge-patch+json"}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(cluster["server"] + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30):
            return None
    except urllib.error.HTTPError as error:
        return str(json.loads(error.read()).get("message", error.reason))


def refused(kubectl: Kubectl, *args: str, stdin: str | None = None) -> str | None:
    """kubectl's error, None if the request went through."""
    try:
        kubectl(*args, stdin=stdin)
    except HarnessError as error:
        return str(error)
    return None


def test_a_tenant_may_neither_place_a_vm_nor_detach_it(
    tenant: tuple[Kubectl, Kubectl, str], control_plane: Cluster, tmp_path: Path
) -> None:
    alice, admin, namespace = tenant
    ns = ("-n", namespace)
    # A new policy takes effect once the API server's informer has it: wait for the first refusal.
    deadline = time.monotonic() + 30
    while (
        error := refused(alice, "create", *ns, "-f", "-", stdin=vm("pinned", hypervisorName="hv-1"))
    ) is None:
        admin("delete", "libvirtvm", "pinned", *ns)
        assert time.monotonic() < deadline, "the admission policy never refused a tenant's placement"
        time.sleep(0.5)
    assert PLACEMENT_REFUSED in error

    alice("create", *ns, "-f", "-", stdin=vm("mine"))  # an unplaced VM is the tenant's to make
    place = json.dumps({"spec": {"hypervisorName": "hv-1"}})
    assert PLACEMENT_REFUSED in (
        refused(alice, "patch", "libvirtvm", "mine", *ns, "--type=merge", "-p", place) or ""
    )
    detach = json.dumps({"metadata": {"annotations": {DETACHED: "true"}}})
    assert DETACHED in (refused(alice, "patch", "libvirtvm", "mine", *ns, "--type=merge", "-p", detach) or "")
    alice(
        "patch",
        "libvirtvm",
        "mine",
        *ns,
        "--type=merge",
        "-p",
        '{"metadata": {"annotations": {"note": "x"}}}',
    )

    operator = Kubectl(
        admin.binary, service_account_kubeconfig(control_plane, "libvirt-vm", tmp_path / "lv.kubeconfig")
    )
    operator("patch", "libvirtvm", "mine", *ns, "--type=merge", "-p", place)  # placement is libvirt-vm's
    admin("patch", "libvirtvm", "mine", *ns, "--type=merge", "-p", detach)  # and detaching an admin's
    stored = json.loads(admin("get", "libvirtvm", "mine", *ns, "-o", "json"))
    assert stored["spec"]["hypervisorName"] == "hv-1"
    assert stored["metadata"]["annotations"][DETACHED] == "true"
    admin("annotate", "libvirtvm", "mine", *ns, f"{DETACHED}-")
    admin("delete", "libvirtvm", "mine", *ns, "--wait=false")


def test_a_tenant_may_not_name_another_vms_volume_as_a_base_image(
    tenant: tuple[Kubectl, Kubectl, str],
) -> None:
    """Every VM's own volumes are `<namespace>_<name>_...`: a disk whose image has `_` (or a path) is
    refused by the API server, whatever the hypervisors offer, so no tenant clones another's disk or
    seed. (Which volumes a VM may clone is the Hypervisor's `spec.baseImages`, checked by libvirt-vm:
    test_tenant_confinement.)"""
    alice, _admin, namespace = tenant
    for image in ("other-tenant_db_root.qcow2", "other-tenant_db_cidata.iso", "../images/x.qcow2"):
        disks = [{"name": "root", "sizeGiB": 20, "sourceImage": image}]
        error = refused(alice, "create", "-n", namespace, "-f", "-", stdin=vm("thief", disks=disks))
        assert "sourceImage" in (error or ""), image
    alice("create", "-n", namespace, "-f", "-", stdin=vm("honest"))  # the sample's debian-12


FOR_VMS = {"libvirt.capfleet.dev/user-data": "true"}
POLICY = "capfleet-tenant-secrets"


def test_a_tenant_writes_only_the_secrets_meant_for_vms(tenant: tuple[Kubectl, Kubectl, str]) -> None:
    """The role cannot `get` Secrets, so kubectl's patch (which reads first) cannot even be tried: the
    writes go to the API as the console sends them, a PUT and a DELETE by name."""
    alice, admin, namespace = tenant
    ns = ("-n", namespace)
    path = f"/api/v1/namespaces/{namespace}/secrets"
    admin("create", *ns, "secret", "generic", "netbox", "--from-literal=url=https://netbox.example")
    admin("create", *ns, "-f", "-", stdin=secret("c1-ca", {"cluster.x-k8s.io/cluster-name": "c1"}))
    error = until_refused(
        alice, admin, ("delete", "secret", "plain", *ns), "create", *ns, "-f", "-", stdin=secret("plain")
    )
    assert "libvirt.capfleet.dev/user-data" in error

    def patch(name: str, change: dict[str, Any]) -> str | None:
        return call(alice, "PATCH", f"{path}/{name}", change)

    steal = {"stringData": {"url": "https://attacker.example"}}
    assert POLICY in (patch("netbox", steal) or "")
    assert POLICY in (patch("netbox", {"metadata": {"labels": FOR_VMS}, **steal}) or "")
    assert POLICY in (call(alice, "DELETE", f"{path}/c1-ca") or "")
    token = secret("typed", FOR_VMS, "example.com/not-user-data")
    assert "Opaque" in (refused(alice, "create", *ns, "-f", "-", stdin=token) or "")

    alice("create", *ns, "-f", "-", stdin=secret("web-1-user-data", FOR_VMS))  # a VM's user-data
    assert patch("web-1-user-data", {"stringData": {"value": "#cloud-config"}}) is None
    unlabel = {"metadata": {"labels": {"libvirt.capfleet.dev/user-data": None}}}
    assert POLICY in (patch("web-1-user-data", unlabel) or "")
    assert call(alice, "DELETE", f"{path}/web-1-user-data") is None
    stored = json.loads(admin("get", "secret", "netbox", *ns, "-o", "json"))
    assert base64.b64decode(stored["data"]["url"]) == b"https://netbox.example"
    assert "labels" not in stored["metadata"], "the NetBox Secret is as its owner left it"
    assert admin("get", "secret", "c1-ca", *ns, "-o", "name").strip() == "secret/c1-ca"
    moved = json.dumps({"stringData": {"url": "https://moved.example"}})
    admin("patch", "secret", "netbox", *ns, "--type=merge", "-p", moved)  # administrators are not limited


def test_a_tenant_may_neither_change_nor_delete_a_vm_its_cluster_owns(
    tenant: tuple[Kubectl, Kubectl, str], control_plane: Cluster, tmp_path: Path
) -> None:
    alice, admin, namespace = tenant
    ns = ("-n", namespace)
    apply_operator_rbac(admin, "capi-machine-glue")
    glue = Kubectl(
        admin.binary,
        service_account_kubeconfig(control_plane, "capi-machine-glue", tmp_path / "g.kubeconfig"),
    )
    machine = json.loads(
        admin("create", *ns, "-o", "json", "-f", "-", stdin=json.dumps(sample("HybridMachine", "cp-0")))
    )
    owner = {
        "apiVersion": machine["apiVersion"],
        "kind": "HybridMachine",
        "name": "cp-0",
        "uid": machine["metadata"]["uid"],
        "controller": True,
    }
    owned = json.loads(vm("cp-0"))
    owned["metadata"]["ownerReferences"] = [owner]
    impostor = json.loads(vm("cp-0-copy"))
    impostor["metadata"]["ownerReferences"] = [owner]
    error = until_refused(
        alice,
        admin,
        ("delete", "libvirtvm", "cp-0-copy", *ns),
        "create",
        *ns,
        "-f",
        "-",
        stdin=json.dumps(impostor),
    )
    assert "libvirtvms/cluster-owned" in error
    glue("create", *ns, "-f", "-", stdin=json.dumps(owned))  # the glue makes its machines' VMs
    power = json.dumps({"spec": {"powerState": "Off"}})
    assert "libvirtvms/cluster-owned" in (
        refused(alice, "patch", "libvirtvm", "cp-0", *ns, "--type=merge", "-p", power) or ""
    )
    assert "libvirtvms/cluster-owned" in (refused(alice, "delete", "libvirtvm", "cp-0", *ns) or "")
    glue("patch", "libvirtvm", "cp-0", *ns, "--type=merge", "-p", power)
    alice("create", *ns, "-f", "-", stdin=vm("own"))  # a VM of the tenant's own is theirs
    alice("delete", "libvirtvm", "own", *ns)
    admin("delete", "libvirtvm", "cp-0", *ns)


def test_a_tenant_who_reads_a_server_cannot_derive_its_boot_tokens(
    tenant: tuple[Kubectl, Kubectl, str],
) -> None:
    """The role reads BaremetalInstances (the console shows servers); their tokens, which fetch a server's
    seed and sign its callbacks, are HMACs of the operator's token key and the instance's salt. The salt is
    on the instance, the key in a Secret in capfleet-system that only baremetal-provision reads."""
    alice, admin, namespace = tenant
    apply_operator_rbac(admin, "baremetal-provision")
    server = sample(kinds.BAREMETAL_INSTANCE.kind, "bm-0")
    server["metadata"]["annotations"] = {markers.TOKEN_SALT: secrets.token_hex(16)}
    admin("create", "-n", namespace, "-f", "-", stdin=json.dumps(server))
    key = secrets.token_bytes(32)
    made = refused(admin, "create", "-f", "-", stdin=token_key(key))
    assert made is None or "AlreadyExists" in made
    read = json.loads(alice("get", "baremetalinstance", "bm-0", "-n", namespace, "-o", "json"))
    assert set(read["metadata"]["annotations"]) == {markers.TOKEN_SALT}, "nothing but the salt to derive from"
    for where in ("capfleet-system", namespace):
        error = refused(alice, "get", "secret", tokenkey.SECRET_NAME, "-n", where)
        assert "forbidden" in (error or ""), where
    assert call(alice, "GET", f"/api/v1/namespaces/capfleet-system/secrets/{tokenkey.SECRET_NAME}")


def token_key(key: bytes) -> str:
    meta = {"name": tokenkey.SECRET_NAME, "namespace": "capfleet-system"}
    data = {tokenkey.FIELD: base64.b64encode(key).decode()}
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data})


def test_the_consoles_token_impersonates_no_privileged_group(control_plane: Cluster, tmp_path: Path) -> None:
    """Whoever holds the console's token acts as any user, but only with the groups the console passes on
    (`CAPFLEET_CONSOLE_GROUPS`, `system:authenticated` as shipped): not `system:masters`."""
    admin = control_plane.kubectl
    objects = documents(build(repo_root() / "deploy" / "overlays" / "console"))
    wanted = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capfleet-system"}}
    items = [namespace, *(o for o in objects if o["kind"] in wanted)]
    admin(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    token = admin("create", "token", "capfleet-console-manager", "-n", "capfleet-system").strip()
    if control_plane.ca_path is None:
        pytest.skip("the cluster's CA is unknown; cannot write a verified kubeconfig")
    console = Kubectl(
        admin.binary,
        write_kubeconfig(
            tmp_path / "console.kubeconfig", control_plane.server, control_plane.ca_path, "console", token
        ),
    )
    assert "gitVersion" in console("get", "--raw", "/version", "--as=eve", "--as-group=system:authenticated")
    error = refused(console, "get", "--raw", "/version", "--as=eve", "--as-group=system:masters")
    assert 'cannot impersonate resource "groups"' in (error or "")
    assert "cannot impersonate" in (
        refused(console, "get", "secrets", "-A", "--as=eve", "--as-group=team-x") or ""
    )
