"""capfleet's templates are immutable, as Cluster API's contract wants, against the real apiserver.

A HybridMachineTemplate (and a HybridClusterTemplate) is never edited in place: a change is a new template
the MachineDeployment, KubeadmControlPlane or ClusterClass is pointed at, so its machines roll. The CRDs
cannot say so (a CEL transition rule would refuse the server-side dry runs of CAPI's topology controller,
shared/tests/test_crdgen.py), so deploy/base's admission policy `capfleet-immutable-templates` does: it
refuses every update of a template's spec but a dry run, and leaves its metadata free.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from capfleet.api import kinds, samples
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.kubebin import HarnessError, Kubectl
from capfleet_e2e.serviceaccounts import fleet_policies

pytestmark = pytest.mark.integration

FIELD_MANAGER = "capfleet-template-tests"
POLICY = "capfleet-immutable-templates"
POLICY_TIMEOUT = 30.0


@dataclass(frozen=True)
class Case:
    """A template kind, the message its in-place spec update is refused with, and a change of its spec."""

    kind: kinds.Kind[Any]
    message: str
    path: tuple[str, ...]
    """Where, under spec.template.spec, the sample has a string that `changed` replaces."""
    changed: str

    @property
    def plural(self) -> str:
        return f"{self.kind.resource.plural}.{self.kind.resource.group}"

    def sample(self, name: str) -> dict[str, Any]:
        found = next(s for s in samples.valid_samples() if s["kind"] == self.kind.kind)
        return {**copy.deepcopy(found), "metadata": {"name": name}}

    def change(self, value: str) -> dict[str, Any]:
        """A merge patch setting the string at `path` to `value`."""
        patch: dict[str, Any] = {"spec": {"template": {"spec": {}}}}
        at = patch["spec"]["template"]["spec"]
        for key in self.path[:-1]:
            at = at.setdefault(key, {})
        at[self.path[-1]] = value
        return patch

    def value(self, obj: dict[str, Any]) -> object:
        at: Any = obj["spec"]["template"]["spec"]
        for key in self.path:
            at = at[key]
        return at


CASES = (
    Case(
        kinds.HYBRID_MACHINE_TEMPLATE,
        "HybridMachineTemplate spec is immutable: create a new template and point the MachineDeployment"
        " or KubeadmControlPlane at it",
        ("baremetal", "bootInterface"),
        "eno2",
    ),
    Case(
        kinds.HYBRID_CLUSTER_TEMPLATE,
        "HybridClusterTemplate spec is immutable: create a new template and point the ClusterClass at it",
        ("domain",),
        "other.example.test",
    ),
)


@pytest.fixture(scope="module")
def admin(control_plane: Cluster) -> Kubectl:
    """The session's admin kubectl, after deploy/base's admission policies have been applied."""
    items = fleet_policies()
    assert POLICY in {o["metadata"]["name"] for o in items}
    control_plane.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",  # other tests of the session apply deploy/base under their own field manager
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    return control_plane.kubectl


@pytest.fixture
def scratch(admin: Kubectl) -> Iterator[str]:
    namespace = f"templates-{secrets.token_hex(3)}"
    admin("create", "namespace", namespace)
    yield namespace
    admin("delete", "namespace", namespace, "--wait=false")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind.kind)
def test_a_templates_spec_is_immutable_but_for_dry_runs_and_its_metadata(
    admin: Kubectl, scratch: str, case: Case
) -> None:
    name = "workers-v1"
    original = case.value(case.sample(name))
    admin("create", "-n", scratch, "-f", "-", stdin=json.dumps(case.sample(name)))

    def get() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(admin("get", case.plural, name, "-n", scratch, "-o", "json"))
        return found

    def patch(change: dict[str, Any], *flags: str) -> str:
        return admin(
            "patch", case.plural, name, "-n", scratch, "--type=merge", "-p", json.dumps(change), *flags
        )

    refused = re.escape(case.message)
    # A new policy takes effect once the API server's informer has it: wait for the first refusal,
    # putting the spec back each time a change got through before.
    deadline = time.monotonic() + POLICY_TIMEOUT
    while True:
        try:
            patch(case.change(case.changed))
        except HarnessError as e:
            refusal = str(e)
            break
        assert time.monotonic() < deadline, f"{POLICY} never refused an in-place spec change"
        patch(case.change(str(original)))
        time.sleep(0.5)
    assert re.search(refused, refusal), refusal

    # Every way of writing the spec in place is refused: a patch, an update (PUT), a server-side apply.
    full = _merged(get(), case.change(case.changed))
    with pytest.raises(HarnessError, match=refused):
        admin("replace", "-f", "-", stdin=json.dumps(full))
    applied = {
        "apiVersion": case.kind.resource.api_version,
        "kind": case.kind.kind,
        "metadata": {"name": name, "namespace": scratch},
        "spec": full["spec"],
    }
    apply = ("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-")
    with pytest.raises(HarnessError, match=refused):
        admin(*apply, stdin=json.dumps(applied))
    assert case.value(get()) == original

    # Dry runs pass, as CAPI's topology controller sends them (a server-side apply) and as kubectl does,
    # and change nothing.
    answer = json.loads(patch(case.change(case.changed), "--dry-run=server", "-o", "json"))
    assert case.value(answer) == case.changed
    answer = json.loads(admin(*apply, "--dry-run=server", "-o", "json", stdin=json.dumps(applied)))
    assert case.value(answer) == case.changed
    assert case.value(get()) == original

    # Metadata stays free: labels, annotations, finalizers, owners.
    admin("label", case.plural, name, "-n", scratch, "cluster.x-k8s.io/cluster-name=hybrid")
    admin("annotate", case.plural, name, "-n", scratch, "capfleet.dev/note=superseded by workers-v2")
    admin("create", "configmap", "owner", "-n", scratch)
    owner = json.loads(admin("get", "configmap", "owner", "-n", scratch, "-o", "json"))["metadata"]
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["uid"]}
    patch({"metadata": {"finalizers": ["example.com/keep"], "ownerReferences": [reference]}})
    stored = get()
    assert stored["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "hybrid"}
    assert stored["metadata"]["annotations"]["capfleet.dev/note"] == "superseded by workers-v2"
    assert stored["metadata"]["finalizers"] == ["example.com/keep"]
    assert [r["uid"] for r in stored["metadata"]["ownerReferences"]] == [owner["uid"]]
    patch({"metadata": {"finalizers": None, "ownerReferences": None}})
    assert not get()["metadata"].get("finalizers")
    assert case.value(get()) == original

    # The way the contract wants: a new template with the change, created while the policy is in force.
    rolled = _merged(case.sample("workers-v2"), case.change(case.changed))
    admin("create", "-n", scratch, "-f", "-", stdin=json.dumps(rolled))
    created = json.loads(admin("get", case.plural, "workers-v2", "-n", scratch, "-o", "json"))
    assert case.value(created) == case.changed


def _merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`base` with the JSON merge patch `patch` applied (RFC 7386; no deletions needed here)."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
