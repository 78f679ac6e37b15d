"""The server's logs: one line per event on stderr, as ``key=value`` text or as JSON (``RLVR_LOG_FORMAT``).

Every record made while a request is served carries its ``request_id``; the access log line of each request
(logger ``reward_server.access``, see :class:`~reward_server.middleware.RequestLog`) carries its fields too. The
configuration is a :func:`logging.config.dictConfig` dict, handed to uvicorn so that its own loggers write the
same way.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from reward_server.middleware import request_id_var

__all__ = ["JsonFormatter", "TextFormatter", "log_config"]

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "color_message"}


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of a record beyond the standard ones: the request id, and ``extra={"fields": {...}}``."""
    fields: dict[str, Any] = {}
    request_id = getattr(record, "request_id", None) or request_id_var.get()
    if request_id:
        fields["request_id"] = request_id
    given = getattr(record, "fields", None)
    if isinstance(given, dict):
        fields.update(given)
    for key, value in record.__dict__.items():
        if key not in _STANDARD and key not in ("fields", "request_id"):
            fields[key] = value
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


class TextFormatter(logging.Formatter):
    """``2025-01-01T12:00:00.123Z INFO reward_server.access POST /v1/rewards 200 request_id=... items=256``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        for key, value in _extra(record).items():
            text = value if isinstance(value, str | int | float) else json.dumps(value, separators=(",", ":"))
            parts.append(f"{key}={text}")
        line = " ".join(str(p) for p in parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_extra(record),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def log_config(level: str = "info", fmt: str = "text") -> dict[str, Any]:
    """A ``dictConfig`` for the server process: everything to stderr at ``level`` through one formatter.

    uvicorn's access log is off (``RequestLog`` writes a richer line); its other loggers go through the same
    handler.
    """
    chosen = JsonFormatter if fmt == "json" else TextFormatter
    formatter = f"{chosen.__module__}.{chosen.__qualname__}"
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"rlvr": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "rlvr", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": upper},
        "loggers": {
            "uvicorn": {"handlers": [], "level": upper, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": upper, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }
