"""The in-sandbox runner: one long-lived process per container or bubblewrap sandbox.

It runs INSIDE the sandbox (as PID 1 of its own PID namespace, unprivileged, no network) and runs
each job's processes there, so a job costs one fork instead of a ``docker exec`` (~60 ms) or a new
bubblewrap (~17 ms). Processes are started by the launcher (``_launcher.py``), a warm interpreter this
runner keeps beside it, so a Python job does not even pay an interpreter start. Both backends start the
runner the same way (``python3 -I -S -c <this file's text> WORK_ROOT <the launcher's text>``), so this file
must only use the standard library and must not import the project.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout, strictly in turn.
Bytes travel as base64.

* ``{"op": "open", "files": {"main.py": b64}}``: empty the work dir and ``/dev/shm`` (both tmpfs) and
  write the files.
* ``{"op": "exec", "argv": [...], "stdin": b64, "limits": {...}, "channel": bool}``: run one process
  in the work dir under the limits; answer its exit, time, peak memory and capped output. ``argv[0]``
  may be ``@python`` (run the script ``argv[1]`` in a warm interpreter), ``@python-trusted`` (the same,
  for our own test harness, which stays non-dumpable) or ``@python-syntax`` (compile it and report
  syntax errors only).
* ``{"op": "close"}``: kill whatever is left, empty the work dir and ``/dev/shm``, remove any SysV IPC object
  (shared memory, semaphores, message queues of the sandbox's own IPC namespace), and answer whether all of it
  is provably gone (``clean``). A clean sandbox serves the next job; only one that cannot be proven clean is
  replaced.

Why each guard is here:

* PID 1 of a PID namespace ignores every signal sent from inside the namespace that it has no handler
  for, so a job cannot kill the runner (the signals keep their default action on purpose).
* ``PR_SET_DUMPABLE=0``: jobs run under the runner's uid, and this stops them from ptracing it or
  opening ``/proc/1/{mem,fd,environ}``.
* After every run, any process other than the runner and the launcher means the job left something
  behind: ``kill(-1, SIGKILL)`` (from PID 1 it reaches every other process of the namespace) removes it,
  and the answer says so. The host then keeps the sandbox only when ``close`` proves it clean (no process
  but the runner, empty work dir and ``/dev/shm``, no SysV IPC object), and replaces it otherwise.
* Output beyond the limit is read and thrown away: the runner's memory stays bounded, and a program
  that writes too much and then exits ends as output_limit (one that never stops ends at its time
  limit). Output pipes hold up to 1 MiB; within the cap they are read as data comes, past it a pipe the
  program keeps full is read at most every ``_DRAIN_PAUSE_S``, a whole pipe at a time. Woken for every
  write instead, the runner spent as much CPU as a flooding program (a wake-up costs more than a write),
  and on the sandbox's one CPU the two took turns: the program's waits for the runner counted as
  waiting for a CPU, and a flood ran about twice its time limit. Now the runner's share is small, and
  a program blocked on its own full pipe neither uses nor waits for a CPU, so that time counts against
  ``time_s + idle_grace_s``.

Time limits (``limits``: ``time_s``, ``idle_grace_s``, ``wall_s``): ``time_s`` is CPU time, what judges
count, summed over the job's processes, so a correct program that is kept waiting for a CPU by other
work on the host does not time out. A run also ends when its wall-clock time less the time its threads
spent waiting on a run queue passes ``time_s + idle_grace_s``: a program that sleeps, blocks or stops
itself uses no CPU but cannot outlive that. ``wall_s`` is the ceiling on plain wall-clock time whatever
the load. CPU time and run-queue delay are sampled from ``/proc/PID/stat`` and ``/proc/PID/task/TID/
schedstat`` (where the kernel keeps scheduler statistics; without them the second rule is plain wall
time).
"""

import base64
import contextlib
import fcntl
import json
import marshal
import os
import re
import select
import shutil
import signal
import socket
import sys
import time

