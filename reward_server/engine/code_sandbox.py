"""The code sandbox's life: built from :class:`Settings`, started and closed by
:func:`~reward_server.engine.runtime.scoring_runtime`.

When it cannot start (no bubblewrap, no Docker engine, no image), the server still serves every other
endpoint; the code endpoints answer 503 with the fix (see :func:`reward_server.deps.get_sandbox`).
"""

from __future__ import annotations

import logging

from reward_server.settings import Settings
from sandbox import DockerSandbox, LocalSandbox, Sandbox, SandboxUnavailable

logger = logging.getLogger("reward_server")


def build_sandbox(settings: Settings) -> Sandbox:
    """The configured backend, sized for the server's maximum limits (not started)."""
    if settings.sandbox_backend == "docker":
        return DockerSandbox(
            settings.sandbox_pool_size,
            image=settings.sandbox_image,
            max_limits=settings.sandbox_max_limits(),
            work_mb=settings.sandbox_work_mb,
            cpus=settings.sandbox_cpus,
        )
    return LocalSandbox(
        settings.sandbox_pool_size,
        max_limits=settings.sandbox_max_limits(),
        bwrap=settings.sandbox_bwrap,
        work_mb=settings.sandbox_work_mb,
        cpus=settings.sandbox_cpus,
    )


async def start_sandbox(settings: Settings) -> tuple[Sandbox | None, str | None]:
    """Start the configured sandbox. Returns ``(sandbox, None)``, or ``(None, why)`` when it cannot run."""
    sandbox = build_sandbox(settings)
    try:
        await sandbox.start()
    except SandboxUnavailable as exc:
        logger.error("code sandbox (%s) unavailable, code endpoints will answer 503: %s", settings.sandbox_backend, exc)
        await sandbox.close()
        return None, str(exc)
    logger.info("code sandbox ready: %s backend, %d warm", settings.sandbox_backend, settings.sandbox_pool_size)
    return sandbox, None
