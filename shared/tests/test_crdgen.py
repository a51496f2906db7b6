"""The CRD generator: structural schemas, the rules they carry, their metadata, and the stale check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field

from capfleet import crdgen, schemas
from capfleet.api import kinds

REPO_CRDS = Path(__file__).resolve().parents[2] / "crds"
CRDS = {kind.kind: crdgen.crd(kind) for kind in kinds.ALL}


def openapi(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def node(kind: str, path: str) -> dict[str, Any]:
    return dict(dict(schemas.walk(openapi(kind)))[path])


def rules(kind: str, path: str) -> list[str]:
    return [r["rule"] for r in node(kind, path).get("x-kubernetes-validations", [])]


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_every_schema_is_structural(kind: kinds.Kind[Any]) -> None:
    schema = openapi(kind.kind)
    assert schemas.problems(schema) == []
    for path, part in schemas.walk(schema):
        assert part.get("type") or part.get("x-kubernetes-preserve-unknown-fields"), path
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "const"} & set(part), path
        is_property = not path.endswith(("[*]", ".*"))
        if path.startswith((".spec", ".status")) and is_property:
            assert part.get("description"), f"{path} has no description"


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_cel_rules_only_touch_bounded_strings_and_lists(kind: kinds.Kind[Any]) -> None:
    for path, part in schemas.walk(openapi(kind.kind)):
        if not part.get("x-kubernetes-validations"):
            continue
        if part["type"] == "string":
            assert "maxLength" in part, path
        if part["type"] == "array":
            assert "maxItems" in part, path
        for name, child in part.get("properties", {}).items():
            if child.get("type") == "array":
                assert "maxItems" in child, f"{path}.{name}"


@pytest.mark.parametrize(
    ("kind", "path", "fragment"),
    [
        ("HybridMachine", ".spec", "has(self.vm) != has(self.baremetal)"),
        ("HybridMachine", ".spec", "oldSelf.providerID"),
        ("HybridMachine", ".spec.network", "default"),
        ("HybridMachineTemplate", ".spec.template.spec", "has(self.vm) != has(self.baremetal)"),
        ("HybridCluster", ".spec", "oldSelf.controlPlaneEndpoint"),
        ("HybridIPPool", ".spec.addresses[*]", "isCIDR(self)"),
        ("HybridIPPool", ".spec.excludedAddresses[*]", "self.split('-')"),
        ("HybridIPPool", ".spec.gateway", "isIP(self)"),
        ("HybridIPPool", ".spec", "self.prefix <= 32"),
        ("NetboxIPPool", ".spec.prefixes[*]", "has(self.id) != has(self.cidr)"),
        ("NetboxIPPool", ".spec.ipRanges[*]", "has(self.startAddress)"),
        ("NetboxVirtualMachine", ".spec.interfaces[*].addresses[*]", "isCIDR(self)"),
        ("LibvirtVM", ".spec", "oldSelf.hypervisorName"),
        ("LibvirtVM", ".spec.interfaces[*]", "has(self.bridge)"),
        ("BaremetalInstance", ".spec", "oldSelf.providerID"),
    ],
)
def test_cel_rules_are_where_they_belong(kind: str, path: str, fragment: str) -> None:
    assert any(fragment in rule for rule in rules(kind, path)), rules(kind, path)


@pytest.mark.parametrize("kind", ["HybridClusterTemplate", "HybridMachineTemplate"])
def test_templates_carry_no_update_rules(kind: str) -> None:
    # CAPI's topology controller dry-runs changed templates; an update rule would break it.
    assert "oldSelf" not in yaml.safe_dump(openapi(kind))


def test_conditions_are_a_map_keyed_by_type_everywhere() -> None:
    # A VMQuota's status is counts only: nothing about it is a step that can fail.
    without_conditions = {kinds.VM_QUOTA.kind}
    for kind in kinds.ALL:
        if not kind.has_status:
            assert "status" not in openapi(kind.kind)["properties"]
            continue
        if kind.kind in without_conditions:
            assert "conditions" not in openapi(kind.kind)["properties"]["status"]["properties"]
            continue
        conditions = node(kind.kind, ".status.conditions")
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert conditions["maxItems"] == 32
        item = conditions["items"]
        assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
        assert set(item["required"]) == {"type", "status", "reason", "lastTransitionTime"}


def test_free_form_and_string_maps_keep_their_meaning() -> None:
    assert node("BaremetalInstance", ".spec.networkData") == {
        "type": "object",
        "description": node("BaremetalInstance", ".spec.networkData")["description"],
        "x-kubernetes-preserve-unknown-fields": True,
    }
    labels = node("LibvirtVM", ".spec.hypervisorSelector.matchLabels")
    assert labels["additionalProperties"] == {"type": "string"}
    assert node("LibvirtVM", ".spec.powerState")["enum"] == ["On", "Off"]
    assert node("LibvirtVM", ".spec.powerState")["default"] == "On"
    assert node("Hypervisor", ".spec.connection.port")["default"] == 22


@pytest.mark.parametrize("kind", kinds.ALL, ids=lambda k: k.kind)
def test_crd_metadata(kind: kinds.Kind[Any]) -> None:
    crd = CRDS[kind.kind]
    resource = kind.resource
    assert crd["metadata"]["name"] == f"{resource.plural}.{resource.group}"
    labels = crd["metadata"]["labels"]
    assert labels["clusterctl.cluster.x-k8s.io"] == ""
    assert labels["cluster.x-k8s.io/provider"] == "infrastructure-capfleet"
    assert (labels.get("cluster.x-k8s.io/v1beta2") == "v1alpha1") == kind.capi_contract
    # IP pools are not owned by a Cluster; clusterctl moves them (and their addresses) by this label.
    moved_whole = kind.kind in {"HybridIPPool", "NetboxIPPool"}
    assert ("clusterctl.cluster.x-k8s.io/move-hierarchy" in labels) == moved_whole
    names = crd["spec"]["names"]
    assert names["listKind"] == f"{resource.kind}List"
    assert names["shortNames"]
    assert "capfleet" in names["categories"]
    assert ("cluster-api" in names["categories"]) == kind.capi_contract
    assert crd["spec"]["scope"] == ("Namespaced" if resource.namespaced else "Cluster")
    version = crd["spec"]["versions"][0]
    assert (version.get("subresources") == {"status": {}}) == kind.has_status
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[-1] == "Age"
    if kind.has_status:
        assert columns[-3:-1] == ["Ready", "Reason"]


def test_hypervisors_are_cluster_scoped() -> None:
    assert CRDS["Hypervisor"]["spec"]["scope"] == "Cluster"


def test_rendering_is_deterministic_and_marked_generated() -> None:
    first, second = crdgen.render(), crdgen.render()
    assert first == second
    assert all(text.startswith(crdgen.HEADER) for text in first.values())
    assert set(first) >= {f"{op}/kustomization.yaml" for op in kinds.OPERATORS}
    kustomization = yaml.safe_load(first["ipam-address/kustomization.yaml"])
    assert kustomization["resources"] == [
        "ipam.capfleet.dev_hybridippools.yaml",
        "ipam.capfleet.dev_netboxippools.yaml",
    ]


def test_check_detects_changed_missing_and_obsolete_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert crdgen.main(["generate", str(tmp_path)]) == 0
    assert crdgen.main(["check", str(tmp_path)]) == 0
    changed = tmp_path / "libvirt-vm" / "libvirt.capfleet.dev_libvirtvms.yaml"
    changed.write_text(changed.read_text().replace("memoryMiB", "memoryMB"))
    (tmp_path / "ipam-address" / "kustomization.yaml").unlink()
    (tmp_path / "netbox-device" / "netbox.capfleet.dev_oldkinds.yaml").write_text("kind: Old\n")
    capsys.readouterr()

    assert crdgen.main(["check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for name in ("libvirtvms.yaml", "ipam-address/kustomization.yaml", "oldkinds.yaml"):
        assert name in err

    assert crdgen.main(["generate", str(tmp_path)]) == 0
    assert crdgen.stale(tmp_path) == []
    assert not (tmp_path / "netbox-device" / "netbox.capfleet.dev_oldkinds.yaml").exists()


def test_the_repository_crds_are_current() -> None:
    assert crdgen.stale(REPO_CRDS) == [], "crds/ is stale: run `make crds`"


class _Inner(BaseModel):
    """Inner."""

    value: int = Field(3, description="A value.")


class _Outer(BaseModel):
    """Outer."""

    inner: _Inner | None = Field(None, description="Optional inner.")
    mode: str = Field("x", description="A constant.", json_schema_extra={"const": "x"})


def test_structural_inlines_references_and_unwraps_optionals() -> None:
    converted = schemas.structural(_Outer.model_json_schema(by_alias=True))
    inner = converted["properties"]["inner"]
    assert inner == {
        "type": "object",
        "description": "Optional inner.",
        "properties": {"value": {"type": "integer", "default": 3, "description": "A value."}},
    }
    assert converted["properties"]["mode"]["enum"] == ["x"]


def test_structural_refuses_what_kubernetes_cannot_express() -> None:
    class Union(BaseModel):
        either: int | str = Field(description="Two types.")

    class Exclusive(BaseModel):
        positive: int = Field(gt=0, description="Exclusive bound.")

    with pytest.raises(schemas.SchemaError, match="union"):
        schemas.structural(Union.model_json_schema())
    with pytest.raises(schemas.SchemaError, match="exclusiveMinimum"):
        schemas.structural(Exclusive.model_json_schema())


def test_problems_explain_what_is_not_structural() -> None:
    found = schemas.problems(
        {
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "string"}]},
                "b": {"type": "object"},
                "c": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
            },
        }
    )
    assert any(".a: forbidden key anyOf" in p for p in found)
    assert any(".a: no type" in p for p in found)
    assert any(".b: an object with no properties" in p for p in found)
    assert any(".c: list-map key name must be required" in p for p in found)
