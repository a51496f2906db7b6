#!/usr/bin/env bash
# Builds the reference Go IPAM provider that `make bench-ipam` measures ipam-address against:
# sigs.k8s.io/cluster-api-ipam-provider-in-cluster, from the Go module proxy (its main.go is at the module
# root and its go.mod has no replace directives, so the module builds as downloaded).
# v1.1.x is the line that targets CAPI 1.11 and IPAM v1beta2, like capfleet.
#
# Output, cached per version under ${CAPFLEET_CACHE:-~/.cache/capfleet}/ipam-in-cluster/<version>/:
#   bin/cluster-api-ipam-provider-in-cluster   the provider (its binary name is also its API user agent)
#   crds/*.yaml                                 config/crd/bases from the module zip (InClusterIPPool, ...)
set -euo pipefail

module="sigs.k8s.io/cluster-api-ipam-provider-in-cluster"
version="${IPAM_REFERENCE_VERSION:-v1.1.0}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
out="$cache/ipam-in-cluster/$version"
binary="$out/bin/cluster-api-ipam-provider-in-cluster"

if [ -x "$binary" ] && compgen -G "$out/crds/*.yaml" >/dev/null; then
  echo "ipam-in-cluster $version: cached in $out"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any go.mod

dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
if grep -q '^replace\|^[[:space:]]*replace' "$dir/go.mod"; then
  echo "$module@$version has replace directives; go install cannot build it" >&2
  exit 1
fi

mkdir -p "$out/bin" "$out/crds"
echo "building $module@$version ..."
# Not `go install module@version`: it asks the proxy for the module's version list (to report
# deprecation), which the proxy here refuses. Building a copy of the downloaded module with its own
# go.mod and go.sum is the same build.
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$binary.tmp" .)
mv "$binary.tmp" "$binary"

for crd in "$dir"/config/crd/bases/*.yaml; do
  install -m 0644 "$crd" "$out/crds/"
done
echo "built $binary; CRDs in $out/crds:"
ls "$out/crds"
