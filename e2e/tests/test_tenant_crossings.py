"""What a tenant (a console user: the shipped ClusterRole capfleet-console-user bound in their namespace)
may not do to the fleet, tried with the tenant's own token against a real API server with deploy/base's
admission policies and the operators' shipped RBAC.

- A LibvirtVM that names its hypervisor skips placement, capacity and the VMQuota: a tenant may not set
  or change `spec.hypervisorName`; libvirt-vm (which places VMs) and cluster administrators may.
- A LibvirtVM annotated `libvirt.capfleet.dev/detached` is deleted leaving its domain running and no longer
  counted: a tenant may not add the annotation; administrators may.
- A disk whose base image names another VM's volume (`<namespace>_<name>_...`) would copy its disk or
  seed: the API server refuses such a name.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    test_faults_and_placement.)"""
    alice, _admin, namespace = tenant
    for image in ("other-tenant_db_root.qcow2", "other-tenant_db_cidata.iso", "../images/x.qcow2"):
        disks = [{"name": "root", "sizeGiB": 20, "sourceImage": image}]
        error = refused(alice, "create", "-n", namespace, "-f", "-", stdin=vm("thief", disks=disks))
        assert "sourceImage" in (error or ""), image
    alice("create", "-n", namespace, "-f", "-", stdin=vm("honest"))  # the sample's debian-12
