"""The built node image really boots as a Cluster API machine would: QEMU (TCG), a NoCloud seed, cloud-init.

The VM gets what the libvirt-vm operator gives one (machine `pc` with SeaBIOS, the disk on virtio, a `cidata`
ISO on the IDE CD-ROM hdc, a virtio NIC, the console on ttyS0) and a seed made by the fleet's renderer
(`capfleet.cloudinit`) and libvirt-vm's ISO builder: network-config v2 with a static address matched by MAC,
and a `## template: jinja` cloud-config as CAPI's kubeadm bootstrap writes them. Its runcmd prints what a
kubeadm node needs on the serial console: containerd up and the preloaded images imported, kubelet and
kubeadm, br_netfilter and ip_forward, the hostname and the static address. The disk is a qcow2 overlay (bigger
than the image, so growpart has work to do); the image is never modified. QEMU's user-mode network is
`restrict=on`: the guest reaches nothing. The image is the session's `node_image` (built before the first test
if missing).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from capfleet.api.libvirt import VMInterface

# The operator's own seed functions (its package has no py.typed: e2e does not type-check operators).
from capfleet.cloudinit import meta_data, network_config
from capfleet_e2e.kubebin import artifacts_dir
from capfleet_images.nodeimage.build import NodeImage
from capfleet_images.nodeimage.versions import NodeImageVersions
from libvirt_vm.seeding import cidata_iso, seed_files  # type: ignore[import-untyped]

pytestmark = pytest.mark.integration

BOOT_TIMEOUT = 1200.0
GROWTH = 2 * 2**30  # the overlay is this much bigger than the image
MAC = "52:54:00:c0:ff:ee"
ADDRESS = "10.0.2.50/24"  # QEMU's user-mode DHCP would hand out 10.0.2.15: this one can only be static
GATEWAY, NAMESERVER = "10.0.2.2", "10.0.2.3"
HOSTNAME = "node-boot-test"
PROVIDER_ID = "libvirt://fd-1/default/node-boot-test"
MARKER = "=== capfleet-nodeimage"
FINISHED = re.compile(r"Cloud-init v\. \S+ finished at .* Up ([0-9.]+) seconds")

REPORT = f"""\
#!/bin/sh
m() {{ echo "{MARKER} $1: $2"; }}
m provider-id "$(cat /run/capfleet-test/provider-id)"
m containerd "$(systemctl is-active containerd)"
m preload "$(systemctl is-active capfleet-preload-images)"
start=$(systemctl show -P ExecMainStartTimestampMonotonic capfleet-preload-images)
end=$(systemctl show -P ExecMainExitTimestampMonotonic capfleet-preload-images)
m preload-seconds "$(( (end - start) / 1000000 ))"
m images "$(ctr -n k8s.io images ls -q | sort | tr '\\n' ' ')"
m kubelet "$(kubelet --version)"
m kubeadm "$(kubeadm version -o short)"
m br_netfilter "$(grep -c '^br_netfilter ' /proc/modules)"
m ip_forward "$(sysctl -n net.ipv4.ip_forward)"
m bridge-nf-call-iptables "$(sysctl -n net.bridge.bridge-nf-call-iptables)"
m hostname "$(hostname)"
m eth0 "$(ip -4 -o addr show eth0)"
m default-route "$(ip -4 route show default)"
m nameservers "$(grep ^nameserver /etc/resolv.conf | tr '\\n' ' ')"
m root-bytes "$(df -B1 --output=size / | tail -n 1 | tr -d ' ')"
m machine-id "$(cat /etc/machine-id)"
m swap "$(tail -n +2 /proc/swaps | wc -l)"
m cloud-init-warnings "$(grep -c WARNING /var/log/cloud-init.log)"
grep WARNING /var/log/cloud-init.log | cut -c1-300 | sed "s/^/{MARKER} warning: /"
m done "$(cut -d' ' -f1 /proc/uptime)"
"""


def user_data() -> bytes:
    config = {
        "write_files": [
            {"path": "/run/capfleet-test/provider-id", "content": "{{ ds.meta_data.provider_id }}"},
            {"path": "/run/capfleet-test/report", "permissions": "0755", "content": REPORT},
        ],
        "runcmd": [["sh", "-c", "sh /run/capfleet-test/report > /dev/ttyS0 2>&1"]],
    }
    return b"## template: jinja\n#cloud-config\n" + yaml.safe_dump(config, sort_keys=False).encode()


def markers(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in log.splitlines():
        match = re.match(rf"{MARKER} ([\w.-]+): ?(.*)$", line.rstrip("\r"))
        if match and match.group(1) != "warning":
            found[match.group(1)] = match.group(2).strip()
    return found


def boot(image: Path, workdir: Path) -> tuple[dict[str, str], str, float]:
    """Boot `image` with the seed above until the report is on the console; markers, log, wall seconds."""
    overlay, iso, log = workdir / "overlay.qcow2", workdir / "cidata.iso", workdir / "serial.log"
    size = virtual_size(image) + GROWTH
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(image.resolve()),
                    str(overlay), str(size)], check=True)  # fmt: skip
    nic = VMInterface(user_mode=True, mac_address=MAC, addresses=[ADDRESS], gateway=GATEWAY,
                      nameservers=[NAMESERVER])  # fmt: skip
    meta = meta_data("node-boot-test-1", HOSTNAME, PROVIDER_ID)
    iso.write_bytes(cidata_iso(seed_files(user_data(), meta, network_config([nic]))))
    argv = [
        "qemu-system-x86_64", "-accel", "tcg", "-machine", "pc", "-m", "2048", "-smp", "2",
        "-nodefaults", "-nographic", "-monitor", "none", "-serial", f"file:{log}", "-no-reboot",
        "-drive", f"file={overlay},if=virtio,format=qcow2",
        "-drive", f"file={iso},if=ide,index=2,media=cdrom,format=raw,readonly=on",
        "-nic", f"user,restrict=on,model=virtio-net-pci,mac={MAC}",
    ]  # fmt: skip
    started = time.monotonic()
    with (workdir / "qemu.log").open("wb") as qemu_log:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qemu_log, stderr=qemu_log)
    text = ""
    try:
        while time.monotonic() - started < BOOT_TIMEOUT:
            text = log.read_text(errors="replace") if log.exists() else ""
            if "done" in markers(text) and FINISHED.search(text):
                break
            if qemu.poll() is not None:
                pytest.fail(f"QEMU exited ({qemu.returncode}) before the report; console:\n{text[-4000:]}")
            time.sleep(2)
        else:
            pytest.fail(f"no report within {BOOT_TIMEOUT:.0f}s; console:\n{text[-4000:]}")
    finally:
        qemu.kill()
        qemu.wait(timeout=30)
    return markers(text), text, time.monotonic() - started


def test_node_image_boots_into_a_kubeadm_ready_node(node_image: NodeImage, tmp_path: Path) -> None:
    image = node_image.qcow2
    workdir = artifacts_dir() / "nodeimage-boot"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    found, log, wall = boot(image, workdir)
    finished = FINISHED.search(log)
    assert finished
    (workdir / "timings.txt").write_text(
        f"wall_s={wall:.1f} cloud_init_finished_uptime_s={finished.group(1)} "
        f"preload_s={found.get('preload-seconds')}\n"
    )
    versions = NodeImageVersions()
    assert found["provider-id"] == PROVIDER_ID
    assert found["containerd"] == "active"
    assert found["preload"] == "active"
    assert set(found["images"].split()) >= set(versions.images().values())
    assert found["kubelet"] == f"Kubernetes {versions.kubernetes}"
    assert found["kubeadm"] == versions.kubernetes
    assert found["br_netfilter"] == "1"
    assert found["ip_forward"] == found["bridge-nf-call-iptables"] == "1"
    assert found["hostname"] == HOSTNAME
    assert f"inet {ADDRESS}" in found["eth0"]
    assert found["default-route"].startswith(f"default via {GATEWAY} dev eth0")
    assert found["nameservers"] == f"nameserver {NAMESERVER}"
    # growpart and resize2fs grew the root file system (by the GROWTH the overlay added to the disk).
    assert int(found["root-bytes"]) > virtual_size(image) - 257 * 2**20 + GROWTH // 2, "root did not grow"
    assert re.fullmatch(r"[0-9a-f]{32}", found["machine-id"])
    assert found["swap"] == "0"
    assert "DataSourceNoCloud [seed=/dev/sr0]" in log  # the seed was found on the CD-ROM
    assert "Invalid cloud-config" not in log  # the image's cloud.cfg.d and the user-data pass the schema
    assert "Traceback" not in log


def virtual_size(image: Path) -> int:
    info = subprocess.run(["qemu-img", "info", "--output=json", str(image)], capture_output=True, check=True)
    return int(json.loads(info.stdout)["virtual-size"])
