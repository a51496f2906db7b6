"""Pure parts of a VM: deterministic names, domain XML with its owner element, and the NoCloud seed ISO.

The seed documents themselves are rendered by `capfleet.cloudinit` (tested in shared/tests).
"""

from __future__ import annotations

import dataclasses
import io
import xml.etree.ElementTree as ET
from typing import Any

import pycdlib
import yaml

from capfleet import cloudinit
from capfleet.api.libvirt import VMInterface
from libvirt_vm import domains, hypervisors, names, seeding, vms


def test_names_are_deterministic_unambiguous_and_bounded() -> None:
    assert names.domain_name("ns", "vm") == "ns_vm"
    assert names.domain_uuid("ns", "vm") == names.domain_uuid("ns", "vm") != names.domain_uuid("ns", "vm2")
    assert names.disk_volume("ns_vm", "root") == "ns_vm_root.qcow2"
    assert names.seed_volume("ns_vm") == "ns_vm_cidata.iso"
    assert not names.disk_volume("ns_vm-b", "root").startswith(names.volume_prefix("ns_vm"))
    long = names.domain_name("n" * 63, "v" * 253)
    assert len(long) == names.MAX_DOMAIN_NAME
    assert long != names.domain_name("n" * 63, "v" * 252 + "w")
    assert names.provider_id("hv", "ns_vm") == "capfleet://vm/hv/ns_vm"


def nic(**fields: object) -> VMInterface:
    return VMInterface.model_validate({"macAddress": "52:54:00:00:00:01", **fields})


def plan() -> domains.DomainPlan:
    return domains.DomainPlan(
        name="ns_vm",
        uuid=names.domain_uuid("ns", "vm"),
        owner=domains.Owner("ns", "vm"),
        vcpus=2,
        memory_mib=1024,
        disks=(domains.DiskDevice("/pool/ns_vm_root.qcow2"), domains.DiskDevice("/pool/ns_vm_data.qcow2")),
        seed_path="/pool/ns_vm_cidata.iso",
        interfaces=(nic(userMode=True), nic(bridge="br0", macAddress="52:54:00:00:00:02")),
    )


def test_domain_xml_names_its_owner_and_devices() -> None:
    xml = domains.domain_xml(plan())
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu"
    assert root.find("cpu").get("mode") == "maximum"  # type: ignore[union-attr]
    kvm = ET.fromstring(domains.domain_xml(dataclasses.replace(plan(), virt_type="kvm")))
    assert kvm.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    assert root.findtext("name") == "ns_vm"
    assert root.findtext("uuid") == names.domain_uuid("ns", "vm")
    assert domains.parse_owner(xml) == domains.Owner("ns", "vm")
    disks = root.findall("devices/disk")
    assert [d.find("target").get("dev") for d in disks] == ["vda", "vdb", "hdc"]  # type: ignore[union-attr]
    assert [i.get("type") for i in root.findall("devices/interface")] == ["user", "bridge"]
    console_log = root.find("devices/serial/log")
    assert console_log is not None
    assert console_log.get("file") == "/var/log/libvirt/qemu/ns_vm-console.log"
    assert domains.parse_owner("<domain><name>x</name></domain>") is None
    assert domains.parse_owner("not xml") is None


def test_the_owner_names_the_management_cluster_and_a_domain_without_one_is_another_owner() -> None:
    ours = domains.Owner("ns", "vm", "capfleet-0123456789ab")
    xml = domains.domain_xml(dataclasses.replace(plan(), owner=ours))
    assert domains.parse_owner(xml) == ours
    theirs = domains.parse_owner(
        domains.domain_xml(dataclasses.replace(plan(), owner=domains.Owner("ns", "vm", "b")))
    )
    legacy = domains.parse_owner(domains.domain_xml(plan()))
    assert legacy == domains.Owner("ns", "vm", None)
    assert ours not in (theirs, legacy), "same namespace and name, another management cluster: not ours"


def test_the_domain_uuid_is_the_guests_instance_id_and_never_changes() -> None:
    # Pinned: a changed UUID would make libvirt see a second domain and cloud-init a new instance.
    assert names.domain_uuid("ns", "vm") == "4dcd16b8-7a49-5b35-8c52-19300ed2155d"
    assert names.domain_uuid("ns", "vm") == cloudinit.instance_id("ns", "vm")


def test_vm_nics_are_named_after_their_interface_or_by_index() -> None:
    static = nic(name="prov", userMode=True, addresses=["10.0.0.5/24"], gateway="10.0.0.1")
    unnamed = nic(userMode=True, macAddress="52:54:00:00:00:02")
    config = yaml.safe_load(cloudinit.network_config([static, unnamed]))
    assert config["ethernets"]["prov"]["set-name"] == "prov"
    assert config["ethernets"]["prov"]["match"] == {"macaddress": "52:54:00:00:00:01"}
    assert config["ethernets"]["eth1"] == {
        "match": {"macaddress": "52:54:00:00:00:02"},
        "set-name": "eth1",
        "dhcp4": True,
    }


