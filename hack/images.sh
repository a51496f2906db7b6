#!/usr/bin/env bash
# Builds the five operator images and the console's from operators/Dockerfile, writes each as an OCI
# archive (what clusterctl users push to their registry and what the test lab loads into containerd),
# and prints each image's size. Called by `make images`; every setting is an environment variable:
#
#   CONTAINER_ENGINE  docker, podman or buildah (unset: the first found; empty: none)
#   IMAGE_BASE        debian: both bases made here from Debian's and PyPI's packages (no registry needed;
#                     needs buildah and mmdebstrap); registry: the Dockerfile's pinned defaults (Docker
#                     Hub's python, Astral's uv). Default: debian where buildah and mmdebstrap are found.
#   IMAGE_REGISTRY, IMAGE_TAG, VERSION, REVISION, SOURCE   names and labels
#   IMAGES_DIR        where the archives go (default ~/.cache/capfleet/images/<tag>)
#   OPERATORS         which images (default all six)
#
# The Debian base is one layer: a bookworm minbase tree with python3 and ca-certificates made by
# mmdebstrap. SOURCE_DATE_EPOCH fixes file times, so the tree (and the layer's digest) changes only when
# Debian's packages do. It is cached by that digest in the engine's storage and as an archive under
# ~/.cache/capfleet/images/base, so only the first build on a machine pays for it.
set -euo pipefail
cd "$(dirname "$0")/.."

operators=(${OPERATORS:-ipam-address netbox-device libvirt-vm baremetal-provision capi-machine-glue console})
if [ -n "${CONTAINER_ENGINE+set}" ]; then engine="$CONTAINER_ENGINE"; else
  # A docker client without a daemon (`docker info` fails) is no engine.
  engine=""
  for e in docker podman buildah; do
    command -v "$e" >/dev/null || continue
    [ "$e" != docker ] || docker info >/dev/null 2>&1 || continue
    engine=$e; break
  done
fi
if [ -z "$engine" ]; then
  echo "make images: no container engine found (docker, podman or buildah); install one or set CONTAINER_ENGINE" >&2
  exit 1
fi
base_kind="${IMAGE_BASE:-}"
if [ -z "$base_kind" ]; then
  if command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; then base_kind=debian; else base_kind=registry; fi
fi
version="${VERSION:-$(sed -n 's/^VERSION = "\(.*\)"$/\1/p' shared/src/capfleet/runtime.py)}"
tag="${IMAGE_TAG:-v$version}"
registry="${IMAGE_REGISTRY:-capfleet}"
revision="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
source_url="${SOURCE:-https://capfleet.dev/source}"
cache="${CAPFLEET_CACHE:-$HOME/.cache/capfleet}/images"
out="${IMAGES_DIR:-$cache/$tag}"
uv_version=0.13.0  # the Dockerfile's UV_IMAGE default carries the same version
mkdir -p "$out"

build=()
# buildah and podman run RUN steps chrooted: no OCI runtime, so builds work where crun cannot set up
# cgroups (a v1 or hybrid hierarchy, a container without systemd).
case "$engine" in
  buildah) build=(buildah bud --layers --isolation chroot) ;;
  podman) build=(podman build --layers --isolation chroot) ;;
  *) build=("$engine" build) ;;
esac
args=()

