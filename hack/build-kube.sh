#!/usr/bin/env bash
# Builds Kubernetes binaries from the k8s.io/kubernetes Go module: by default kube-apiserver,
# kube-controller-manager and kubectl (the test control plane); the node image asks for the rest of
# kubeadm's set (kubelet, kubeadm, kube-scheduler, kube-proxy) through KUBE_BINARIES.
#
# `go install k8s.io/kubernetes/cmd/...@v` fails because the module replaces its staging modules with
# local paths. So we write a wrapper module that requires k8s.io/kubernetes and replaces every staging
# module (read from the downloaded go.mod, never hard-coded) with its published v0.Y.Z, then build.
# Binaries are cached per version under ${CAPFLEET_CACHE:-~/.cache/capfleet}/kube/<version>/bin, so only
# the first run on a machine pays for the build.
set -euo pipefail

version="${KUBE_VERSION:-v1.33.13}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
out="$cache/kube/$version/bin"
read -r -a binaries <<<"${KUBE_BINARIES:-kube-apiserver kube-controller-manager kubectl}"

have_all() { for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if have_all; then echo "kube $version: cached in $out"; exit 0; fi

minor="${version#v1.}"; minor="${minor%%.*}"
staging_version="v0.${version#v1.}"
work="$cache/kube/$version/wrapper"
mkdir -p "$work" "$out"
cd "$work"

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$upstream_mod" | sort -u)
[ "${#staging[@]}" -gt 20 ] || { echo "found only ${#staging[@]} staging modules in $upstream_mod" >&2; exit 1; }

{
  echo "module capfleet.dev/kube-wrapper"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  for m in "${staging[@]}"; do echo "replace $m => $m $staging_version"; done
} > go.mod
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for b in "${binaries[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
  printf ')\n'
} > tools.go
go mod tidy -e >/dev/null 2>&1 || true
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for b in "${binaries[@]}"; do
  [ -x "$out/$b" ] && continue
  echo "building $b $version ..."
  go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$out/$b.tmp" "$out/$b"
done
for b in "${binaries[@]}"; do
  case "$b" in
    kubeadm) "$out/$b" version -o short ;;
    kubectl) "$out/$b" version --client ;;
    *) "$out/$b" --version ;;
  esac
done
