"""Operators run with exactly their kustomize base's RBAC: "least privilege" proven, not guessed.

`apply_operator_rbac` applies the ServiceAccount, ClusterRole and ClusterRoleBinding that
deploy/overlays/<operator> renders, the admission policies of deploy/base that bound what the operators may
do, and in each namespace the operator is to read Secrets in the operator's RoleBinding of deploy/tenant, as
a user opts a namespace in (nothing else, nothing added by the harness); `service_account_kubeconfig`
gets a token for that ServiceAccount from the TokenRequest API (`kubectl create token`, i.e.
POST .../serviceaccounts/<name>/token) and writes a kubeconfig with it, TLS verified with the cluster's CA.
The `run_operator_as` fixture starts an operator with that kubeconfig, so a missing permission makes the
operator fail its scenario and an excessive one is caught by the SubjectAccessReview checks in
e2e/tests/test_deploy_rbac.py (`allowed`). `forbidden_requests` reads the audit log for any 403 the
operator got.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from capfleet_e2e.controlplane import Cluster, ControlPlane
from capfleet_e2e.kubebin import Kubectl, artifacts_dir, repo_root
from capfleet_e2e.kubeconfig import write_kubeconfig
from capfleet_e2e.kustomize import build, documents
from capfleet_e2e.operators import OperatorProcess

NAMESPACE = "capfleet-system"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
FIELD_MANAGER = "capfleet-rbac-tests"

RunOperatorAs = Callable[..., OperatorProcess]


def starter(
    run_operator_as: RunOperatorAs, namespace: str
) -> Callable[[str, dict[str, str]], OperatorProcess]:
    """`start_operator(module, env)` for the sites: each operator as its own ServiceAccount (named after its
    module), serving `namespace`."""
    return lambda module, env: run_operator_as(
        module, module.replace("_", "-"), namespaces=[namespace], env=env
    )


def service_account_name(operator: str) -> str:
    return f"capfleet-{operator}-manager"


def service_account_user(operator: str) -> str:
    """The username the apiserver gives the operator's ServiceAccount tokens."""
    return f"system:serviceaccount:{NAMESPACE}:{service_account_name(operator)}"


def operator_rbac(operator: str) -> list[dict[str, Any]]:
    """The RBAC objects of deploy/overlays/<operator>, as kustomize renders them."""
    rendered = documents(build(repo_root() / "deploy" / "overlays" / operator))
    return [o for o in rendered if o["kind"] in RBAC_KINDS]


def fleet_policies() -> list[dict[str, Any]]:
    """The admission policies of deploy/base, as kustomize renders them."""
    rendered = documents(build(repo_root() / "deploy" / "base"))
    return [o for o in rendered if o["kind"] in POLICY_KINDS]


def tenant_rbac(operator: str, namespace: str) -> list[dict[str, Any]]:
    """The operator's RoleBindings of deploy/tenant, placed in `namespace` (`kubectl apply -k deploy/tenant
    -n <namespace>` applies them for every operator at once)."""
    rendered = documents(build(repo_root() / "deploy" / "tenant"))
    name = service_account_name(operator)
    return [
        {**o, "metadata": {**o["metadata"], "namespace": namespace}}
        for o in rendered
        if any(s["name"] == name for s in o["subjects"])
    ]


def opt_in(kubectl: Kubectl, namespace: str) -> None:
    """What a user does for each namespace that holds clusters or Hypervisor SSH Secrets: `kubectl apply -k
    deploy/tenant -n <namespace>`, which lets every operator read Secrets there."""
    kubectl(
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=build(repo_root() / "deploy" / "tenant"),
    )


def apply_operator_rbac(kubectl: Kubectl, operator: str, secrets_in: Sequence[str] = ()) -> None:
    """Create capfleet-system if needed and server-side apply the operator's RBAC objects, the fleet's
    admission policies and, in each namespace of `secrets_in`, its deploy/tenant RoleBindings."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    tenants = [o for served in secrets_in for o in tenant_rbac(operator, served)]
    items = [namespace, *fleet_policies(), *operator_rbac(operator), *tenants]
    kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",  # deploy/base may have been applied by another test's field manager
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )


def service_account_kubeconfig(cluster: Cluster, operator: str, path: Path) -> Path:
    """A kubeconfig holding a fresh TokenRequest token of the operator's ServiceAccount."""
    if cluster.ca_path is None:
        raise pytest.skip.Exception("the cluster's CA is unknown; cannot write a verified kubeconfig")
    token = cluster.kubectl(
        "create", "token", service_account_name(operator), "-n", NAMESPACE, "--duration=2h"
    ).strip()
    return write_kubeconfig(path, cluster.server, cluster.ca_path, service_account_user(operator), token)


