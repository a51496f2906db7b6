#!/usr/bin/env bash
# Installs everything `make test` and `make demo` need on a fresh Debian machine, and nothing twice:
# Debian packages (when missing), uv (from PyPI), the Python workspace (uv.lock, frozen), and the
# Kubernetes binaries built from Go modules into ~/.cache/capfleet (see hack/build-kube.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(etcd-server libvirt-dev pkg-config gcc libc6-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

command -v go >/dev/null || { echo "setup: Go is required (>= 1.24) to build the Kubernetes control plane" >&2; exit 1; }
if ! command -v uv >/dev/null; then
  echo "setup: installing uv from PyPI"
  python3 -m pip install --quiet uv
fi

uv sync --frozen --quiet
bash hack/build-kube.sh
