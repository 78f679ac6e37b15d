#!/usr/bin/env bash
# Build the reward server image offline, on the shared base. Env: RLVR_SERVER_IMAGE, RLVR_BASE_IMAGE, PYTHON
# (the interpreter whose pip builds the wheelhouse; default python3).
#
# 1. The base image (docker/build_base.sh), made once and shared with the other images.
# 2. A wheelhouse in docker/server/wheels: a wheel of this project, and every dependency as a binary wheel
#    for the base image's Python and platform (asked of the base itself, not of this host), plus pip.
#    This is the one step that needs a package index.
# 3. docker/server/Dockerfile with no network (docker/build_image.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
base=${RLVR_BASE_IMAGE:-rlvr-base:bookworm}
packages=$(<"$here/base-packages")
python=${PYTHON:-python3}
wheels="$here/server/wheels"

"$here/build_base.sh" "$base" "$packages"

read -r pyver machine glibc < <(docker run --rm --network none "$base" python3 -c \
    'import platform, sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}", platform.machine(), platform.libc_ver()[1])')
[[ "${glibc:-}" == 2.* ]] || { echo "could not ask $base for its Python, machine and glibc" >&2; exit 1; }
# Every manylinux tag the base's glibc can load, newest first (pip does not widen a --platform by itself).
platforms=()
for ((minor = ${glibc#2.}; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_${machine}"); done
platforms+=(--platform "manylinux2014_${machine}")
[[ "$machine" == x86_64 ]] && platforms+=(--platform manylinux2010_x86_64 --platform manylinux1_x86_64)

rm -rf "$wheels" && mkdir -p "$wheels"
scratch=$(mktemp -d /tmp/rlvr-wheels.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
log="$scratch/log"
echo "wheelhouse for Python $pyver on $machine (glibc $glibc) in $wheels"
# The project's wheel is built from a copy of its files (tracked or new, not ignored): setuptools builds in
# the source tree, and a stale build/ there would put deleted modules into the wheel.
mkdir "$scratch/src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c) | tar -x -C "$scratch/src"
else
    tar -C "$repo" -c --exclude=./build --exclude=./docker/server/wheels . | tar -x -C "$scratch/src"
fi
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$scratch/src" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
"$python" -m pip download --quiet --only-binary=:all: --python-version "$pyver" --implementation cp \
    --abi "cp${pyver/./}" "${platforms[@]}" --dest "$wheels" "$wheels"/rlvr-*.whl pip >"$log" 2>&1 \
    || { cat "$log" >&2; exit 1; }

# Not `exec`: the EXIT trap above must still run, or every build leaves its scratch directory behind.
"$here/build_image.sh" server "${RLVR_SERVER_IMAGE:-rlvr-server:latest}" "$base" "$packages"