VERSION = 1
CHANNEL_FD = 3  # where an exec with "channel": true finds the harness's result pipe
_CHUNK = 1 << 16
_PIPE_BYTES = 1 << 20  # the unprivileged maximum (/proc/sys/fs/pipe-max-size) on stock kernels
_DRAIN_PAUSE_S = 0.005
_REAP_WAIT_S = 3.0
_TARGETED_S = 0.1  # how long a pid-by-pid kill of what a job left may take before kill(-1)
_MODES = {"@python": "python", "@python-trusted": "trusted", "@python-syntax": "syntax"}
_SHM = "/dev/shm"
_LAUNCH_TIMEOUT_S = 10.0
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_SAMPLE_MIN_S = 0.005
_SAMPLE_MAX_S = 0.05
_CPUS = max(1, len(os.sched_getaffinity(0)))


def _b64(data):
    return base64.b64encode(bytes(data)).decode("ascii")


def _oom_kills():
    """The cgroup's OOM-kill counter (v1 or v2), or -1 where the sandbox cannot see its cgroup."""
    for path in _OOM_FILES:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        match = re.search(r"^oom_kill (\d+)$", text, re.M)
        if match:
            return int(match.group(1))
    return -1


def _host_oom_kills():
    """The kernel's count of OOM kills on the whole host (``/proc/vmstat``, which no namespace hides), or -1."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


def _other_pids(spare):
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me and int(p) not in spare]


_SYSVIPC = ("/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg")
_IPC_RMID = 0


def _sysvipc_ids():
    """The SysV IPC objects of this IPC namespace, as (kind, id) pairs; every backend unshares the namespace, so
    they can only be a job's. ``None`` where ``/proc/sysvipc`` cannot be read (then nothing can be proven)."""
    found = []
    for path in _SYSVIPC:
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            return None
        kind = path.rsplit("/", 1)[1]
        for line in lines:
            fields = line.split()
            if len(fields) > 1:
                found.append((kind, int(fields[1])))
    return found


def _remove_sysvipc():
    """Remove every SysV IPC object a job left (they outlive processes). Returns whether none is left."""
    ids = _sysvipc_ids()
    if ids is None:
        return False
    if ids:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        for kind, ident in ids:
            if kind == "shm":
                libc.shmctl(ident, _IPC_RMID, None)
            elif kind == "sem":
                libc.semctl(ident, 0, _IPC_RMID)
            else:
                libc.msgctl(ident, _IPC_RMID, None)
    # A segment still attached somewhere is only marked; with every process gone none is.
    return _sysvipc_ids() == []


def _reap():
    """Reap every finished child. Returns the pids reaped."""
    reaped: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append(pid)


def _stat_fields(pid):
    """The fields of ``/proc/PID/stat`` after ``(comm)`` (which may hold spaces): state first; ``None`` if gone."""
    stat = _read_proc(f"/proc/{pid}/stat")
    return None if stat is None else stat.rpartition(b")")[2].split()


