"""The ``docker`` backend: a pool of warm containers of the sandbox image, each running the runner.

Every container runs with no network, a read-only root, a tmpfs work root, a non-root uid of its own,
all capabilities dropped, no-new-privileges, and memory, pids and CPU limits. The container start is
paid once per container, not per job: the runner inside (PID 1) launches each job, and a container in
which a job hit a limit or left a process behind is killed and replaced, never reused.

The host talks to the runner over the container's attached stdin/stdout (``stdin_once``), so a server
that dies closes the stream, the runner exits, and ``auto_remove`` deletes the container.

Build the image with ``docker/build_sandbox.sh`` (offline: debootstrap base + Dockerfile).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import socket
import struct
from typing import Any

from sandbox.base import WORK_ROOT, RunnerPool, Transport, runner_command
from sandbox.local import SHM_MB, sandbox_ceilings
from sandbox.types import Limits, SandboxUnavailable

logger = logging.getLogger("sandbox")

DEFAULT_IMAGE = "rlvr-sandbox:latest"
IMAGE_FIX = "build it with docker/build_sandbox.sh"
_UID_RANGE = range(20_000, 60_000)
_STDOUT, _STDERR = 1, 2
_LINE_LIMIT = 1 << 28


class _AttachTransport(Transport):
    """The runner's stdin/stdout through Docker's attach stream (8-byte frame headers on the way out)."""

    def __init__(self, client: Any, container_id: str, raw: Any, label: str) -> None:
        self._client = client
        self.container_id = container_id
        self._raw = raw  # keeps docker-py's response (and so the socket) alive
        self._label = label
        self._stdout = asyncio.StreamReader(limit=_LINE_LIMIT)
        self._writer: asyncio.StreamWriter | None = None
        self._pump: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        sock: socket.socket = self._raw._sock
        reader, self._writer = await asyncio.open_connection(sock=sock, limit=_LINE_LIMIT)
        self._pump = asyncio.get_running_loop().create_task(self._demux(reader))

    async def _demux(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(8)
                stream, size = header[0], struct.unpack(">I", header[4:])[0]
                payload = await reader.readexactly(size)
                if stream == _STDOUT:
                    self._stdout.feed_data(payload)
                elif stream == _STDERR:
                    logger.warning("sandbox %s: %s", self._label, payload.decode(errors="replace").rstrip())
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._stdout.feed_eof()

    async def send(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise ConnectionError("the container's stream is closed")
        self._writer.write(data)
        await self._writer.drain()

    async def readline(self) -> bytes:
        return await self._stdout.readline()

    async def kill(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._pump is not None:
            self._pump.cancel()
        # auto_remove deletes the container once it is dead.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._client.api.kill, self.container_id)


class DockerSandbox(RunnerPool):
    """Warm containers of the sandbox image.

    Args:
        pool_size: containers kept warm, i.e. jobs run at once.
        image: the sandbox image (Python 3 and g++).
        max_limits: the largest limits any run will ask for; they size each container's memory and pids.
        work_mb: size of the tmpfs that holds the work directories, in MiB.
        cpus: CPU share of one container, in CPUs.
        client: a ``docker.DockerClient``; default: ``docker.from_env()``.
    """

    name = "docker"

    def __init__(
        self,
        pool_size: int = 2,
        *,
        image: str = DEFAULT_IMAGE,
        max_limits: Limits | None = None,
        work_mb: int = 256,
        cpus: float = 1.0,
        client: Any = None,
    ) -> None:
        super().__init__(pool_size)
        self.image = image
        self.max_limits = max_limits or Limits()
        self.work_mb = work_mb
        self.cpus = cpus
        self._client = client
        # Each container gets its own uid: RLIMIT_NPROC counts processes per uid across the whole host.
        self._uids = itertools.cycle(_UID_RANGE)
        self.instance = secrets.token_hex(6)

    async def _check(self) -> None:
        try:
            import docker
            import docker.errors
        except ImportError as exc:  # a core dependency, but say so clearly
            raise SandboxUnavailable("the docker Python package is missing: pip install docker") from exc
        try:
            if self._client is None:
                self._client = await asyncio.to_thread(docker.from_env)
            await asyncio.to_thread(self._client.ping)
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(
                f"cannot reach the Docker engine ({exc}): start dockerd "
                "(dockerd --bridge=none --iptables=false --ip-masq=false) or set DOCKER_HOST"
            ) from exc
        try:
            await asyncio.to_thread(self._client.images.get, self.image)
        except docker.errors.ImageNotFound as exc:
            raise SandboxUnavailable(f"the sandbox image {self.image} is missing: {IMAGE_FIX}") from exc

    def _create(self, label: str) -> tuple[str, Any]:
        """Create, attach and start one container (blocking docker-py calls: run in a thread)."""
        from docker.types import LogConfig

        memory_mb, pids = sandbox_ceilings(self.max_limits, self.work_mb)
        uid = next(self._uids)
        container = self._client.containers.create(
            self.image,
            command=runner_command(),
            user=f"{uid}:{uid}",
            environment={"LANG": "C.UTF-8"},
            working_dir=WORK_ROOT,
            hostname="sandbox",
            network_mode="none",
            read_only=True,
            # /dev/shm is private to the container and emptied with the work dir after each job.
            tmpfs={
                WORK_ROOT: f"size={self.work_mb}m,mode=1777,exec,nosuid,nodev",
                "/dev/shm": f"size={SHM_MB}m,mode=1777,noexec,nosuid,nodev",
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=f"{memory_mb}m",
            memswap_limit=f"{memory_mb}m",
            pids_limit=pids,
            nano_cpus=int(self.cpus * 1e9),
            ipc_mode="none",  # its own IPC namespace; /dev/shm is the tmpfs above
            # stdin_open without detach makes docker-py set StdinOnce: stdin closes when we detach.
            stdin_open=True,
            detach=False,
            auto_remove=True,
            log_config=LogConfig(type="none"),
            labels={"org.rlvr.role": "sandbox", "org.rlvr.pool": self.instance, "org.rlvr.slot": label},
        )
        # Attach before start, so not a byte of the runner's output is missed.
        raw = self._client.api.attach_socket(container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        try:
            container.start()
        except Exception:
            with contextlib.suppress(Exception):
                container.remove(force=True)
            raise
        return container.id, raw

    async def _spawn(self, label: str) -> Transport:
        import docker.errors

        try:
            container_id, raw = await asyncio.to_thread(self._create, label)
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"could not start a sandbox container: {exc}") from exc
        transport = _AttachTransport(self._client, container_id, raw, label)
        try:
            await transport.connect()
        except OSError:
            await transport.kill()
            raise
        return transport

    async def close(self) -> None:
        await super().close()
        if self._client is None:
            return
        # Belt and braces: anything of this pool that is somehow still there.
        with contextlib.suppress(Exception):
            leftovers = await asyncio.to_thread(
                self._client.containers.list, all=True, filters={"label": f"org.rlvr.pool={self.instance}"}
            )
            for container in leftovers:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(container.remove, force=True)
