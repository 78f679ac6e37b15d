"""The server's instance id: made at each start, echoed by ``/healthz``, and written to ``RLVR_INSTANCE_FILE``.

With host networking, a healthcheck that asks ``127.0.0.1:8000`` may reach another process that holds the
port (a server started by hand) while its own crash-loops on "address already in use". Comparing the id
``/healthz`` answers with the one its own server wrote proves which process answered (``docker/server/
healthcheck.py``).

``python -m reward_server`` makes the id before uvicorn starts and passes it to its worker processes in
``RLVR_INSTANCE_ID``, so every worker of one server answers the same id. An app built otherwise (a test, a
bare ``uvicorn --factory``) makes its own.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

logger = logging.getLogger("reward_server")

#: The variable that hands the id from ``python -m reward_server`` to the app in each worker process.
INSTANCE_ID_ENV = "RLVR_INSTANCE_ID"


def instance_id() -> str:
    """This server's id: the one its start made (``RLVR_INSTANCE_ID``), else a new one."""
    return os.environ.get(INSTANCE_ID_ENV) or secrets.token_hex(8)


def start_instance(instance_file: str | None) -> str:
    """Make a new id for a server that starts now, hand it to its workers, and write it to ``instance_file``.

    The file is replaced whole (written beside it, then renamed), so a healthcheck never reads half an id. A file
    that cannot be written is a warning, not a failed start: only a healthcheck that compares the id needs it.
    """
    new = secrets.token_hex(8)
    os.environ[INSTANCE_ID_ENV] = new
    if instance_file:
        path = Path(instance_file)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            tmp.write_text(new + "\n", encoding="ascii")
            os.replace(tmp, path)
        except OSError as exc:
            logger.warning("cannot write the instance id to %s (RLVR_INSTANCE_FILE): %s", instance_file, exc)
    return new
