"""What each operator's base RBAC allows, asked of the real apiserver with SubjectAccessReviews.

The operators' scenarios (operators/*/tests/test_rbac.py) prove that the bases grant enough; these
checks prove they grant no more than the design needs:

- no operator can list or watch Secrets anywhere; only those whose objects reference Secrets by name
  (NetBox connections, BMC credentials, SSH keys, bootstrap data) can `get` one, and `patch` it (to put
  and take off their own finalizers, `capfleet.secretholds`), and only in a namespace that opted in with
  deploy/tenant (everywhere with deploy/overlays/cluster-wide); none can update or delete one, and only
  baremetal-provision can create one: its token key, in capfleet-system, named by deploy/base's
  admission policy;
- no operator can write a CRD, or the status of another operator's kinds, and only the glue writes
  another operator's objects: exactly the intermediate kinds it creates; libvirt-vm writes only the
  status of VMQuotas (administrators set them);
- each operator creates and renews only its own leader-election Leases (its own and its shards'), in
  capfleet-system only: RBAC allows Leases there, deploy/base's admission policy names which;
- each may create TokenReviews and SubjectAccessReviews (its secure /metrics endpoint asks who a
  scraper is and whether it may read metrics);
- deploy/base's admission policy lets an operator change nothing on a Secret but its own finalizers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet import resources
from capfleet.kube import Invalid, Kube
from capfleet.leadership import LEADER_LABEL
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import HarnessError, Kubectl, repo_root
from capfleet_e2e.kustomize import build
from capfleet_e2e.serviceaccounts import (
    NAMESPACE,
    Access,
    allowed,
    apply_operator_rbac,
    opt_in,
    service_account_kubeconfig,
    service_account_user,
)

pytestmark = pytest.mark.integration

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
# Operators whose objects name a Secret they must read: NetBox connections (ipam-address's NetboxIPPool,
# netbox-device), SSH keys and bootstrap data (libvirt-vm), BMC credentials and bootstrap data
# (baremetal-provision). The glue only passes Secret names on.
READS_SECRETS = {"ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision"}
# The only operator that keeps a Secret of its own (the key its boot tokens are derived from).
TOKEN_KEY_OWNER, TOKEN_KEY = "baremetal-provision", "capfleet-baremetal-provision-token-key"
# The intermediate objects the glue creates, patches and deletes (their owners reconcile them).
GLUE = "capi-machine-glue"
GLUE_WRITES = {
    ("libvirt.capfleet.dev", "libvirtvms"),
    ("netbox.capfleet.dev", "netboxdevices"),
    ("netbox.capfleet.dev", "netboxvirtualmachines"),
    ("baremetal.capfleet.dev", "baremetalinstances"),
}
GLUE_VERBS = {"create", "patch", "delete"}
# Owned kinds their operator only reads (and writes the status of): limits set by administrators.
READ_ONLY = {("libvirt.capfleet.dev", "vmquotas")}
WRITE_VERBS = ("create", "update", "patch", "delete")


def owned_kinds(operator: str) -> set[tuple[str, str]]:
    """(group, plural) of every CRD in crds/<operator>/."""
    found = set()
    for path in sorted(Path(repo_root() / "crds" / operator).glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("kind") == "CustomResourceDefinition":
            found.add((doc["spec"]["group"], doc["spec"]["names"]["plural"]))
    return found


@pytest.fixture(scope="module")
def admin(control_plane: Cluster) -> Kubectl:
    """The session's admin kubectl, after every operator's base RBAC has been applied."""
    for operator in OPERATORS:
        apply_operator_rbac(control_plane.kubectl, operator)
    return control_plane.kubectl


@pytest.fixture(scope="module")
def tenant(admin: Kubectl) -> Iterator[str]:
    """A namespace that opted in with deploy/tenant, as a user does for each that holds clusters."""
    namespace = f"tenant-{secrets.token_hex(3)}"
    admin("create", "namespace", namespace)
    opt_in(admin, namespace)
    yield namespace
    admin("delete", "namespace", namespace, "--wait=false")


def secret_rules(operator: str, tenant: str) -> dict[Access, bool]:
    """In a namespace that opted in: Secrets by name, and patch for holds. Anywhere else (`default`, and
    capfleet-system but for the token key's owner): nothing."""
    user = service_account_user(operator)
    expected: dict[Access, bool] = {}
    for verb in ("list", "watch"):
        expected[(user, verb, "", "secrets", "")] = False
        expected[(user, verb, "", "secrets", tenant)] = False
    for namespace in (tenant, "default", NAMESPACE):
        opted_in = namespace == tenant and operator in READS_SECRETS
        for verb in WRITE_VERBS:
            # RBAC cannot name an object being created: the token key's create is the admission policy's.
            key_owner = verb == "create" and namespace == NAMESPACE and operator == TOKEN_KEY_OWNER
            expected[(user, verb, "", "secrets:hybrid-ca", namespace)] = (
                verb == "patch" and opted_in
            ) or key_owner
        expected[(user, "get", "", "secrets:hybrid-ca", namespace)] = opted_in
    expected[(user, "create", "", "secrets", NAMESPACE)] = operator == TOKEN_KEY_OWNER
    expected[(user, "get", "", f"secrets:{TOKEN_KEY}", NAMESPACE)] = operator == TOKEN_KEY_OWNER
    # Its own deploy/tenant RoleBinding, patched to hold it (capfleet.secretholds), where it is bound.
    group, grant = "rbac.authorization.k8s.io", f"rolebindings:capfleet-{operator}-secrets"
    for namespace in (tenant, "default"):
        opted_in = namespace == tenant and operator in READS_SECRETS
        expected[(user, "patch", group, grant, namespace)] = opted_in
        expected[(user, "delete", group, grant, namespace)] = False
        expected[(user, "patch", group, "rolebindings:capfleet-ipam-address-secrets", namespace)] = (
            opted_in and operator == "ipam-address"
        )
    return expected


def ownership_rules(operator: str) -> dict[Access, bool]:
    user = service_account_user(operator)
    expected: dict[Access, bool] = {}
    for verb in WRITE_VERBS:
        expected[(user, verb, "apiextensions.k8s.io", "customresourcedefinitions", "")] = False
    for group, plural in owned_kinds(operator):
        for verb in ("get", "list", "watch", "patch"):
            expected[(user, verb, group, plural, "default")] = (
                verb != "patch" or (group, plural) not in READ_ONLY
            )
        expected[(user, "patch", group, f"{plural}/status", "default")] = True
    for other in OPERATORS:
        if other == operator:
            continue
        for group, plural in owned_kinds(other):
            for verb in WRITE_VERBS:
                glue_may = operator == GLUE and (group, plural) in GLUE_WRITES and verb in GLUE_VERBS
                expected[(user, verb, group, plural, "default")] = glue_may
                expected[(user, verb, group, f"{plural}/status", "default")] = False
    return expected


@pytest.mark.parametrize("operator", OPERATORS)
def test_secrets_are_read_by_name_and_held_only_where_the_design_needs_it(
    admin: Kubectl, tenant: str, operator: str
) -> None:
    expected = secret_rules(operator, tenant)
    answers = allowed(admin, list(expected))
    assert {q: a for q, a in answers.items() if a != expected[q]} == {}


@pytest.mark.parametrize("operator", OPERATORS)
def test_no_operator_writes_crds_or_another_operators_objects(admin: Kubectl, operator: str) -> None:
    expected = ownership_rules(operator)
    answers = allowed(admin, list(expected))
    assert {q: a for q, a in answers.items() if a != expected[q]} == {}


def lease_rules(operator: str) -> dict[Access, bool]:
    """RBAC's part: Leases in capfleet-system only, never listed or deleted (which of them an operator may
    create or change is the admission policy's part, test_each_operator_writes_only_its_own_leases)."""
    user, group = service_account_user(operator), "coordination.k8s.io"
    expected: dict[Access, bool] = {
        (user, "create", group, "leases", NAMESPACE): True,
        (user, "create", group, "leases", "default"): False,
        (user, "list", group, "leases", NAMESPACE): False,
        (user, "watch", group, "leases", NAMESPACE): False,
        (user, "delete", group, f"leases:capfleet-{operator}", NAMESPACE): False,
    }
    expected[(user, "create", "authentication.k8s.io", "tokenreviews", "")] = True
    expected[(user, "create", "authorization.k8s.io", "subjectaccessreviews", "")] = True
    for verb in ("get", "patch"):
        for lease in (f"capfleet-{operator}", f"capfleet-{operator}-shard-a"):
            expected[(user, verb, group, f"leases:{lease}", NAMESPACE)] = True
            expected[(user, verb, group, f"leases:{lease}", "default")] = False
    return expected


@pytest.mark.parametrize("operator", OPERATORS)
def test_each_operator_holds_only_its_own_lease_and_may_review_scrapers(
    admin: Kubectl, operator: str
) -> None:
    expected = lease_rules(operator)
    answers = allowed(admin, list(expected))
    assert {q: a for q, a in answers.items() if a != expected[q]} == {}


def lease(name: str, holder: str) -> str:
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }
    )


def create_refused(kubectl: Kubectl, manifest: str) -> str | None:
    """kubectl create's error, None if it was created."""
    try:
        kubectl("create", "-f", "-", stdin=manifest)
    except HarnessError as refused:
        return str(refused)
    return None


def test_each_operator_writes_only_its_own_leases(
    admin: Kubectl, control_plane: Cluster, tmp_path: Path
) -> None:
    """With its own token, an operator creates and renews its Lease and a shard's, and is refused
    another operator's: neither squatted before that operator starts nor taken over while it runs."""
    kubeconfig = service_account_kubeconfig(control_plane, "netbox-device", tmp_path / "nd.kubeconfig")
    as_operator = Kubectl(admin.binary, kubeconfig)
    suffix = secrets.token_hex(3)
    running = f"capfleet-ipam-address-{suffix}"  # another operator's shard, already held
    admin("create", "-f", "-", stdin=lease(running, "ipam-address-0"))
    try:
        # A new policy takes effect once the API server's informer has it: wait for the first refusal.
        squatted = f"capfleet-libvirt-vm-{suffix}"
        deadline = time.monotonic() + 30
        while (refusal := create_refused(as_operator, lease(squatted, "netbox-device-0"))) is None:
            admin("delete", "lease", squatted, "-n", NAMESPACE)
            assert time.monotonic() < deadline, "the admission policy never refused another operator's Lease"
            time.sleep(0.5)
        assert "may hold only its own Leases" in refusal
        renew = '{"spec": {"holderIdentity": "netbox-device-0"}}'
        with pytest.raises(HarnessError, match="may hold only its own Leases"):
            as_operator("patch", "lease", running, "-n", NAMESPACE, "--type=merge", "-p", renew)
        holder = admin("get", "lease", running, "-n", NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}")
        assert holder == "ipam-address-0"
        for own in (f"capfleet-netbox-device-{suffix}", "capfleet-netbox-device"):
            as_operator("create", "-f", "-", stdin=lease(own, "netbox-device-0"))
            as_operator("patch", "lease", own, "-n", NAMESPACE, "--type=merge", "-p", renew)
            admin("delete", "lease", own, "-n", NAMESPACE)
        # A name that only starts like its own is another operator's (or nobody's).
        with pytest.raises(HarnessError, match="may hold only its own Leases"):
            as_operator("create", "-f", "-", stdin=lease("capfleet-netbox-devicex", "netbox-device-0"))
    finally:
        admin("delete", "lease", running, "-n", NAMESPACE, "--ignore-not-found")


def secret(name: str, namespace: str = NAMESPACE, labels: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "data": {"key": base64.b64encode(b"planted").decode()},
        }
    )


def test_baremetal_provision_creates_no_secret_but_its_token_key(
    admin: Kubectl, control_plane: Cluster, tmp_path: Path
) -> None:
    """RBAC cannot name a Secret being created: deploy/base's admission policy capfleet-own-secrets lets
    baremetal-provision, with its own token, create its token key and no other Secret (one another
    component or a person will make, such as the boot front's TLS Secret), and RBAC none outside
    capfleet-system."""
    kubeconfig = service_account_kubeconfig(control_plane, TOKEN_KEY_OWNER, tmp_path / "bp.kubeconfig")
    as_operator = Kubectl(admin.binary, kubeconfig)
    squatted = f"capfleet-boot-tls-{secrets.token_hex(3)}"
    try:
        # A new policy takes effect once the API server's informer has it: wait for the first refusal.
        deadline = time.monotonic() + 30
        # Labelled as a VM's user-data, which capfleet-tenant-secrets lets a writer that cannot read it
        # create: the refusal is capfleet-own-secrets' alone.
        squatting = secret(squatted, labels={"libvirt.capfleet.dev/user-data": "true"})
        while (refusal := create_refused(as_operator, squatting)) is None:
            admin("delete", "secret", squatted, "-n", NAMESPACE)
            assert time.monotonic() < deadline, "the admission policy never refused another Secret"
            time.sleep(0.5)
        assert "may create only its own token key Secret" in refusal
        with pytest.raises(HarnessError, match="forbidden"):
            as_operator("create", "-f", "-", stdin=secret(TOKEN_KEY, "default"))
        admin("delete", "secret", TOKEN_KEY, "-n", NAMESPACE, "--ignore-not-found")
        as_operator("create", "-f", "-", stdin=secret(TOKEN_KEY))
        made = json.loads(admin("get", "secret", TOKEN_KEY, "-n", NAMESPACE, "-o", "json"))
        assert base64.b64decode(made["data"]["key"]) == b"planted"
    finally:
        admin("delete", "secret", squatted, TOKEN_KEY, "-n", NAMESPACE, "--ignore-not-found")


