#!/usr/bin/env bash
# Builds the real Cluster API managers and clusterctl from the Go module sigs.k8s.io/cluster-api, so the
# e2e tests can run CAPI against the test control plane (e2e/src/capfleet_e2e/capi.py) and render
# templates with clusterctl (capfleet_e2e.capibin).
#
# v1.11 is one module (bootstrap/kubeadm, controlplane/kubeadm and cmd/clusterctl are packages of it) with
# no replace directives, so a copy of the downloaded module builds with its own go.mod and go.sum.
# Not `go install module@version`: it asks the proxy for the module's version list, which the proxy here
# refuses (see hack/build-kustomize.sh).
#
# Output, cached per version under ${CAPFLEET_CACHE:-~/.cache/capfleet}/capi/<version>/bin:
#   capi-manager                    sigs.k8s.io/cluster-api (root main.go: the core controllers)
#   kubeadm-bootstrap-manager       sigs.k8s.io/cluster-api/bootstrap/kubeadm
#   kubeadm-control-plane-manager   sigs.k8s.io/cluster-api/controlplane/kubeadm
#   clusterctl                      sigs.k8s.io/cluster-api/cmd/clusterctl
# All get the version ldflags of CAPI's own release builds (hack/version.sh): clusterctl prints them in
# `clusterctl version` and sends them as its user agent; without them it reports an empty version.
set -euo pipefail

module="sigs.k8s.io/cluster-api"
version="${CAPI_VERSION:-v1.11.3}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
out="$cache/capi/$version/bin"
declare -A packages=(
  [capi-manager]="."
  [kubeadm-bootstrap-manager]="./bootstrap/kubeadm"
  [kubeadm-control-plane-manager]="./controlplane/kubeadm"
  [clusterctl]="./cmd/clusterctl"
)
order=(capi-manager kubeadm-bootstrap-manager kubeadm-control-plane-manager clusterctl)

have_all() { for b in "${order[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "capi $version: cached in $out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any go.mod

info=$(GOFLAGS=-mod=mod go mod download -json "$module@$version")
dir=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' <<<"$info")
info_file=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Info"])' <<<"$info")
if grep -q '^[[:space:]]*replace' "$dir/go.mod"; then
  echo "$module@$version has replace directives; build it another way" >&2
  exit 1
fi
# The tag's commit and date, as the proxy recorded them (.info Origin.Hash / Time), for the ldflags.
commit=$(python3 -c 'import json,sys; print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash", ""))' "$info_file")
date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["Time"])' "$info_file")
minor="${version#v1.}"; minor="${minor%%.*}"
major="${version#v}"; major="${major%%.*}"

cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$out"
x="-X sigs.k8s.io/cluster-api/version"
ldflags="-s -w $x.gitVersion=$version $x.gitMajor=$major $x.gitMinor=$minor $x.gitCommit=$commit $x.gitTreeState=clean $x.buildDate=$date"
cd "$work/src"
for b in "${order[@]}"; do
  [ -x "$out/$b" ] && continue
  echo "building $b ($module${packages[$b]#.}) $version ..."
  start=$SECONDS
  GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "${packages[$b]}"
  mv "$out/$b.tmp" "$out/$b"
  echo "built $b in $((SECONDS - start))s"
done
CLUSTERCTL_DISABLE_VERSIONCHECK=true "$out/clusterctl" version
