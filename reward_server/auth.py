"""API keys: ``Authorization: Bearer <key>`` (RFC 6750) checked in constant time.

Keys come from ``RLVR_API_KEYS`` and ``RLVR_API_KEYS_FILE`` (see :class:`~reward_server.settings.Settings`). Only
their SHA-256 digests are kept; a presented token is hashed and compared with every digest by
:func:`hmac.compare_digest`, without stopping at a match, so the time taken says nothing about how much of a key
was right nor which key matched. Several keys at once let a deployment rotate them without downtime.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable

__all__ = ["ApiKeys", "bearer_token", "is_loopback"]


class ApiKeys:
    """A set of API keys.

    Args:
        keys: the keys in clear; only their digests are kept.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def match(self, token: str) -> int | None:
        """The index of the key equal to ``token`` (for the log: ``key=#2``), or ``None``."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for i, ref in enumerate(self._digests):
            if hmac.compare_digest(digest, ref) and found is None:
                found = i
        return found


def bearer_token(authorization: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value (scheme case-insensitive), else ``None``."""
    if not authorization:
        return None
    scheme, _, token = authorization.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def is_loopback(host: str) -> bool:
    """Is ``host`` (an interface to bind) reachable from this machine only?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