def _read_proc(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _run_delay(path):
    """A thread's run-queue delay so far (ns) from its schedstat file; 0 where there is none."""
    sched = _read_proc(path)
    return int(sched.split()[1]) if sched else 0


class _Usage:
    """CPU time and run-queue delay of one job's processes, sampled from /proc while it runs.

    ``cpu_s`` sums utime + stime of every live process of the job plus what its reaped children used
    (never decreasing, so a process that exits does not give its time back); the runner and the launcher
    are not counted. ``wait_s`` adds up, sample by sample, the largest growth of any one thread's
    run-queue delay: the time the job was ready to run but held back by other work. The runner's own
    delay counts too, but only before the wake-ups that moved the job's output or input (``io_woke``):
    the job may have been blocked on a full pipe that the runner could not drain while it waited.
    """

    def __init__(self, spare):
        self.spare = spare
        self.cpu_s = 0.0
        self.wait_s = 0.0
        self.rss_peak_kb = 0  # the largest sum of the job's processes' resident memory seen
        self._delays = {}
        self._runner_delay = _run_delay("/proc/self/schedstat")
        self._runner_io_ns = 0

    def woke(self, for_io):
        """After each wake-up of the runner: count its run-queue delay if it woke to move the job's I/O."""
        delay = _run_delay("/proc/self/schedstat")
        if for_io:
            self._runner_io_ns += delay - self._runner_delay
        self._runner_delay = delay

    def sample(self):
        ticks = 0
        rss_pages = 0
        step, self._runner_io_ns = self._runner_io_ns, 0
        delays = {}
        for pid in _other_pids(self.spare):
            fields = _stat_fields(pid)
            if fields is None:
                continue
            ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            rss_pages += int(fields[21])  # rss
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                delay = _run_delay(f"/proc/{pid}/task/{tid}/schedstat")
                step = max(step, delay - self._delays.get(tid, 0))
                delays[tid] = delay
        self._delays = delays
        self.rss_peak_kb = max(self.rss_peak_kb, rss_pages * _PAGE_KB)
        self.cpu_s = max(self.cpu_s, ticks * _TICK_S)
        self.wait_s += step / 1e9


class _Launcher:
    """The warm interpreter that starts jobs' processes (see ``_launcher.py``), over a seqpacket socket."""

    def __init__(self, source, root):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        devnull = os.open(os.devnull, os.O_RDWR)
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)  # stdio of every Python job is set up as if on pipes: not a tty
                os.dup2(theirs.fileno(), 3)
                os.closerange(4, 1 << 16)
                os.chdir(root)
                os.execvpe("python3", ["python3", "-c", source, "3"], dict(_ENV, HOME=root, TMPDIR=root))
            finally:
                os._exit(127)
        os.close(devnull)
        theirs.close()
        self.pid = pid
        ready = self.receive(_LAUNCH_TIMEOUT_S)
        if ready[0] != "ready" or ready[1] != pid:
            raise RuntimeError(f"the launcher did not start: {ready[0]!r}")
        # Whether its jobs run under the kill guard (see _launcher.py): then a SIGKILL or SIGTERM of a job's
        # main process that this runner did not send came from outside the sandbox.
        self.guarded = bool(ready[2]) if len(ready) > 2 else False

    def send(self, request, fds):
        socket.send_fds(self.sock, [marshal.dumps(request)], fds)

    def receive(self, timeout_s):
        """The launcher's next message; raises EOFError when it is gone, TimeoutError when it is silent."""
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            raise TimeoutError("the launcher does not answer")
        data = self.sock.recv(4096)
        if not data:
            raise EOFError("the launcher exited")
        return marshal.loads(data)

    def close(self):
        self.sock.close()


class _Sink:
    """Collects one output pipe: keeps the head (``keep="head"``) or the tail, counts everything.

    ``paused_until``: past the cap (the run is over its output limit whatever it does next), a pipe that
    held a full chunk or more when read is not read again before then, so a program that keeps writing
    fills the whole pipe between reads (see the module's docstring). Output within the cap is read as
    it comes.
    """

    def __init__(self, fd, cap, keep):
        self.fd, self.cap, self.keep = fd, cap, keep
        self.buf = bytearray()
        self.total = 0
        self.open = True
        self.paused_until = 0.0
        with contextlib.suppress(OSError, AttributeError):  # a smaller pipe works too, with more wake-ups
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)

    def read(self, now=None):
        """Read what the pipe holds (up to its size); with ``now``, pause the pipe if it was full."""
        got = 0
        while self.open and got < _PIPE_BYTES:
            try:
                data = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.open = False
                os.close(self.fd)
                break
            got += len(data)
            self._keep(data)
            if len(data) < _CHUNK:
                break
        if now is not None and got >= _CHUNK and self.total > self.cap:
            self.paused_until = now + _DRAIN_PAUSE_S

    def _keep(self, data):
        self.total += len(data)
        if self.keep == "head":
            room = self.cap - len(self.buf)
            if room > 0:
                self.buf += data[:room]
        else:
            self.buf += data
            if len(self.buf) > 2 * self.cap:
                del self.buf[: len(self.buf) - self.cap]

    def value(self):
        return bytes(self.buf[-self.cap :]) if self.keep == "tail" else bytes(self.buf)


class _Feeder:
    """Writes a job's stdin without blocking; stops quietly when the program no longer reads it."""

    def __init__(self, fd, data):
        self.fd = fd
        self.pending = memoryview(data)
        self.open = True
        if self.pending:
            os.set_blocking(fd, False)
        else:
            self.close()

    def write(self):
        try:
            self.pending = self.pending[os.write(self.fd, self.pending[:_CHUNK]) :]
        except BlockingIOError:
            return
        except OSError:  # the program closed its stdin or exited: the rest is not wanted
            self.pending = self.pending[:0]
        if not self.pending:
            self.close()

    def close(self):
        if self.open:
            os.close(self.fd)
            self.open = False