def test_cidata_iso_holds_the_files_under_their_names() -> None:
    files = seeding.seed_files(b"#cloud-config\n", b"instance-id: x\n", b"version: 2\n")
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(seeding.cidata_iso(files)))
    try:
        assert iso.pvd.volume_identifier.strip() == b"cidata"
        for name, data in files.items():
            out = io.BytesIO()
            iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
            assert out.getvalue() == data
    finally:
        iso.close()


def test_only_a_vm_that_may_have_left_something_on_its_host_needs_the_host_to_be_deleted() -> None:
    def vm(annotations: dict[str, str], *done: str) -> dict[str, Any]:
        conditions = [{"type": t, "status": "True"} for t in done] + [{"type": "Running", "status": "False"}]
        return {"metadata": {"annotations": annotations}, "status": {"conditions": conditions}}

    assert not vms.left_something(vm({}))
    assert not vms.left_something(vm({}, "Scheduled"))  # placed, nothing written there yet
    assert vms.left_something(vm({vms.TOUCHED: "true"}))
    assert vms.left_something(vm({}, "Scheduled", "DisksReady"))  # a VM from before the mark


def test_a_hypervisor_is_in_use_by_the_vms_placed_on_it() -> None:
    def vm(namespace: str, name: str, hypervisor: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "vcpus": 1,
            "memoryMiB": 64,
            "disks": [{"name": "root", "sizeGiB": 1}],
            "cloudInit": {"userDataSecretRef": {"name": "bootstrap"}},
        }
        if hypervisor:
            spec["hypervisorName"] = hypervisor
        meta = {"namespace": namespace, "name": name}
        return {
            "apiVersion": "libvirt.capfleet.dev/v1alpha1",
            "kind": "LibvirtVM",
            "metadata": meta,
            "spec": spec,
        }

    bodies = [vm("b", "x", "hv1"), vm("a", "y", "hv1"), vm("a", "z", "hv2"), vm("a", "w", None)]
    assert hypervisors.users_of("hv1", bodies) == ["a/y", "b/x"]
    assert hypervisors.users_of("hv3", bodies) == []


def test_a_seed_is_recognised_by_its_files_and_a_cut_off_upload_is_not() -> None:
    files = seeding.seed_files(b"#cloud-config\n" + b"x" * 5000, b"instance-id: x\n", b"version: 2\n")
    iso = seeding.cidata_iso(files)
    assert seeding.files_of(iso) == files
    assert seeding.files_of(seeding.cidata_iso(files)) == seeding.files_of(iso)  # bytes differ, files not
    assert seeding.files_of(bytes(len(iso))) is None  # created, never written
    assert seeding.files_of(iso[: len(iso) // 2] + bytes(len(iso) - len(iso) // 2)) != files  # cut off
    assert seeding.files_of(iso + bytes(64 * 1024)) == files  # rewritten in place into a bigger volume
    removed = {**files, "user-data": b""}
    assert seeding.digest(files) == seeding.digest(seeding.files_of(seeding.cidata_iso(files)) or {})
    assert seeding.digest(removed) != seeding.digest(files)


def test_user_data_comes_only_from_a_secret_meant_for_vms() -> None:
    """A VM's user-data is read with libvirt-vm's rights, so only a Secret labelled for VMs or Cluster API's
    bootstrap data (owned by a bootstrap config) may give it: the cluster's CA Secret, of the same type
    but owned by the control plane, and a plain Secret are refused."""

    def secret(
        type_: str = "Opaque", labels: dict[str, str] | None = None, owner: str | None = None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "s", "namespace": "ns", "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [{"apiVersion": owner, "kind": "X", "name": "o", "uid": "u"}]
        return {"metadata": meta, "type": type_}

    bootstrap, capi = "bootstrap.cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/secret"
    assert seeding.meant_for_vms(secret(labels={"libvirt.capfleet.dev/user-data": "true"}))
    assert seeding.meant_for_vms(secret(capi, owner=bootstrap))  # CABPK's bootstrap data
    assert not seeding.meant_for_vms(secret(capi, owner="controlplane.cluster.x-k8s.io/v1beta2"))  # the CA
    assert not seeding.meant_for_vms(secret(owner=bootstrap))  # not Cluster API's type
    assert not seeding.meant_for_vms(secret(capi))
    assert not seeding.meant_for_vms(secret(labels={"libvirt.capfleet.dev/user-data": "yes"}))
    assert not seeding.meant_for_vms(secret())
