#!/usr/bin/env bash
# Installs everything `make test` and `make demo` need on a fresh Debian machine, and nothing twice:
# Debian packages (when missing), uv (from PyPI), the Python workspace (uv.lock, frozen), and the
# Kubernetes binaries built from Go modules into ~/.cache/capfleet (see hack/build-kube.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(
  etcd-server libvirt-dev pkg-config gcc libc6-dev
  # Test hypervisors (e2e/src/capfleet_e2e/libvirt): private libvirtd + QEMU (TCG), an sshd in front of
  # each with virt-ssh-helper (libvirt-clients), and the test image: a Debian kernel, busybox-static, and
  # syslinux/mtools/dosfstools/qemu-utils for its boot-disk form. dnsmasq-base and iptables: libvirt networks.
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils openssh-server
  linux-image-amd64 busybox-static syslinux mtools dosfstools dnsmasq-base iptables
  # Bare-metal servers (e2e/src/capfleet_e2e/baremetal): QEMU's iPXE ROMs network-boot them on a bridge
  # in a test network namespace (iproute2), with DHCP from dnsmasq (dnsmasq-base, above).
  # deploy/pxe/dnsmasq.conf chain-loads firmware PXE ROMs to Debian's iPXE binaries (ipxe), which the lab
  # fetches over TFTP with curl.
  ipxe-qemu ipxe iproute2 curl
  # The node image (images/src/capfleet_images/nodeimage): a Debian tree from mmdebstrap, made into a disk.
  mmdebstrap
  # The deploy ramdisk (images/src/capfleet_images/deployramdisk) takes sfdisk, wipefs, mkfs.fat, qemu-img and
  # openssl (with the CA bundle) from the host, besides the kernel and busybox above.
  fdisk util-linux openssl ca-certificates
  # Real NetBox in the tests (e2e/src/capfleet_e2e/netbox/releases.py): its PostgreSQL and Redis on
  # loopback; NetBox 4.6 runs in a Debian trixie tree made by mmdebstrap (above).
  postgresql redis-server
  # The images (hack/images.sh): buildah or podman builds them on a base made by mmdebstrap (above). The
  # management node (e2e/src/capfleet_e2e/mgmtnode.py) runs them: containerd, runc, the CNI plugins, and
  # conntrack for kube-proxy.
  buildah podman containerd runc containernetworking-plugins conntrack
  # The console's browser tests (console/tests): headless Chromium and its WebDriver, driven by Selenium.
  chromium chromium-driver
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  # The harness runs private libvirtd and sshd instances; keep Debian from starting system-wide ones
  # (an sshd on port 22, a libvirtd) while installing, through the policy-rc.d hook its scripts honour.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod +x "$policy"
    trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

command -v go >/dev/null || { echo "setup: Go is required (>= 1.24) to build the Kubernetes control plane" >&2; exit 1; }
if ! command -v uv >/dev/null; then
  echo "setup: installing uv from PyPI"
  python3 -m pip install --quiet uv
fi

uv sync --frozen --quiet
bash hack/build-kube.sh
bash hack/build-capi.sh
bash hack/build-kustomize.sh