class Runner:
    """Jobs run one at a time in the work root itself (a tmpfs), which is emptied before and after each:
    everything outside it is read-only, so nothing a job writes can outlive it."""

    def __init__(self, root, launcher_source):
        self.root = root
        self.job_dir = None
        self.launcher_source = launcher_source
        self.launcher = None

    def _spare(self):
        return (self.launcher.pid,) if self.launcher is not None else ()

    def _kill_everything(self):
        """Kill every process of the namespace but this runner and the launcher.

        Returns (something_was_left, all_gone). What was left is first killed pid by pid, sparing the launcher
        (a daemon or a stray child: the next job then needs no new launcher); only if processes are still there
        after ``_TARGETED_S`` (a fork bomb outruns a pid-by-pid kill) does it kill the launcher too with
        ``kill(-1)``, which spares no one and cannot be outrun; a new launcher starts on demand.
        """
        self._note_reaped(_reap())  # zombies of finished children do not count as left behind
        left = bool(_other_pids(self._spare()))
        if left and not self._kill_each(time.monotonic() + _TARGETED_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            self._drop_launcher()
        deadline = time.monotonic() + _REAP_WAIT_S
        while True:
            self._note_reaped(_reap())
            if not _other_pids(self._spare()):
                return left, True
            if time.monotonic() > deadline:
                return left, False
            time.sleep(0.002)

    def _kill_each(self, deadline):
        """SIGKILL every process but the spared ones, again and again until none is left (True) or
        ``deadline`` passes (False)."""
        while True:
            self._note_reaped(_reap())
            others = _other_pids(self._spare())
            if not others:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in others:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    def _note_reaped(self, pids):
        if self.launcher is not None and self.launcher.pid in pids:
            self._drop_launcher()

    def _drop_launcher(self):
        if self.launcher is not None:
            self.launcher.close()
            self.launcher = None

    def _get_launcher(self):
        if self.launcher is None:
            self.launcher = _Launcher(self.launcher_source, self.root)
        return self.launcher

    def _wipe(self):
        """Empty the work dir and /dev/shm (POSIX semaphores and shared memory live there): the two
        places a job can write, so nothing a job writes outlives it."""
        for directory in (self.root, _SHM):
            if not os.path.isdir(directory):
                continue
            for name in os.listdir(directory):
                path = os.path.join(directory, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            if os.listdir(directory):
                raise RuntimeError(f"could not empty {directory}")

    def open(self, req):
        self._wipe()
        self.job_dir = self.root
        for name, data in req.get("files", {}).items():
            parts = name.split("/")
            if not name or name.startswith("/") or ".." in parts or "" in parts:
                raise ValueError(f"bad file name {name!r}")
            full = os.path.join(self.root, name)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(base64.b64decode(data))
        return {"ok": True}

    def close(self, req=None):
        left, gone = self._kill_everything()
        self.job_dir = None
        self._wipe()
        ipc_gone = _remove_sysvipc()
        return {"ok": True, "leftover": left, "clean": gone and ipc_gone, "ipc_clean": ipc_gone}

    def exec(self, req):
        if self.job_dir is None:
            raise RuntimeError("exec before open")
        argv = [str(a) for a in req["argv"]]
        mode = _MODES.get(argv[0], "exec")
        if mode != "exec":
            argv = argv[1:]
        limits = req["limits"]
        stdin = base64.b64decode(req.get("stdin", ""))
        cap = int(limits["output_bytes"])
        launcher = self._get_launcher()
        guarded = launcher.guarded
        oom_before, host_oom_before = _oom_kills(), _host_oom_kills()

        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        child_fds = [stdin_r, stdout_w, stderr_w]
        channel = None
        if req.get("channel"):
            channel_r, channel_w = os.pipe()
            child_fds.append(channel_w)
            channel = _Sink(channel_r, cap + _CHUNK, "head")
        start = time.monotonic()
        launcher.send((argv, limits, mode), child_fds)
        for fd in child_fds:
            os.close(fd)
        kind, pid = launcher.receive(_LAUNCH_TIMEOUT_S)
        assert kind == "forked", kind

        sinks = [_Sink(stdout_r, cap, "head"), _Sink(stderr_r, cap, "tail")]
        if channel is not None:
            sinks.append(channel)
        for s in sinks:
            os.set_blocking(s.fd, False)
        feeder = _Feeder(stdin_w, stdin)

        cpu_limit = float(limits["time_s"])
        active_limit = cpu_limit + float(limits.get("idle_grace_s", 0.5))
        ceiling = start + float(limits.get("wall_s", active_limit))
        usage = _Usage(self._spare())
        next_sample = start + min(_SAMPLE_MAX_S, cpu_limit / _CPUS)
        exited = None  # (wait status, utime, stime, maxrss, spawn error) once the launcher reports the exit
        adopted = False  # the launcher died (the job killed it): the job is now our child to wait for
        launcher_signal = None  # the signal the launcher died of, when this runner did not send it
        timed_out = None  # why the run was ended: "cpu", "idle" or "wall"
        while exited is None:
            now = time.monotonic()
            if now >= next_sample:
                if not adopted and _stopped(launcher.pid):
                    # The job stopped the launcher (same uid; only the runner, PID 1, is out of its reach), which
                    # then reports nothing. Kill it: the job becomes this runner's child, as when a job kills it.
                    with contextlib.suppress(OSError):
                        os.kill(launcher.pid, signal.SIGKILL)
                    adopted = True
                    self._drop_launcher()
                usage.sample()
                active_s = now - start - usage.wait_s
                if usage.cpu_s >= cpu_limit:
                    timed_out = "cpu"
                elif active_s >= active_limit:
                    timed_out = "idle"
                elif now >= ceiling:
                    timed_out = "wall"
                if timed_out:
                    break
                # CPU time can grow by up to one second per second per core.
                left_s = min((cpu_limit - usage.cpu_s) / _CPUS, active_limit - active_s, ceiling - now)
                next_sample = now + min(max(left_s, _SAMPLE_MIN_S), _SAMPLE_MAX_S)
            readers = [s.fd for s in sinks if s.open and s.paused_until <= now]
            if not adopted:
                readers.append(launcher.sock.fileno())
            writers = [feeder.fd] if feeder.open else []
            wait_s = max(next_sample - now, 0.0)
            paused = [s.paused_until - now for s in sinks if s.open and s.paused_until > now]
            if paused:
                wait_s = min(wait_s, *paused)
            if adopted:
                wait_s = min(wait_s, 0.005)
            ready_r, ready_w, _ = select.select(readers, writers, [], wait_s)
            usage.woke(bool(ready_w) or any(s.fd in ready_r for s in sinks))
            woke_at = time.monotonic()
            for s in sinks:
                if s.open and s.fd in ready_r:
                    s.read(woke_at)
            if ready_w:
                feeder.write()
            if adopted:
                exited = _wait_adopted(pid, block=False)
            elif launcher.sock.fileno() in ready_r:
                try:
                    exited = launcher.receive(0)[1:]
                except EOFError:
                    adopted = True
                    launcher_signal = _death_signal(launcher.pid)
                    self._drop_launcher()
        end = time.monotonic()
        if exited is None:  # timed out: kill its group now, the rest of the namespace below
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            if not adopted:
                try:
                    exited = launcher.receive(_REAP_WAIT_S)[1:]
                except (EOFError, TimeoutError):
                    # A silent launcher may be stopped, its job then its zombie: killing it hands the job to
                    # this runner, which reaps it below.
                    with contextlib.suppress(OSError):
                        os.kill(launcher.pid, signal.SIGKILL)
                    adopted = True
                    self._drop_launcher()
            if adopted:
                exited = _wait_adopted(pid, block=True)
        feeder.close()
        left, gone = self._kill_everything()
        # Every writer is dead now, so what is still in the pipes ends in EOF.
        drain_until = time.monotonic() + 2.0
        while any(s.open for s in sinks) and time.monotonic() < drain_until:
            ready_r, _, _ = select.select([s.fd for s in sinks if s.open], [], [], 0.1)
            for s in sinks:
                if s.open and s.fd in ready_r:
                    s.read()
        for s in sinks:
            if s.open:
                os.close(s.fd)
                s.open = False

        assert exited is not None
        status, utime, stime, maxrss, spawn_error = exited
        oom_after, host_oom_after = _oom_kills(), _host_oom_kills()
        stdout, stderr = sinks[0], sinks[1]
        return {
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "time_s": round(end - start, 6),
            "cpu_s": round(max(utime + stime, usage.cpu_s), 6),
            "cpu_wait_s": round(usage.wait_s, 6),
            "maxrss_kb": maxrss,
            "stdout": _b64(stdout.value()),
            "stdout_bytes": stdout.total,
            "stderr": _b64(stderr.value()),
            "stderr_bytes": stderr.total,
            "channel": _b64(channel.value()) if channel is not None else "",
            "channel_bytes": channel.total if channel is not None else 0,
            "timed_out": timed_out,
            "oom_killed": oom_before >= 0 and oom_after > oom_before,
            # The OOM killer acted somewhere on the host during the run (maybe on this job, beyond its cgroup).
            "host_oom": host_oom_before >= 0 and host_oom_after > host_oom_before,
            "rss_peak_kb": usage.rss_peak_kb,
            "guarded": guarded,
            # A job that killed the launcher fails (its own exit status may be lost with the launcher),
            # and its sandbox is replaced as if it had left a process behind.
            "launcher_killed": adopted,
            # ... of SIGKILL or SIGTERM, which a guarded job cannot send it: from outside (see _launcher.py).
            "launcher_killed_outside": guarded and launcher_signal in (signal.SIGKILL, signal.SIGTERM),
            "leftover": left or adopted,
            "clean": gone,
            "spawn_error": spawn_error,
        }


def _stopped(pid):
    """Is ``pid`` stopped (SIGSTOP, SIGTSTP) or traced?"""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] in (b"T", b"t")


def _death_signal(pid, timeout_s=1.0):
    """The signal that ended this runner's child ``pid``, or ``None`` (it exited, or another reaper took it).
    Either way ``pid`` is gone on return, reaped, and its children are this runner's.

    A child still there after ``timeout_s`` is killed first, then reaped: the launcher closes its socket on
    its way out (a job's SIGINT), and a job that then stops it (SIGSTOP) would leave it, and its own
    exit, hanging for good. The kill is this runner's doing, so ``None`` (not ``SIGKILL``) is returned.
    """
    deadline = time.monotonic() + timeout_s
    killed = False
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got == pid:
            return None if killed or not os.WIFSIGNALED(status) else os.WTERMSIG(status)
        if not killed and time.monotonic() > deadline:
            # Not reaped, so the pid is still this child's: the kill cannot reach another process.
            os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.001)


