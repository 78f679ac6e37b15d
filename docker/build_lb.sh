#!/usr/bin/env bash
# Build the load balancer image (Debian's nginx) offline, on the shared base. Env: RLVR_LB_IMAGE, RLVR_BASE_IMAGE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/build_image.sh" lb "${RLVR_LB_IMAGE:-rlvr-lb:latest}" \
    "${RLVR_BASE_IMAGE:-rlvr-base:bookworm}" "$(<"$here/base-packages")"
