#!/usr/bin/env bash
# Builds kustomize from the Go module sigs.k8s.io/kustomize/kustomize/v5, for the deploy tests
# (e2e/tests/test_deploy_*.py build every overlay in deploy/ with it; capfleet_e2e.kustomize runs it).
#
# Not `go install module@version`: it asks the proxy for the module's version list, which the proxy here
# refuses. The module has no replace directives, so building a copy of the downloaded module with its own
# go.mod and go.sum is the same build (as hack/build-ipam-reference.sh does).
# Cached per version: ${CAPFLEET_CACHE:-~/.cache/capfleet}/kustomize/<version>/bin/kustomize.
set -euo pipefail

module="sigs.k8s.io/kustomize/kustomize/v5"
version="${KUSTOMIZE_VERSION:-v5.7.1}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
binary="$cache/kustomize/$version/bin/kustomize"

if [ -x "$binary" ]; then echo "kustomize $version: cached in $binary"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any go.mod

dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
if grep -q '^[[:space:]]*replace' "$dir/go.mod"; then
  echo "$module@$version has replace directives; build it another way" >&2
  exit 1
fi

mkdir -p "$(dirname "$binary")"
echo "building $module@$version ..."
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
# kustomize reports its version from these ldflags (as its release builds set them).
ldflags="-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$version"
(cd "$work/src" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$binary.tmp" .)
mv "$binary.tmp" "$binary"
"$binary" version