# The bases made here: buildah builds them and (podman sharing its storage) the images.
if [ "$base_kind" = debian ]; then
  command -v buildah >/dev/null || { echo "make images: IMAGE_BASE=debian needs buildah" >&2; exit 1; }
  [ "$engine" = docker ] && { echo "make images: IMAGE_BASE=debian needs buildah or podman, not docker" >&2; exit 1; }
  mkdir -p "$cache/base"
  epoch="${SOURCE_DATE_EPOCH:-1767225600}"  # 2026-01-01: any fixed time will do
  packages="python3,ca-certificates"
  recipe=1  # bump when the way the tree is made changes
  key=$(printf '%s\n' bookworm "$packages" "$epoch" "$recipe" | sha256sum | cut -c1-16)
  base="localhost/capfleet/base:bookworm-$key"
  if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    tree="$cache/base/bookworm-$key.tar"
    if [ ! -s "$tree" ]; then
      echo "images: making the base from Debian's packages ($packages) ..."
      start=$SECONDS
      # Documentation, man pages and locales are excluded; the copyright files stay (licences).
      SOURCE_DATE_EPOCH="$epoch" mmdebstrap --quiet --variant=minbase --include="$packages" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
        bookworm "$tree.tmp"
      mv "$tree.tmp" "$tree"
      echo "images: base tree made in $((SECONDS - start))s"
    fi
    c=$(buildah from scratch)
    buildah add --quiet "$c" "$tree" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
      --cmd python3 --label org.opencontainers.image.description="Debian bookworm with python3 (capfleet's base)" "$c"
    buildah commit --quiet --rm "$c" "$base" >/dev/null
  fi
  uv_image="localhost/capfleet/uv:$uv_version"
  if ! buildah inspect --type image "$uv_image" >/dev/null 2>&1; then
    wheels=$(mktemp -d)
    # uv's wheel from PyPI, unpacked by uv itself: neither the workspace's virtualenv (first on PATH under
    # `uv run`) nor Debian's python3 need carry pip.
    uv pip install --quiet --no-deps --only-binary :all: --target "$wheels/x" "uv==$uv_version"
    c=$(buildah from scratch)
    buildah copy --quiet --chmod 0755 "$c" "$wheels/x/bin/uv" /uv >/dev/null
    buildah commit --quiet --rm "$c" "$uv_image" >/dev/null
    rm -rf "$wheels"
  fi
  args+=(--build-arg "PYTHON_IMAGE=$base" --build-arg "UV_IMAGE=$uv_image")
fi
# A network that reaches PyPI only through a CA of its own: the build trusts what this machine trusts.
if [ -n "${SSL_CERT_FILE:-}" ] && [ -r "$SSL_CERT_FILE" ] && [ "$engine" != docker ]; then
  args+=(--volume "$SSL_CERT_FILE:/run/capfleet-build-ca.crt:ro" --build-arg SSL_CERT_FILE=/run/capfleet-build-ca.crt)
fi

# The name an archive gives its image, as a runtime reads it: Docker Hub's short names in full
# (capfleet/x:v1 is docker.io/capfleet/x:v1 to containerd and the kubelet alike).
qualified() {
  case "${1%%/*}" in
    *.*|*:*|localhost) echo "$1" ;;
    *) echo "docker.io/$1" ;;
  esac
}

started=$SECONDS
printf '%-22s %10s %10s  %s\n' image archive unpacked digest > "$out/sizes.txt"
for op in "${operators[@]}"; do
  name="$registry/$op:$tag"
  echo "images: building $name ($engine, $base_kind base) ..."
  "${build[@]}" -f operators/Dockerfile "${args[@]}" --build-arg "OPERATOR=$op" \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url" \
    -t "$name" . >"$out/$op.build.log" 2>&1 || { tail -40 "$out/$op.build.log" >&2; exit 1; }
  rm -f "$out/$op.tar"
  case "$engine" in
    docker) docker save -o "$out/$op.tar" "$name" ;;
    *) "$engine" push --quiet "$name" "oci-archive:$out/$op.tar:$(qualified "$name")" >/dev/null ;;
  esac
  unpacked=$("$engine" image inspect --format '{{.Size}}' "$name" 2>/dev/null || echo 0)
  digest=$("$engine" image inspect --format '{{.Digest}}' "$name" 2>/dev/null || echo -)
  printf '%-22s %9.1fM %9.1fM  %s\n' "$op" "$(du -k "$out/$op.tar" | awk '{print $1/1024}')" \
    "$(awk -v b="$unpacked" 'BEGIN{print b/1048576}')" "$digest" >> "$out/sizes.txt"
done
echo "images: ${#operators[@]} built in $((SECONDS - started))s into $out"
cat "$out/sizes.txt"
