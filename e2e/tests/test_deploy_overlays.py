"""deploy/ builds with the real kustomize, and every operator's config/ is a complete, hardened base.

These need no cluster: they check what `kustomize build` renders, the shape issue 8 asks of each base
(two replicas under leader election, liveness, resources, read-only root filesystem, dropped capabilities,
non-root), and that each ClusterRoleBinding and RoleBinding really binds the operator's own ServiceAccount.
test_deploy_apply.py sends the same renderings to the control plane.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baremetal_provision.front import FrontSettings  # type: ignore[import-untyped]
from baremetal_provision.settings import BaremetalSettings  # type: ignore[import-untyped]
from capfleet.runtime import VERSION
from capfleet_e2e.kubebin import repo_root
from capfleet_e2e.kustomize import build, copy_deploy_tree, documents

OPERATORS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision", "capi-machine-glue")
NAMESPACE = "capfleet-system"


def rendered(path: str) -> list[dict[str, Any]]:
    return documents(build(repo_root() / path))


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("operator", OPERATORS)
def test_operator_overlay_is_a_complete_hardened_base(operator: str) -> None:
    objects = rendered(f"deploy/overlays/{operator}")
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == sorted(
        {
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        }
    )
    deployment = only(objects, "Deployment")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    spec = deployment["spec"]
    assert (spec["replicas"], spec["strategy"]["type"]) == (2, "RollingUpdate")
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container, *others = pod["containers"]
    assert container["name"] == "manager"  # clusterctl looks for it
    assert [c["name"] for c in others] == (["boot"] if operator == "baremetal-provision" else [])
    assert container["image"] == f"capfleet/{operator}:latest"
    assert "--standalone" not in container.get("args", [])
    assert "--leader-elect" in container["args"]
    pod_namespace = {e["name"]: e.get("valueFrom") for e in container["env"]}["POD_NAMESPACE"]
    assert pod_namespace == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    probe = container["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (probe["path"], ports[probe["port"]]) == ("/healthz", 9440)
    # Metrics only over HTTPS with token review; the plain endpoint keeps its loopback default.
    assert "--metrics-secure-address=0.0.0.0:8443" in container["args"]
    assert not any(a.startswith("--metrics-address") for a in container["args"])
    assert ports["metrics"] == 8443
    assert only([o for o in objects if o["metadata"]["name"].endswith("-metrics")], "Service")["spec"][
        "ports"
    ] == [{"name": "metrics", "port": 8443, "targetPort": "metrics"}]
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]

    account = only(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    subjects = [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}]
    # The manager ClusterRole, and (for operators that read credentials) Secrets in one of their own, which
    # only deploy/tenant (per namespace) or deploy/components/cluster-wide-secrets binds.
    cluster_roles = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole")
    own = [f"capfleet-{operator}-manager"] + (
        [] if operator == "capi-machine-glue" else [f"capfleet-{operator}-secrets"]
    )
    assert cluster_roles == sorted(own)
    bindings = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert [b["subjects"] for b in bindings] == [subjects]
    assert [b["roleRef"]["name"] for b in bindings] == [f"capfleet-{operator}-manager"]
    secret_roles = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ClusterRole" and any("secrets" in rule["resources"] for rule in o["rules"])
    ]
    assert secret_roles == [name for name in own if name.endswith("-secrets")], (
        "Secrets only in their own role"
    )
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    role_bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert {r["metadata"]["namespace"] for r in roles.values()} == {NAMESPACE}
    assert [b["subjects"] for b in role_bindings] == [subjects] * len(roles)
    assert sorted(b["roleRef"]["name"] for b in role_bindings) == sorted(roles)
    # Leases only, in capfleet-system only; which of them is deploy/base's policy capfleet-own-leases
    # (RBAC cannot name a shard's Lease by prefix), tested in test_deploy_rbac.py.
    role = roles.pop(f"capfleet-{operator}-leader-election")
    leases = [r for r in role["rules"] if "leases" in r["resources"]]
    assert leases == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "patch"]}
    ]
    assert not any(r.get("resourceNames") for r in role["rules"])
    # baremetal-provision's token key: read by name, created once (deploy/base's capfleet-own-secrets
    # names what it may create).
    key = f"capfleet-{operator}-token-key"
    assert list(roles) == ([key] if operator == "baremetal-provision" else [])
    if roles:
        assert roles[key]["rules"] == [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [key], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        ]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert crds, "each base carries its own CRDs"


def test_the_boot_front_faces_the_network_without_any_credential() -> None:
    """baremetal-provision's pod mounts no token by default; the manager mounts its own, and the boot front,
    the one container the provisioning network talks to, gets no token, no Secret, no kubeconfig and no
    volume but the manager's socket, and owns the boot port the Service targets."""
    objects = rendered("deploy/overlays/baremetal-provision")
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    manager, front = pod["containers"]
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    mounts = {m["mountPath"]: m["name"] for m in manager["volumeMounts"]}
    [api_access] = [v for v in pod["volumes"] if v["name"] == mounts[token_path]]
    assert {"serviceAccountToken"} <= {k for source in api_access["projected"]["sources"] for k in source}
    assert front["command"] == ["python", "-m", "baremetal_provision.front"]
    assert front["image"] == manager["image"]
    env = {e["name"]: e for e in front["env"]}
    assert set(env) == {"CAPFLEET_BOOT_LISTEN", "CAPFLEET_BOOT_UPSTREAM"}
    assert all("valueFrom" not in e for e in env.values())
    assert "envFrom" not in front
    [socket_mount] = front["volumeMounts"]
    assert socket_mount["mountPath"] != token_path
    [socket_volume] = [v for v in pod["volumes"] if v["name"] == socket_mount["name"]]
    assert set(socket_volume) == {"name", "emptyDir"}
    manager_env = {e["name"]: e.get("value") for e in manager["env"]}
    assert manager_env["CAPFLEET_BOOT_SOCKET"] == env["CAPFLEET_BOOT_UPSTREAM"]["value"]
    assert manager_env["CAPFLEET_BOOT_SOCKET"].startswith(socket_mount["mountPath"] + "/")
    assert "CAPFLEET_BOOT_LISTEN" not in manager_env
    assert {p["name"] for p in manager["ports"]} == {"metrics", "health"}
    assert [p["name"] for p in front["ports"]] == ["boot"]
    [boot] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-boot")]
    assert boot["spec"]["ports"][0]["targetPort"] == "boot"
    assert front["securityContext"]["readOnlyRootFilesystem"] is True
    assert front["resources"]["limits"]["memory"]


