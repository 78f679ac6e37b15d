#!/usr/bin/env bash
# Build every image of the project offline: the shared debootstrap base (once), then the sandbox, reward
# server and load balancer images on it. Prints each image's size.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/build_sandbox.sh"
"$here/build_server.sh"
"$here/build_lb.sh"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^rlvr-(base|sandbox|server|lb):' || true
