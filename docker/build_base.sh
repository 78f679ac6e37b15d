#!/usr/bin/env bash
# Build a Debian base image OFFLINE from any registry: debootstrap a root filesystem from the Debian
# mirror (the only network this needs), apply the suite's security updates, then `docker import` it as a
# local image. Every image of the project starts FROM such a base, passed to its Dockerfile as the build
# ARG `BASE`; docker/base-packages lists what the shared base holds, so one debootstrap serves them all.
#
# Usage: docker/build_base.sh TAG PACKAGES [SUITE]
#   TAG       image tag to create, e.g. rlvr-base:bookworm
#   PACKAGES  comma-separated Debian packages to include, e.g. python3,g++
#   SUITE     Debian suite (default: bookworm)
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security; empty to skip the security updates), REBUILD=1 to rebuild an
# existing tag. An existing tag built from other packages or another suite is rebuilt.
set -euo pipefail

tag=${1:?usage: build_base.sh TAG PACKAGES [SUITE]}
packages=${2:?usage: build_base.sh TAG PACKAGES [SUITE]}
suite=${3:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR-http://deb.debian.org/debian-security}
# What the image was made from, kept as a label so that a changed package list is never silently reused.
recipe="$suite:$packages"

# Before anything slow: without an engine, `docker image inspect` below fails like a missing image, and the
# debootstrap would run for minutes before `docker import` found no engine.
if ! docker info >/dev/null 2>&1; then
    echo "no Docker engine answers ('docker info' failed): start it (sudo systemctl start docker, or sudo dockerd)," \
        "or run this as a user in the docker group" >&2
    exit 1
fi

if [[ "${REBUILD:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    have=$(docker image inspect -f '{{ with .Config.Labels }}{{ index . "org.rlvr.base" }}{{ end }}' "$tag")
    if [[ "$have" == "$recipe" ]]; then
        echo "base image $tag exists (REBUILD=1 to rebuild)"
        exit 0
    fi
    echo "base image $tag was made from '${have:-unknown}', not '$recipe': rebuilding it"
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || {
    echo "debootstrap makes a root file system and needs root: sudo env PYTHON=\"\$PWD/.venv/bin/python\" docker/build_images.sh" >&2
    exit 1
}

rootfs=$(mktemp -d /tmp/rlvr-rootfs.XXXXXX)
trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT

echo "debootstrap $suite ($packages) into $rootfs"
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 30 "$rootfs.log" >&2; exit 1; }
if [[ -n "$security" ]]; then
    # debootstrap takes the suite as released; the images serve HTTP and compile untrusted code, so they get
    # the security fixes (openssl, python3, nginx ...) too.
    echo "deb $security $suite-security main" >"$rootfs/etc/apt/sources.list.d/security.list"
    { chroot "$rootfs" apt-get update -qq && DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get -y -qq upgrade; } \
        >"$rootfs.log" 2>&1 || { tail -n 30 "$rootfs.log" >&2; exit 1; }
fi
# Shrink the image: package lists, caches and docs are not needed at run time. The build host's resolver
# stays out of it too (Docker mounts a container's own).
: >"$rootfs/etc/resolv.conf"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*

tar -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' --change "LABEL org.rlvr.base=\"$recipe\"" - "$tag" >/dev/null
echo "built $tag"
