"""The image's HEALTHCHECK: exit 0 when the reward server answers ``GET /healthz`` with 200, else 1.

The server answers HTTP only once its worker pools and sandbox have started, so healthy means ready to
score. It reads the address from the same ``RLVR_HOST``/``RLVR_PORT`` as the server; a wildcard bind is
probed on loopback. Standard library only: Docker runs it every few seconds.

With ``RLVR_INSTANCE_FILE`` set (the image sets it), the answer must also carry the instance id that this
container's server wrote there at start: with host networking another process may hold the port (a server
started by hand) and answer 200 while this one crash-loops on "address already in use".
"""

import json
import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 3.0

host = os.environ.get("RLVR_HOST", "127.0.0.1")
host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
if ":" in host:
    host = f"[{host}]"
port = os.environ.get("RLVR_PORT", "8000")
url = f"http://{host}:{port}/healthz"
instance_file = os.environ.get("RLVR_INSTANCE_FILE")
expected = None
if instance_file:
    try:
        with open(instance_file, encoding="ascii") as f:
            expected = f.read().strip()
    except OSError as exc:
        print(f"{instance_file}: {exc} (this container's server has not started yet)", file=sys.stderr)
        sys.exit(1)
try:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        if response.status != 200:
            sys.exit(1)
        answered = json.loads(response.read()).get("instance") if expected is not None else None
except (OSError, urllib.error.URLError, ValueError, AttributeError) as exc:
    print(f"{url}: {exc}", file=sys.stderr)
    sys.exit(1)
if expected is not None and answered != expected:
    print(
        f"{url} answered as instance {answered!r}, not this server's {expected!r}: another process holds port "
        f"{port}; stop it, or pick another port with RLVR_PORT",
        file=sys.stderr,
    )
    sys.exit(1)
sys.exit(0)
