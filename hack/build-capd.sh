#!/usr/bin/env bash
# Builds CAPI's own test infrastructure provider, CAPD (sigs.k8s.io/cluster-api/test, infrastructure/docker),
# for its in-memory backend: DevCluster/DevMachine with `backend.inMemory` make Machines whose "VMs",
# etcd members and workload API servers live in the manager's memory. `make bench-fleet` runs the same N
# Machines through it on the same control plane as capfleet: Cluster API's floor for N Machines, with no
# infrastructure in the way. Nothing here needs Docker: the docker backend is built in but never used.
#
# The test module is not self-contained: its go.mod says `replace sigs.k8s.io/cluster-api => ../`, so it is
# laid out as in CAPI's repository, inside a copy of the main module of the same version. The checksum
# database does not know the test module, so that one download skips it (GONOSUMDB); everything it
# requires is checked against its own go.sum.
#
# Output, cached per version: ${CAPFLEET_CACHE:-~/.cache/capfleet}/capi/<version>/bin/capd-manager, and
# beside bin/ the provider's CRD kustomize folder (capd/config/crd) for the harness to install.
set -euo pipefail

module="sigs.k8s.io/cluster-api"
version="${CAPI_VERSION:-v1.11.3}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
out="$cache/capi/$version/bin"
config="$cache/capi/$version/capd/config"
if [ -x "$out/capd-manager" ] && [ -f "$config/crd/kustomization.yaml" ]; then
  echo "capd $version: cached in $out"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GONOSUMDB="$module/test"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any go.mod

dir_of() { GOFLAGS=-mod=mod go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }
main_dir=$(dir_of "$module@$version")
test_dir=$(dir_of "$module/test@$version")
rm -rf "$config"
mkdir -p "$out" "$config"
cp -r "$test_dir/infrastructure/docker/config/crd" "$config/crd"
chmod -R u+w "$config"
if [ ! -x "$out/capd-manager" ]; then
  cp -r "$main_dir" "$work/src"
  cp -r "$test_dir" "$work/src/test"
  chmod -R u+w "$work/src"
  cd "$work/src/test"
  echo "building capd-manager ($module/test/infrastructure/docker) $version ..."
  start=$SECONDS
  GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out/capd-manager.tmp" ./infrastructure/docker
  mv "$out/capd-manager.tmp" "$out/capd-manager"
  echo "built capd-manager in $((SECONDS - start))s"
fi
