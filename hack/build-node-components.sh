#!/usr/bin/env bash
# Builds the programs of the node image's container images that are not Kubernetes binaries, so kubeadm
# finds every image preloaded in containerd and never pulls (no registry is reachable; the Go module proxy
# is). Versions are kubeadm v1.33's defaults, the same as images/src/capfleet_images/nodeimage/versions.py:
#   etcd      go.etcd.io/etcd/server/v3 (its root package is etcd's main), and etcdctl, each built in a
#             wrapper module that requires it (their go.mod replace the sibling modules with local paths,
#             which a dependency's go.mod may do: replaces only apply in the main module)
#   coredns   github.com/coredns/coredns (no replace directives: built in a copy of the downloaded module)
#   kube-vip  github.com/kube-vip/kube-vip (the checksum database has no entry for it, so the module zip's
#             hash is checked here against a pinned one instead)
#   pause     build/pause/linux/pause.c from the k8s.io/kubernetes module, compiled static with gcc
# Not `go install module@version`: it asks the proxy for the module's version list, which the proxy here
# refuses (see hack/build-kustomize.sh).
#
# Output, cached under ${CAPFLEET_CACHE:-~/.cache/capfleet}/node-components/<name>-<version>/bin; what is
# there is not built again. NODE_COMPONENTS (default "etcd coredns kube-vip pause") picks what to build.
set -euo pipefail

etcd_version="${ETCD_VERSION:-v3.5.24}"
coredns_version="${COREDNS_VERSION:-v1.12.0}"
kube_vip_version="${KUBE_VIP_VERSION:-v1.0.0}"
pause_version="${PAUSE_VERSION:-3.10}"
kube_version="${KUBE_VERSION:-v1.33.13}"  # the k8s.io/kubernetes module pause.c is taken from
# h1: hashes of kube-vip module zips, as `go mod download -json` reports them ("Sum").
declare -A kube_vip_sums=(
  [v1.0.0]="h1:QvcGrTGziaBzM5tnhNWlsb9mI0tmF9gYh+VBfRDZ8w8="
)
kube_vip_sum="${KUBE_VIP_SUM:-${kube_vip_sums[$kube_vip_version]:-}}"
read -r -a components <<<"${NODE_COMPONENTS:-etcd coredns kube-vip pause}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}"
root="$cache/node-components"

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # outside any go.mod

json_field() { python3 -c 'import json,sys; print((json.load(sys.stdin).get(sys.argv[1])) or "")' "$1"; }
# The tag's commit as the proxy recorded it (.info Origin.Hash), for version ldflags.
info_commit() { python3 -c 'import json,sys; print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash", ""))' "$1"; }
# Move a finished binary into place: a half-written one is never taken for a cached one.
install_binary() { mv "$1" "$2"; chmod 0755 "$2"; }

# build_in_wrapper <out> <module> <version> <ldflags>: build the root package of <module> from a module
# that only requires it, so <module>'s own replace directives are ignored.
build_in_wrapper() {
  local out=$1 module=$2 version=$3 ldflags=$4 dir="$work/wrapper-${1##*/}"
  mkdir -p "$dir"
  printf 'module capfleet.dev/%s-wrapper\n\ngo 1.24\n\nrequire %s %s\n' "${out##*/}" "$module" "$version" >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$module" >"$dir/tools.go"
  (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$module") &&
    install_binary "$out.tmp" "$out"
}

# copy_module <module> <version> <dest>: the downloaded module's files, writable, in <dest>; prints .info.
copy_module() {
  local info dir
  info=$(go mod download -json "$1@$2")
  dir=$(json_field Dir <<<"$info")
  cp -r "$dir" "$3"
  chmod -R u+w "$3"
  json_field Info <<<"$info"
}

build_etcd() {
  local out=$1 sha
  sha=$(info_commit "$(go mod download -json "go.etcd.io/etcd/server/v3@$etcd_version" | json_field Info)")
  build_in_wrapper "$out/etcd" go.etcd.io/etcd/server/v3 "$etcd_version" \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:7}"
  # etcdctl is a convenience (etcd's image ships it); a failure here does not fail the node image.
  build_in_wrapper "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3 "$etcd_version" \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:7}" || echo "etcdctl not built (optional)" >&2
  "$out/etcd" --version
}

build_coredns() {
  local out=$1 module=github.com/coredns/coredns info commit
  info=$(copy_module "$module" "$coredns_version" "$work/coredns")
  if grep -q '^[[:space:]]*replace' "$work/coredns/go.mod"; then
    echo "$module@$coredns_version has replace directives; build it another way" >&2
    return 1
  fi
  commit=$(info_commit "$info")
  (cd "$work/coredns" && go build -trimpath -ldflags "-s -w -X $module/coremain.GitCommit=${commit:0:7}" \
    -o "$out/coredns.tmp" .)
  install_binary "$out/coredns.tmp" "$out/coredns"
  "$out/coredns" -version
}

build_kube_vip() {
  local out=$1 module=github.com/kube-vip/kube-vip info sum dir commit
  if [ -z "$kube_vip_sum" ]; then
    echo "no pinned h1: hash for $module@$kube_vip_version: set KUBE_VIP_SUM" >&2
    return 1
  fi
  info=$(GONOSUMDB=$module go mod download -json "$module@$kube_vip_version")
  sum=$(json_field Sum <<<"$info")
  if [ "$sum" != "$kube_vip_sum" ]; then
    echo "CHECKSUM MISMATCH for $module@$kube_vip_version: downloaded $sum, pinned $kube_vip_sum" >&2
    return 1
  fi
  dir=$(json_field Dir <<<"$info")
  commit=$(info_commit "$(json_field Info <<<"$info")")
  cp -r "$dir" "$work/kube-vip"
  chmod -R u+w "$work/kube-vip"
  (cd "$work/kube-vip" && go build -trimpath \
    -ldflags "-s -w -X main.Version=$kube_vip_version -X main.Build=$commit" -o "$out/kube-vip.tmp" .)
  install_binary "$out/kube-vip.tmp" "$out/kube-vip"
  "$out/kube-vip" version
}

build_pause() {
  local out=$1 dir
  dir=$(go mod download -json "k8s.io/kubernetes@$kube_version" | json_field Dir)
  gcc -Os -Wall -Werror -static "-DVERSION=v$pause_version-capfleet" -o "$out/pause.tmp" \
    "$dir/build/pause/linux/pause.c"
  strip "$out/pause.tmp"
  install_binary "$out/pause.tmp" "$out/pause"
  "$out/pause" -v
}

for name in "${components[@]}"; do
  case "$name" in
    etcd) version=$etcd_version binaries=(etcd) ;;
    coredns) version=$coredns_version binaries=(coredns) ;;
    kube-vip) version=$kube_vip_version binaries=(kube-vip) ;;
    pause) version=$pause_version binaries=(pause) ;;
    *) echo "unknown node component $name (etcd, coredns, kube-vip, pause)" >&2; exit 1 ;;
  esac
  out="$root/$name-$version/bin"
  cached=1
  for b in "${binaries[@]}"; do [ -x "$out/$b" ] || cached=0; done
  if [ "$cached" = 1 ]; then echo "$name $version: cached in $out"; continue; fi
  mkdir -p "$out"
  echo "building $name $version ..."
  start=$SECONDS
  "build_${name//-/_}" "$out"
  echo "built $name $version in $((SECONDS - start))s"
done