def test_operators_may_change_nothing_on_a_secret_but_their_own_holds(
    admin: Kubectl, control_plane: Cluster, tmp_path: Path
) -> None:
    """RBAC's `patch` on Secrets is wider than holds need; deploy/base's admission policy narrows it to
    capfleet's own finalizers, for every capfleet manager ServiceAccount (checked here with one)."""
    as_operator = Kubectl(
        admin.binary, service_account_kubeconfig(control_plane, "netbox-device", tmp_path / "nd.kubeconfig")
    )
    namespace = f"holds-{secrets.token_hex(3)}"
    admin("create", "namespace", namespace)
    opt_in(admin, namespace)
    try:
        admin("create", "secret", "generic", "netbox", "-n", namespace, "--from-literal=token=t0")
        hold = f"{namespace}.netboxdevice.holds.capfleet.dev/m0"

        def patch(change: dict[str, Any]) -> str:
            return as_operator(
                "patch", "secret", "netbox", "-n", namespace, "--type=strategic", "-p", json.dumps(change)
            )

        data = {"data": {"token": base64.b64encode(b"stolen").decode()}}
        refused: dict[str, dict[str, Any]] = {
            "may not change a Secret's data": data,
            "may not change a Secret's labels": {"metadata": {"labels": {"x": "y"}}},
            "only their own finalizers": {"metadata": {"finalizers": ["example.com/keep"]}},
        }
        # A new policy takes effect once the API server's informer has it: wait for the first refusal
        # (putting the token back if a patch got through before).
        deadline = time.monotonic() + 30
        while True:
            try:
                patch(data)
            except HarnessError:
                break
            assert time.monotonic() < deadline, "the admission policy never refused a data change"
            admin(
                "patch",
                "secret",
                "netbox",
                "-n",
                namespace,
                "--type=merge",
                "-p",
                '{"data":{"token":"dDA="}}',
            )
            time.sleep(0.5)
        for message, change in refused.items():
            with pytest.raises(HarnessError, match=message):
                patch(change)
        patch({"metadata": {"finalizers": [hold]}})
        stored = json.loads(admin("get", "secret", "netbox", "-n", namespace, "-o", "json"))
        assert stored["metadata"]["finalizers"] == [hold]
        assert base64.b64decode(stored["data"]["token"]) == b"t0"
        patch({"metadata": {"$deleteFromPrimitiveList/finalizers": [hold]}})
        stored = json.loads(admin("get", "secret", "netbox", "-n", namespace, "-o", "json"))
        assert not stored["metadata"].get("finalizers")
    finally:
        admin("delete", "namespace", namespace, "--wait=false")


def test_cluster_wide_secrets_lets_every_reader_get_a_secret_in_any_namespace(admin: Kubectl) -> None:
    """The opt-in deploy/components/cluster-wide-secrets: a Secret by name in a namespace that never
    applied deploy/tenant, for the four operators that read them; still no list, no write but holds."""
    other = f"other-{secrets.token_hex(3)}"
    admin("create", "namespace", other)
    wide = build(repo_root() / "deploy" / "overlays" / "cluster-wide")
    bindings = [o for o in yaml.safe_load_all(wide) if o["kind"] == "ClusterRoleBinding"]
    opted = [o for o in bindings if o["roleRef"]["name"].endswith("-secrets")]
    try:
        items = {"apiVersion": "v1", "kind": "List", "items": opted}
        admin("apply", "--server-side", "-f", "-", stdin=json.dumps(items))
        expected: dict[Access, bool] = {}
        for operator in OPERATORS:
            user = service_account_user(operator)
            expected[(user, "get", "", "secrets:hybrid-ca", other)] = operator in READS_SECRETS
            expected[(user, "patch", "", "secrets:hybrid-ca", other)] = operator in READS_SECRETS
            expected[(user, "list", "", "secrets", other)] = False
            expected[(user, "delete", "", "secrets:hybrid-ca", other)] = False
        answers = allowed(admin, list(expected))
        assert {q: a for q, a in answers.items() if a != expected[q]} == {}
    finally:
        for binding in opted:
            admin("delete", "clusterrolebinding", binding["metadata"]["name"], "--ignore-not-found")
        admin("delete", "namespace", other, "--wait=false")


