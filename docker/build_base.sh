#!/usr/bin/env bash
# Build a Debian base image OFFLINE from any registry: debootstrap a root filesystem from the Debian
# mirror (the only network this needs), then `docker import` it as a local image. Every image of the
# project starts FROM such a base, passed to its Dockerfile as the build ARG `BASE`.
#
# Usage: docker/build_base.sh TAG PACKAGES [SUITE]
#   TAG       image tag to create, e.g. rlvr-base:bookworm
#   PACKAGES  comma-separated Debian packages to include, e.g. python3,g++
#   SUITE     Debian suite (default: bookworm)
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), REBUILD=1 to rebuild an existing tag.
set -euo pipefail

tag=${1:?usage: build_base.sh TAG PACKAGES [SUITE]}
packages=${2:?usage: build_base.sh TAG PACKAGES [SUITE]}
suite=${3:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [[ "${REBUILD:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists (REBUILD=1 to rebuild)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }

rootfs=$(mktemp -d /tmp/rlvr-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "debootstrap $suite ($packages) into $rootfs"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 30 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
# Shrink the image: package lists, caches and docs are not needed at run time.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*

tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "built $tag"
