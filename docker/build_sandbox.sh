#!/usr/bin/env bash
# Build the code sandbox image (Python 3 and g++) offline. Env: RLVR_SANDBOX_IMAGE, RLVR_SANDBOX_BASE.
set -euo pipefail
exec "$(dirname "$0")/build_image.sh" sandbox "${RLVR_SANDBOX_IMAGE:-rlvr-sandbox:latest}" \
    "${RLVR_SANDBOX_BASE:-rlvr-base:bookworm}" python3,g++