def forbidden_requests(
    cluster: Cluster, operator: str, after: int = 0, namespace: str | None = None
) -> list[str]:
    """Every request of the operator's ServiceAccount that the apiserver refused (403), from the audit log
    (from byte offset `after`: other tests of the session may have provoked refusals on purpose); with
    `namespace`, only cluster-wide requests and those in that namespace (an operator that watches every
    namespace may meet objects other tests left where its test RBAC does not reach).

    Empty on an existing cluster, which has no audit log the harness can read.
    """
    if not isinstance(cluster, ControlPlane):
        return []
    events, _ = cluster.audit_events(after)
    user = service_account_user(operator)
    return [
        f"{e['verb']} {e['requestURI']}"
        for e in events
        if e.get("user", {}).get("username") == user
        and e.get("responseStatus", {}).get("code") == 403
        and (namespace is None or e.get("objectRef", {}).get("namespace") in (None, "", namespace))
    ]


# user, verb, group, resource[/subresource][:name] (no name: any object), namespace ("" = all)
Access = tuple[str, str, str, str, str]


def allowed(kubectl: Kubectl, questions: Sequence[Access]) -> dict[Access, bool]:
    """Answer each question with a SubjectAccessReview, all in one kubectl call."""
    reviews = []
    for user, verb, group, resource, namespace in questions:
        resource, _, name = resource.partition(":")
        plural, _, subresource = resource.partition("/")
        attributes = {"verb": verb, "group": group, "resource": plural, "subresource": subresource}
        if name:
            attributes["name"] = name
        if namespace:
            attributes["namespace"] = namespace
        reviews.append(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": attributes},
            }
        )
    if not reviews:
        return {}
    items = {"apiVersion": "v1", "kind": "List", "items": reviews}
    out = kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(items))
    answers, decoder, at = [], json.JSONDecoder(), 0  # kubectl prints one JSON document per object, in order
    while out[at:].strip():
        answer, at = decoder.raw_decode(out, at + len(out[at:]) - len(out[at:].lstrip()))
        answers.append(answer)
    return {q: bool(a["status"].get("allowed")) for q, a in zip(questions, answers, strict=True)}


def operator_as_service_account(
    cluster: Cluster,
    module: str,
    operator: str,
    workdir: Path,
    log_dir: Path,
    *,
    namespaces: Sequence[str] = (),
    secrets_in: Sequence[str] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    verbose: bool = True,
) -> OperatorProcess:
    """An operator (not yet started) that runs as its own ServiceAccount, bound to its base's RBAC only, in
    that ServiceAccount's namespace (POD_NAMESPACE, where it keeps what is its own), as in a pod; it may
    read Secrets in `secrets_in` (by default the namespaces it serves), as deploy/tenant lets it."""
    served = namespaces if secrets_in is None else secrets_in
    apply_operator_rbac(cluster.kubectl, operator, served)
    kubeconfig = service_account_kubeconfig(cluster, operator, workdir / f"{operator}.kubeconfig")
    return OperatorProcess(
        module,
        str(kubeconfig),
        log_dir,
        namespaces=namespaces,
        extra_args=extra_args,
        env={"POD_NAMESPACE": NAMESPACE, **(env or {})},
        verbose=verbose,
    )


@pytest.fixture
def run_operator_as(control_plane: Cluster, tmp_path: Path) -> Iterator[RunOperatorAs]:
    """Start an operator (`python -m <module>`) as its own ServiceAccount, bound to its base's RBAC only.

    `run_operator_as("ipam_address", "ipam-address", namespaces=[ns])`; stopped after the test. An
    operator that serves every namespace names those it may read Secrets in: `secrets_in=[ns]`.
    """
    started: list[OperatorProcess] = []
    log_dir = artifacts_dir() / "operators"
    log_dir.mkdir(parents=True, exist_ok=True)

    def run(
        module: str,
        operator: str,
        *,
        namespaces: Sequence[str] = (),
        secrets_in: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> OperatorProcess:
        process = operator_as_service_account(
            control_plane,
            module,
            operator,
            tmp_path,
            log_dir,
            namespaces=namespaces,
            secrets_in=secrets_in,
            extra_args=extra_args,
            env=env,
        )
        started.append(process)
        return process.start()

    yield run
    for process in started:
        process.stop()
