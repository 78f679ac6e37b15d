"""The in-sandbox runner: one long-lived process per container or bubblewrap sandbox.

It runs INSIDE the sandbox (as PID 1 of its own PID namespace, unprivileged, no network) and launches
each job's processes there, so a job costs one fork+exec instead of a ``docker exec`` (~60 ms) or a new
bubblewrap (~17 ms). Both backends start it the same way (``python3 -c <this file's text> WORK_ROOT``),
so this file must only use the standard library and must not import the project.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout, strictly in turn.
Bytes travel as base64.

* ``{"op": "open", "files": {"main.py": b64}}``: empty the work dir (a tmpfs) and write the files.
* ``{"op": "exec", "argv": [...], "stdin": b64, "limits": {...}, "channel": bool}``: run one process
  in the work dir under the limits; answer its exit, time, peak memory and capped output.
* ``{"op": "close"}``: kill whatever is left and empty the work dir.

Why each guard is here:

* PID 1 of a PID namespace ignores every signal sent from inside the namespace that it has no handler
  for, so a job cannot kill the runner (the signals keep their default action on purpose).
* ``PR_SET_DUMPABLE=0``: jobs run under the runner's uid, and this stops them from ptracing it or
  opening ``/proc/1/{mem,fd,environ}``.
* After every run ``kill(-1, SIGKILL)`` (from PID 1 it reaches every other process of the namespace)
  removes anything the job left behind, and the answer says that something was left, so the host
  replaces this sandbox instead of reusing it.
* Output beyond the limit is read and thrown away: the runner's memory stays bounded and the program
  is not blocked on a full pipe (its time limit still ends it).
"""

import base64
import contextlib
import json
import os
import re
import resource
import select
import shutil
import signal
import sys
import time

VERSION = 1
CHANNEL_FD = 3  # where an exec with "channel": true finds the harness's result pipe
_CHUNK = 1 << 16
_REAP_WAIT_S = 3.0
_SYNTAX_CHECK = "@python-syntax"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


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


