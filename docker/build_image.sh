#!/usr/bin/env bash
# Build one of the project's images with no registry: make (or reuse) a debootstrap base image, then
# build docker/<DIR>/Dockerfile on top of it with the build ARG BASE and no network.
#
# Usage: docker/build_image.sh DIR TAG BASE_TAG PACKAGES [DOCKER_BUILD_ARGS...]
#   DIR       folder under docker/ that holds the Dockerfile and its context (e.g. sandbox)
#   TAG       image tag to build (e.g. rlvr-sandbox:latest)
#   BASE_TAG  base image tag, made by build_base.sh when missing (e.g. rlvr-base:bookworm)
#   PACKAGES  comma-separated Debian packages of the base (e.g. python3,g++)
#   DOCKER_BUILD_ARGS  passed on to docker build (e.g. --build-arg REQUIREMENT=rlvr==0.1.0)
# A Dockerfile that needs Python wheels should COPY a wheelhouse built on the host into its context
# (`pip wheel -w docker/<DIR>/wheels ...`) and install from it with `pip install --no-index`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: build_image.sh DIR TAG BASE_TAG PACKAGES}
tag=${2:?usage: build_image.sh DIR TAG BASE_TAG PACKAGES}
base=${3:?usage: build_image.sh DIR TAG BASE_TAG PACKAGES}
packages=${4:?usage: build_image.sh DIR TAG BASE_TAG PACKAGES}

"$here/build_base.sh" "$base" "$packages"
# The legacy builder needs no buildx plugin and, with --network none, proves the build is offline.
DOCKER_BUILDKIT=0 docker build --quiet --force-rm --network none --build-arg BASE="$base" "${@:5}" -t "$tag" "$here/$dir" >/dev/null
# The legacy builder keeps the image a tag pointed at before, and every multi-stage build's first stages,
# untagged: remove those of ours (an image a container still uses stays).
docker image prune --force --filter label=org.rlvr.role >/dev/null
echo "built $tag"