def _wait_adopted(pid, block):
    """Exit of a job whose launcher died (so it is the runner's child now), or None while it runs."""
    while True:
        try:
            got, status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            if not os.path.exists(f"/proc/{pid}"):  # reaped by the dying launcher: its status is lost
                return (int(signal.SIGKILL), 0.0, 0.0, 0, None)
            got = 0  # the launcher's exit has not handed it to us yet
        if got == pid:
            return (status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss, None)
        if not block:
            return None
        time.sleep(0.001)


def _harden():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable = 4
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    # Default actions everywhere: as PID 1 that means "ignored when sent from inside the namespace".
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main():
    root, launcher_source = sys.argv[1], sys.argv[2]
    out = sys.stdout.buffer

    def send(obj):
        out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        out.flush()

    runner = Runner(root, launcher_source)
    try:
        _harden()
        if os.getpid() != 1:
            raise RuntimeError("the runner must be PID 1 of its own PID namespace")
        os.makedirs(root, exist_ok=True)
        runner._get_launcher()  # warm before the first job
    except Exception as exc:
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "version": VERSION, "uid": os.getuid(), "oom_visible": _oom_kills() >= 0})
    handlers = {"open": runner.open, "exec": runner.exec, "close": runner.close}
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            answer = handlers[req["op"]](req)
        except Exception as exc:  # a bad request must not kill the runner; the host sees the error
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        send(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