def _other_pids():
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _reap_all(deadline):
    """Reap children until none is left or ``deadline`` passes. True when none is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)


def _kill_everything():
    """Kill every other process of the namespace. Returns (something_was_left, all_gone)."""
    _reap_all(time.monotonic())  # zombies of finished children do not count as left behind
    left = bool(_other_pids())
    if left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    gone = _reap_all(time.monotonic() + _REAP_WAIT_S) and not _other_pids()
    return left, gone


def _syntax_check(path):
    """The compile stage of Python, run in a forked child: report a syntax error, run nothing."""
    with open(path, "rb") as f:
        source = f.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
        if isinstance(exc, SyntaxError):
            message = f'  File "{exc.filename}", line {exc.lineno}\n    {(exc.text or "").strip()}\n'
            message += f"{type(exc).__name__}: {exc.msg}\n"
        else:
            message = f"{type(exc).__name__}: {exc}\n"
        os.write(2, message.encode("utf-8", "replace"))
        return 1
    return 0


def _child(argv, cwd, limits, fds, report_w):
    """In the forked child: wire the pipes, apply the limits, exec. Never returns."""
    try:
        stdin_r, stdout_w, stderr_w, channel_w = fds
        os.setpgid(0, 0)
        os.dup2(stdin_r, 0)
        os.dup2(stdout_w, 1)
        os.dup2(stderr_w, 2)
        keep = 3
        if channel_w is not None:
            os.dup2(channel_w, CHANNEL_FD)
            keep = CHANNEL_FD + 1
        os.closerange(keep, report_w)
        os.closerange(report_w + 1, 1 << 16)
        # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        mib = 1024 * 1024
        cpu_s = int(limits["time_s"]) + 2  # a backstop only: the wall-clock limit is enforced by the runner
        nproc = int(limits["max_processes"]) + 1  # + the runner, which runs under the same uid
        for res, value in (
            (resource.RLIMIT_AS, int(limits["memory_mb"]) * mib),
            (resource.RLIMIT_STACK, int(limits["stack_mb"]) * mib),
            (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mib),
            (resource.RLIMIT_NPROC, nproc),
            (resource.RLIMIT_CPU, cpu_s),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 256),
        ):
            resource.setrlimit(res, (value, value))
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")  # if the cgroup runs out, the job dies, not the runner
        except OSError:
            pass
        os.chdir(cwd)
        if argv[0] == _SYNTAX_CHECK:
            os.close(report_w)
            os._exit(_syntax_check(argv[1]))
        env = dict(_ENV, HOME=cwd, TMPDIR=cwd)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(report_w, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace"))
    os._exit(127)


class _Sink:
    """Collects one output pipe: keeps the head (``keep="head"``) or the tail, counts everything."""

    def __init__(self, fd, cap, keep):
        self.fd, self.cap, self.keep = fd, cap, keep
        self.buf = bytearray()
        self.total = 0
        self.open = True

    def read(self):
        try:
            data = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.open = False
            os.close(self.fd)
            return
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

    def __init__(self, root):
        self.root = root
        self.job_dir = None

    def _wipe(self):
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if os.listdir(self.root):
            raise RuntimeError(f"could not empty {self.root}")

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
        left, gone = _kill_everything()
        self.job_dir = None
        self._wipe()
        return {"ok": True, "leftover": left, "clean": gone}

    def exec(self, req):
        if self.job_dir is None:
            raise RuntimeError("exec before open")
        argv = [str(a) for a in req["argv"]]
        limits = req["limits"]
        stdin = base64.b64decode(req.get("stdin", ""))
        cap = int(limits["output_bytes"])
        oom_before = _oom_kills()

        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        channel_r, channel_w = os.pipe() if req.get("channel") else (None, None)
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(argv, self.job_dir, limits, (stdin_r, stdout_w, stderr_w, channel_w), report_w)
        for fd in (stdin_r, stdout_w, stderr_w, channel_w, report_w):
            if fd is not None:
                os.close(fd)
        # EOF on the report pipe means exec succeeded (it is close-on-exec); text means it failed.
        spawn_error = b""
        while True:
            chunk = os.read(report_r, 4096)
            if not chunk:
                break
            spawn_error += chunk
        os.close(report_r)

        sinks = [_Sink(stdout_r, cap, "head"), _Sink(stderr_r, cap, "tail")]
        channel = _Sink(channel_r, cap + _CHUNK, "head") if channel_r is not None else None
        if channel is not None:
            sinks.append(channel)
        for s in sinks:
            os.set_blocking(s.fd, False)
        feeder = _Feeder(stdin_w, stdin)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None

        deadline = start + float(limits["time_s"])
        status: int | None = None
        rusage = None
        timed_out = False
        while status is None:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            readers = [s.fd for s in sinks if s.open]
            if pidfd is not None:
                readers.append(pidfd)
            writers = [feeder.fd] if feeder.open else []
            wait_s = deadline - now if pidfd is not None else min(deadline - now, 0.005)
            ready_r, ready_w, _ = select.select(readers, writers, [], wait_s)
            for s in sinks:
                if s.open and s.fd in ready_r:
                    s.read()
            if ready_w:
                feeder.write()
            if pidfd is None or pidfd in ready_r:
                got, wstatus, ru = os.wait4(pid, os.WNOHANG)
                if got == pid:
                    status, rusage = wstatus, ru
        end = time.monotonic()
        if status is None:  # timed out: kill its group now, the rest of the namespace below
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            _, status, rusage = os.wait4(pid, 0)
        assert status is not None and rusage is not None
        if pidfd is not None:
            os.close(pidfd)
        feeder.close()
        left, gone = _kill_everything()
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

        oom_after = _oom_kills()
        stdout, stderr = sinks[0], sinks[1]
        return {
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "time_s": round(end - start, 6),
            "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 6),
            "maxrss_kb": rusage.ru_maxrss,
            "stdout": _b64(stdout.value()),
            "stdout_bytes": stdout.total,
            "stderr": _b64(stderr.value()),
            "stderr_bytes": stderr.total,
            "channel": _b64(channel.value()) if channel is not None else "",
            "channel_bytes": channel.total if channel is not None else 0,
            "timed_out": timed_out,
            "oom_killed": oom_before >= 0 and oom_after > oom_before,
            "leftover": left,
            "clean": gone,
            "spawn_error": spawn_error.decode("utf-8", "replace") or None,
        }


def _harden():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable = 4
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    # Default actions everywhere: as PID 1 that means "ignored when sent from inside the namespace".
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/work"
    out = sys.stdout.buffer

    def send(obj):
        out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        out.flush()

    try:
        _harden()
        if os.getpid() != 1:
            raise RuntimeError("the runner must be PID 1 of its own PID namespace")
        os.makedirs(root, exist_ok=True)
    except Exception as exc:
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "version": VERSION, "uid": os.getuid(), "oom_visible": _oom_kills() >= 0})
    runner = Runner(root)
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