async def test_operators_may_change_nothing_on_their_tenant_rolebinding_but_their_own_holds(
    admin: Kubectl, control_plane: Cluster, tmp_path: Path
) -> None:
    """A holder holds the RoleBinding that lets its operator read its Secrets (namespace deletion removes
    both at once); the `patch` that takes is narrowed by deploy/base's capfleet-grant-holds to capfleet's
    finalizers: no subject added, which would hand the operator's Secret rights to another account."""
    operator = "netbox-device"
    kubeconfig = service_account_kubeconfig(control_plane, operator, tmp_path / "nd.kubeconfig")
    namespace = f"grants-{secrets.token_hex(3)}"
    admin("create", "namespace", namespace)
    opt_in(admin, namespace)
    grant = f"capfleet-{operator}-secrets"
    hold = f"{namespace}.netboxdevice.holds.capfleet.dev/m0"

    def stored() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(admin("get", "rolebinding", grant, "-n", namespace, "-o", "json"))
        return found

    try:
        async with Kube.connect(f"capfleet-{operator}", str(kubeconfig)) as as_operator:

            async def patch(change: dict[str, Any]) -> object:
                return await as_operator.patch(
                    resources.ROLEBINDINGS, grant, change, namespace, strategic=True
                )

            stranger = {"kind": "ServiceAccount", "name": "default", "namespace": namespace}
            subjects = {"subjects": [*stored()["subjects"], stranger]}
            deadline = time.monotonic() + 30
            while True:  # a new policy takes effect once the API server's informer has it
                try:
                    await patch(subjects)
                except Invalid as refused:
                    refusal = str(refused)
                    break
                assert time.monotonic() < deadline, "the admission policy never refused a new subject"
                opt_in(admin, namespace)  # the subjects back
                await asyncio.sleep(0.5)
            assert "may not change a RoleBinding's subjects" in refusal
            with pytest.raises(Invalid, match="only their own finalizers"):
                await patch({"metadata": {"finalizers": ["example.com/keep"]}})
            await patch({"metadata": {"finalizers": [hold]}})
            assert stored()["metadata"]["finalizers"] == [hold]
            assert [s["name"] for s in stored()["subjects"]] == [f"capfleet-{operator}-manager"]
            await patch({"metadata": {"$deleteFromPrimitiveList/finalizers": [hold]}})
            assert not stored()["metadata"].get("finalizers")
    finally:
        admin("delete", "namespace", namespace, "--wait=false")


async def test_baremetal_provision_may_change_only_the_leader_label_of_a_pod(
    admin: Kubectl, control_plane: Cluster, tmp_path: Path
) -> None:
    """--leader-label needs `patch` on pods in capfleet-system; deploy/base's admission policy narrows it
    to the capfleet.dev/leader label (and, with the pod-bound token a pod has, to the replica's own pod)."""
    kubeconfig = service_account_kubeconfig(control_plane, "baremetal-provision", tmp_path / "bp.kubeconfig")
    pod = f"leader-label-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "labels": {"app.kubernetes.io/component": "manager"}},
        "spec": {"containers": [{"name": "manager", "image": "capfleet/baremetal-provision:latest"}]},
    }
    admin("create", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(body))

    def labels() -> dict[str, str]:
        found = json.loads(admin("get", "pod", pod, "-n", NAMESPACE, "-o", "json"))
        return dict(found["metadata"]["labels"])

    try:
        async with Kube.connect("capfleet-baremetal-provision", str(kubeconfig)) as as_operator:

            async def patch(change: dict[str, Any]) -> object:
                return await as_operator.patch(resources.PODS, pod, {"metadata": change}, NAMESPACE)

            other = {"labels": {"app.kubernetes.io/component": "other"}}
            deadline = time.monotonic() + 30
            while True:  # a new policy takes effect once the API server's informer has it
                try:
                    await patch(other)
                except Invalid:
                    break
                assert time.monotonic() < deadline, "the admission policy never refused a label change"
                admin(
                    "label", "pod", pod, "-n", NAMESPACE, "--overwrite", "app.kubernetes.io/component=manager"
                )
                await asyncio.sleep(0.5)
            for change in (
                other,
                {"annotations": {"x": "y"}},
                {"labels": {LEADER_LABEL: "true", "team": "x"}},
            ):
                with pytest.raises(Invalid, match=r"only the capfleet\.dev/leader label"):
                    await patch(change)
            await patch({"labels": {LEADER_LABEL: "true"}})
            assert labels() == {"app.kubernetes.io/component": "manager", LEADER_LABEL: "true"}
            await patch({"labels": {LEADER_LABEL: None}})
            assert labels() == {"app.kubernetes.io/component": "manager"}
    finally:
        admin("delete", "pod", pod, "-n", NAMESPACE, "--wait=false")
