#!/usr/bin/env bash
# Build the code sandbox image offline, on the shared base. Env: RLVR_SANDBOX_IMAGE, RLVR_BASE_IMAGE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/build_image.sh" sandbox "${RLVR_SANDBOX_IMAGE:-rlvr-sandbox:latest}" \
    "${RLVR_BASE_IMAGE:-rlvr-base:bookworm}" "$(<"$here/base-packages")"
