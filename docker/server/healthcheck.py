"""The image's HEALTHCHECK: exit 0 when the reward server answers ``GET /healthz`` with 200, else 1.

The server answers HTTP only once its worker pools and sandbox have started, so healthy means ready to
score. It reads the address from the same ``RLVR_HOST``/``RLVR_PORT`` as the server; a wildcard bind is
probed on loopback. Standard library only: Docker runs it every few seconds.
"""

import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 3.0

host = os.environ.get("RLVR_HOST", "127.0.0.1")
host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
if ":" in host:
    host = f"[{host}]"
url = f"http://{host}:{os.environ.get('RLVR_PORT', '8000')}/healthz"
try:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        sys.exit(0 if response.status == 200 else 1)
except (OSError, urllib.error.URLError) as exc:
    print(f"{url}: {exc}", file=sys.stderr)
    sys.exit(1)
