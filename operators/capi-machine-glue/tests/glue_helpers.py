"""Builders for the glue's tests: HybridMachine / HybridCluster specs and CAPI objects as dicts."""

from __future__ import annotations

from typing import Any

from capfleet.api.hybrid_clusters import HybridClusterSpec
from capfleet.api.hybrid_machines import HybridMachineSpec

OS = {"kernelURL": "http://boot.example/vmlinuz", "initrdURL": "http://boot.example/initrd"}


def vm_machine(**extra: Any) -> HybridMachineSpec:
    raw: dict[str, Any] = {
        "vm": {
            "vcpus": 2,
            "memoryMiB": 2048,
            "disks": [{"sizeGiB": 10, "image": "base.qcow2"}, {"sizeGiB": 5}],
        },
        "network": {
            "interfaces": [
                {
                    "name": "eth0",
                    "bridge": "br0",
                    "default": True,
                    "ipPoolRefs": [{"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"}],
                },
                {"name": "eth1", "network": "storage"},
            ]
        },
    }
    raw.update(extra)
    return HybridMachineSpec.model_validate(raw)


def metal_machine(**extra: Any) -> HybridMachineSpec:
    raw: dict[str, Any] = {
        "baremetal": {"deviceSelector": {"role": "worker", "tags": ["k8s"]}, "osProfile": OS},
        "network": {
            "interfaces": [
                {
                    "name": "eno1",
                    "ipPoolRefs": [{"apiGroup": "ipam.capfleet.dev", "kind": "HybridIPPool", "name": "v4"}],
                }
            ]
        },
    }
    raw.update(extra)
    return HybridMachineSpec.model_validate(raw)


def cluster(**extra: Any) -> HybridClusterSpec:
    raw: dict[str, Any] = {
        "controlPlaneEndpoint": {"host": "192.0.2.10", "port": 6443},
        "hypervisorSelector": {"matchLabels": {"rack": "r1"}},
        "nameservers": ["192.0.2.53"],
        "netbox": {"connectionSecretRef": {"name": "netbox"}, "cluster": "k8s-vms", "tenant": "team-a"},
        "baremetal": {
            "bmcCredentialsSecretRef": {"name": "bmc"},
            "bmcAddressTemplate": "redfish+https://{address}/redfish/v1/Systems/{serial}",
            "bmcAddressCIDRs": ["10.9.0.0/16"],
        },
        "failureDomains": [
            {
                "name": "fd-a",
                "controlPlane": True,
                "hypervisorSelector": {"matchLabels": {"zone": "a"}},
                "deviceSelector": {"site": "dc-a", "tags": ["fast"]},
            }
        ],
    }
    raw.update(extra)
    return HybridClusterSpec.model_validate(raw)