def test_all_in_one_is_the_base_plus_every_operator_once() -> None:
    objects = rendered("deploy/overlays/all-in-one")
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"] == [NAMESPACE]
    deployments = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Deployment")
    assert deployments == sorted(f"capfleet-{o}-manager" for o in OPERATORS)
    images = {
        c["image"]
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert len(images) == len(OPERATORS), "each operator has its own image name"
    crd_names = [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert len(crd_names) == len(set(crd_names))
    reader = only([o for o in objects if o["metadata"]["name"] == "capfleet-metrics-reader"], "ClusterRole")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


READERS = ("ipam-address", "netbox-device", "libvirt-vm", "baremetal-provision")


def secrets_bindings(objects: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(kind, roleRef kind, roleRef name, subject) of every binding of a capfleet secrets ClusterRole."""
    return sorted(
        (o["kind"], o["roleRef"]["kind"], o["roleRef"]["name"], o["subjects"][0]["name"])
        for o in objects
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and o["roleRef"]["name"].endswith("-secrets")
    )


def test_by_default_secrets_are_bound_only_where_the_tenant_kustomization_is_applied() -> None:
    objects = rendered("deploy/overlays/all-in-one")
    bound = {o["roleRef"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    assert bound == {f"capfleet-{operator}-manager" for operator in OPERATORS}
    assert secrets_bindings(objects) == []
    roles = {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"}
    assert {f"capfleet-{operator}-secrets" for operator in READERS} <= roles
    tenant = rendered("deploy/tenant")
    assert {o["kind"] for o in tenant} == {"RoleBinding"}
    assert all("namespace" not in o["metadata"] for o in tenant), (
        "the namespace is the tenant's, given at apply"
    )
    assert secrets_bindings(tenant) == sorted(
        ("RoleBinding", "ClusterRole", f"capfleet-{operator}-secrets", f"capfleet-{operator}-manager")
        for operator in READERS
    )
    assert {o["subjects"][0]["namespace"] for o in tenant} == {NAMESPACE}


def test_the_cluster_wide_overlay_binds_each_secrets_role_cluster_wide_and_nothing_else() -> None:
    default, wide = rendered("deploy/overlays/all-in-one"), rendered("deploy/overlays/cluster-wide")
    added = [o for o in wide if o not in default]
    assert secrets_bindings(added) == sorted(
        ("ClusterRoleBinding", "ClusterRole", f"capfleet-{operator}-secrets", f"capfleet-{operator}-manager")
        for operator in READERS
    )
    assert len(added) == len(READERS)
    assert all(o in wide for o in default)
    assert {o["subjects"][0]["namespace"] for o in added} == {NAMESPACE}
    # clusterctl deletes and moves a provider's objects by its label: the opt-in bindings carry it too.
    labels = {o["metadata"]["labels"]["cluster.x-k8s.io/provider"] for o in added}
    assert labels == {"infrastructure-capfleet"}


def test_components_add_netbox_secret_verbose_logging_and_service_monitors(tmp_path: Path) -> None:
    overlay = copy_deploy_tree(tmp_path) / "deploy" / "overlays" / "with-components"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../all-in-one]\n"
        "components: [../../components/netbox-connection, ../../components/debug-logging,"
        " ../../components/servicemonitor/all]\n"
    )
    objects = documents(build(overlay))
    secret = only(objects, "Secret")
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("netbox-connection", NAMESPACE)
    assert set(secret["data"]) == {"url", "token"}
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        assert "--verbose" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    monitors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceMonitor"}
    assert sorted(monitors) == sorted(f"capfleet-{o}" for o in OPERATORS)
    services = {o["metadata"]["labels"]["app.kubernetes.io/name"] for o in objects if o["kind"] == "Service"}
    for monitor in monitors.values():
        assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] in services
        endpoint = monitor["spec"]["endpoints"][0]
        assert (endpoint["port"], endpoint["scheme"]) == ("metrics", "https")
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_boot_tls_gives_the_front_its_certificate_and_the_manager_only_the_ca(tmp_path: Path) -> None:
    overlay = copy_deploy_tree(tmp_path) / "deploy" / "overlays" / "with-boot-tls"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../baremetal-provision]\ncomponents: [../../components/boot-tls]\n"
    )
    objects = documents(build(overlay))
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    manager, front = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}

    def mounted(container: dict[str, Any]) -> dict[str, list[str]]:
        """Secret name → the keys a container sees of it."""
        found = {}
        for mount in container["volumeMounts"]:
            secret = volumes[mount["name"]].get("secret")
            if secret:
                found[secret["secretName"]] = [item["key"] for item in secret["items"]]
        return found

    certificates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Certificate"}
    leaf = certificates["capfleet-baremetal-provision-boot-tls"]["spec"]
    assert mounted(manager) == {leaf["secretName"]: ["ca.crt"]}
    assert mounted(front) == {leaf["secretName"]: ["tls.crt", "tls.key"]}
    settings = BaremetalSettings.load({e["name"]: e.get("value", "") for e in manager["env"]})
    front_settings = FrontSettings.load({e["name"]: e.get("value", "") for e in front["env"]})
    assert settings.boot_socket == front_settings.boot_upstream
    assert (settings.boot_tls_url or "").startswith("https://")
    assert front_settings.boot_tls_listen == "0.0.0.0:8443"
    assert {p["name"] for p in front["ports"]} == {"boot", "boot-tls"}
    [boot] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-boot")]
    assert {"name": "boot-tls", "port": 443, "targetPort": "boot-tls"} in boot["spec"]["ports"]
    issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Issuer"}
    ca_issuer = issuers[leaf["issuerRef"]["name"]]["ca"]["secretName"]
    ca = [c["spec"] for c in certificates.values() if c["spec"]["secretName"] == ca_issuer]
    assert [c["isCA"] for c in ca] == [True]


def test_clusterctl_metadata_declares_the_v1beta2_contract_for_this_release() -> None:
    metadata = documents((repo_root() / "deploy" / "clusterctl" / "metadata.yaml").read_text())[0]
    assert (metadata["apiVersion"], metadata["kind"]) == ("clusterctl.cluster.x-k8s.io/v1alpha3", "Metadata")
    major, minor, _ = VERSION.split(".")
    series = {(s["major"], s["minor"]): s["contract"] for s in metadata["releaseSeries"]}
    assert series[(int(major), int(minor))] == "v1beta2"


def test_the_console_overlay_acts_only_by_impersonation_and_offers_roles_for_its_users() -> None:
    objects = rendered("deploy/overlays/console")
    deployment = only(objects, "Deployment")
    assert deployment["metadata"]["name"] == "capfleet-console-manager"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "capfleet-console-manager"
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["image"] == "capfleet/console:latest"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    roles = {o["metadata"]["name"]: o["rules"] for o in objects if o["kind"] == "ClusterRole"}
    assert set(roles) == {
        "capfleet-console-manager",
        "capfleet-console-user",
        "capfleet-console-hypervisor-viewer",
    }
    own = {
        (g, r, v)
        for rule in roles["capfleet-console-manager"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert own == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        *{("", kind, "impersonate") for kind in ("users", "groups", "serviceaccounts")},
    }
    [binding] = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "capfleet-console-manager"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "capfleet-console-manager", "namespace": NAMESPACE}
    ]


def test_boot_exposed_keeps_the_servers_source_addresses(tmp_path: Path) -> None:
    """The boot server binds an attempt to the address that fetched its script: exposed outside the cluster,
    the boot Service must not source-NAT (externalTrafficPolicy Local), and it still selects the leader."""
    overlay = copy_deploy_tree(tmp_path) / "deploy" / "overlays" / "with-boot-exposed"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../baremetal-provision]\ncomponents: [../../components/boot-exposed]\n"
    )
    [boot] = [
        o
        for o in documents(build(overlay))
        if o["kind"] == "Service" and o["metadata"]["name"].endswith("-boot")
    ]
    assert (boot["spec"]["type"], boot["spec"]["externalTrafficPolicy"]) == ("LoadBalancer", "Local")
    assert boot["spec"]["selector"]["capfleet.dev/leader"] == "true"
    plain = copy_deploy_tree(tmp_path / "plain") / "deploy" / "overlays" / "baremetal-provision"
    [shipped] = [
        o
        for o in documents(build(plain))
        if o["kind"] == "Service" and o["metadata"]["name"].endswith("-boot")
    ]
    assert "externalTrafficPolicy" not in shipped["spec"]  # a ClusterIP takes none
