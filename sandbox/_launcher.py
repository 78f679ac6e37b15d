"""The launcher: a warm Python interpreter inside the sandbox that starts every process of every job.

Started once per sandbox by the runner as ``python3 -c <this file's text> CTL_FD`` (stdlib only, no
project imports), it waits on a control socket for ``(argv, limits, mode)`` plus the job's pipes, forks,
and in the child applies the limits and then, by ``mode``:

* ``exec``: ``execvpe(argv)`` (the compiler, a compiled program);
* ``python``: runs the script ``argv[0]`` in this already started interpreter, as ``python3 argv...``
  would, without paying the ~10 ms interpreter start again. The child gets a fresh ``__main__``, the
  ``sys.modules`` of a fresh interpreter (what this launcher imported for itself is dropped), the same
  stdio objects a fresh start makes (the launcher never touched them), and the same exit handling
  (``SystemExit`` codes, tracebacks, ``atexit``, thread joins, flushing). One difference remains: objects'
  ``__del__`` methods are not run at exit;
* ``trusted``: as ``python``, for a program of ours (the test harness), which stays non-dumpable like
  the launcher: the candidate's processes run under the same uid, but cannot ptrace it or read its
  memory or file descriptors through ``/proc``. The same script comes with every harness job, so the
  launcher compiles it once and keeps the code (~4 ms a job), and it gives the script
  ``__rlvr_set_dumpable__`` so that a process the script forks for the candidate can be made an ordinary
  one again without importing ctypes (~2 ms);
* ``syntax``: compiles the script and reports a syntax error, running nothing (the compile stage).

It answers ``("forked", pid)`` (before any code of the job runs) then ``("exited", wait_status, utime_s,
stime_s, maxrss_kb, spawn_error)``.

**The kill guard.** A job's main process dying of SIGKILL or SIGTERM is either the program's doing or an outside
kill (the OOM killer of the host or container, an operator's ``kill``), and only the second is an infrastructure
failure (``sandbox_error``, a null reward), never a wrong answer. So that the runner can tell them apart, each job
gets a seccomp filter (:func:`_guard`) under which its processes cannot send SIGKILL or SIGTERM to the job's main
process or to this launcher (``kill``, ``tgkill``, ``rt_sigqueueinfo`` ... to either pid, either group, 0 or -1;
``tkill`` and
``pidfd_send_signal`` with those signals to anyone) nor have the kernel do it for them (``ptrace``, a lower
``RLIMIT_CPU``, a POSIX timer or message-queue notification with a signal of their choosing, ``F_SETSIG``). The
calls fail with EPERM; everything else, signals to the job's own children included, is untouched. The guard also
refuses (EPERM) the calls that make objects outliving the job's processes (``shmget``, ``semget``, ``msgget``,
``mq_open``, ``add_key``, ``request_key``, ``keyctl``), so that a sandbox can be cleaned in place after any job.
Syscalls of a foreign ABI (x32, i386 on x86-64) fail with ENOSYS, so that they cannot go around the filter. The
launcher checks at start that the filter can be installed here (``("ready", pid, guarded)``); where it cannot, a
SIGKILL stays ``runtime_error`` as before. A trusted script gets ``__rlvr_guard__()`` to guard a process it forks for
the candidate (the Python harness's worker) the same way.

The launcher is non-dumpable, so a job (same uid) cannot ptrace it or read its memory to tamper with the
jobs after it; a job can only kill it with another signal or stop it (the program's doing: ``runtime_error``),
and then the runner adopts the job and starts a new launcher. A guarded job cannot send the launcher SIGKILL or
SIGTERM, so a launcher that dies of one of those came from outside (the OOM killer, an operator): the runner
reports it, and the job is ``sandbox_error``, as for the main process.
"""

import sys

# What a fresh `python3 script.py` has loaded. Taken before anything else is imported; a job sees only these.
_BASELINE = frozenset(sys.modules)

import _signal  # noqa: E402  (the C module: `signal` would pull in enum)
import _socket  # noqa: E402
import array  # noqa: E402
import builtins  # noqa: E402
import contextlib  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import marshal  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402

_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CHANNEL_FD = 3
_MAX_FDS = 8
_LIBC = ctypes.CDLL(None, use_errno=True)
_TRUSTED_CODE: dict[bytes, object] = {}  # source -> code of the trusted scripts seen so far
_TRUSTED_CACHE_SIZE = 4
_GUARDED = False  # set at start: can jobs get the kill guard here?
_LAUNCHER = (0, 0)  # set at start: this launcher's pid and process group, which the guard protects too


# ------------------------------------------------------------------------------------------------ the kill guard

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# The syscalls the guard looks at, by architecture (x86-64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64:
# include/uapi/asm-generic/unistd.h).
_SYSCALLS = {
    "x86_64": {
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "pidfd_send_signal": 424, "ptrace": 101, "setrlimit": 160, "prlimit64": 302, "timer_create": 222,
        "fcntl": 72, "mq_notify": 244, "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240, "add_key": 248,
        "request_key": 249, "keyctl": 250,
    },
    "aarch64": {
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "pidfd_send_signal": 424, "ptrace": 117, "setrlimit": 164, "prlimit64": 261, "timer_create": 107,
        "fcntl": 25, "mq_notify": 184, "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "add_key": 217,
        "request_key": 218, "keyctl": 219,
    },
}  # fmt: skip
# Calls that make objects which outlive every process of the job (SysV IPC, POSIX message queues, kernel keys):
# refused, so that killing the job's processes and emptying its scratch leaves the sandbox clean for the next job.
_OUTLIVING = ("shmget", "semget", "msgget", "mq_open", "add_key", "request_key", "keyctl")
_X32_BIT = 0x40000000
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | 1
_RET_ENOSYS = 0x00050000 | 38
_GUARDED_SIGNALS = (9, 15)  # SIGKILL, SIGTERM
_RLIMIT_CPU = 0
_F_SETSIG = 10


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _guard_program(pid, launcher=(0, 0)):
    """The classic-BPF program of the guard for the job whose main process is ``pid``, as (code, jt, jf, k)
    tuples; ``None`` on an architecture it does not know. ``launcher`` is ``(pid, process group)`` of the
    launcher, protected the same way (``(0, 0)``: none). Jumps go to labels, resolved below (BPF jumps forward
    only, so every block that ends in a verdict jumps to the verdicts at the end)."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        return None
    nr = _SYSCALLS[machine]
    arg = lambda i, high=False: 16 + 8 * i + (4 if high else 0)  # noqa: E731  (little-endian seccomp_data)
    me, group = pid & 0xFFFFFFFF, (-pid) & 0xFFFFFFFF
    # The launcher's pid and group, or the job's own again (a repeated test changes nothing) when there is none.
    parent = (launcher[0] or pid) & 0xFFFFFFFF
    parent_group = (-(launcher[1] or pid)) & 0xFFFFFFFF
    ld = lambda offset: ("ld", offset)  # noqa: E731
    jeq = lambda k, yes=None, no=None: ("jeq", k, yes, no)  # noqa: E731  (None: the next instruction)
    ops = [ld(4), jeq(_AUDIT_ARCH[machine], None, "enosys"), ld(0)]
    if machine == "x86_64":
        ops.append(("jge", _X32_BIT, "enosys", None))
    ops += [
        jeq(nr["kill"], "kill"),
        jeq(nr["tgkill"], "tg"),
        jeq(nr["rt_tgsigqueueinfo"], "tg"),
        jeq(nr["rt_sigqueueinfo"], "rtq"),
        jeq(nr["tkill"], "sig1"),
        jeq(nr["pidfd_send_signal"], "sig1"),
        jeq(nr["ptrace"], "deny"),
        jeq(nr["setrlimit"], "setrlimit"),
        jeq(nr["prlimit64"], "prlimit"),
        jeq(nr["timer_create"], "ptr1"),
        jeq(nr["mq_notify"], "ptr1"),
        jeq(nr["fcntl"], "fcntl"),
        *(jeq(nr[name], "deny") for name in _OUTLIVING),
        ("ret", _RET_ALLOW),
        # kill(pid, sig): a guarded signal to the main process, its group, the launcher, its group, our group (0)
        # or everyone (-1)
        ("label", "kill"), ld(arg(1)), jeq(9, "kill_pid"), jeq(15, "kill_pid", "allow"),
        ("label", "kill_pid"), ld(arg(0)), jeq(me, "deny"), jeq(0, "deny"), jeq(group, "deny"),
        jeq(parent, "deny"), jeq(parent_group, "deny"), jeq(0xFFFFFFFF, "deny", "allow"),
        # tgkill(tgid, tid, sig), rt_tgsigqueueinfo(tgid, tid, sig, info): to the main process
        ("label", "tg"), ld(arg(2)), jeq(9, "pid0"), jeq(15, "pid0", "allow"),
        # rt_sigqueueinfo(tgid, sig, info)
        ("label", "rtq"), ld(arg(1)), jeq(9, "pid0"), jeq(15, "pid0", "allow"),
        ("label", "pid0"), ld(arg(0)), jeq(me, "deny"), jeq(parent, "deny", "allow"),
        # tkill(tid, sig), pidfd_send_signal(fd, sig, ...): the target is not known here, so to anyone
        ("label", "sig1"), ld(arg(1)), jeq(9, "deny"), jeq(15, "deny", "allow"),
        # setrlimit(RLIMIT_CPU, ...), prlimit64(pid, RLIMIT_CPU, new != NULL, ...): a CPU limit of one's own
        ("label", "setrlimit"), ld(arg(0)), jeq(_RLIMIT_CPU, "deny", "allow"),
        ("label", "prlimit"), ld(arg(1)), jeq(_RLIMIT_CPU, None, "allow"), ld(arg(2)), jeq(0, None, "deny"),
        ld(arg(2, high=True)), jeq(0, "allow", "deny"),
        # timer_create(clock, sevp != NULL, ...), mq_notify(mq, sevp != NULL): a signal of one's choosing
        ("label", "ptr1"), ld(arg(1)), jeq(0, None, "deny"), ld(arg(1, high=True)), jeq(0, "allow", "deny"),
        # fcntl(fd, F_SETSIG, SIGKILL or SIGTERM)
        ("label", "fcntl"), ld(arg(1)), jeq(_F_SETSIG, None, "allow"), ld(arg(2)), jeq(9, "deny"),
        jeq(15, "deny", "allow"),
        ("label", "allow"), ("ret", _RET_ALLOW),
        ("label", "deny"), ("ret", _RET_EPERM),
        ("label", "enosys"), ("ret", _RET_ENOSYS),
    ]  # fmt: skip
    where, n = {}, 0
    for op in ops:
        if op[0] == "label":
            where[op[1]] = n
        else:
            n += 1
    program, n = [], 0
    for op in ops:
        if op[0] == "label":
            continue
        if op[0] == "ld":
            program.append((0x20, 0, 0, op[1]))  # BPF_LD | BPF_W | BPF_ABS
        elif op[0] == "ret":
            program.append((0x06, 0, 0, op[1]))  # BPF_RET | BPF_K
        else:
            code = 0x15 if op[0] == "jeq" else 0x35  # BPF_JMP | BPF_JEQ / BPF_JGE | BPF_K
            jumps = [0 if label is None else where[label] - n - 1 for label in op[2:]]
            if not all(0 <= j <= 255 for j in jumps):
                raise AssertionError(f"guard program: jump out of range at {n}")
            program.append((code, jumps[0], jumps[1], op[1]))
        n += 1
    return program


def _guard(pid=None):
    """Install the kill guard for the main process ``pid`` (default: this process) on this process and all it
    starts. Returns False where this architecture has none; raises OSError where the kernel refuses it."""
    program = _guard_program(os.getpid() if pid is None else pid, _LAUNCHER)
    if program is None:
        return False
    filters = (_SockFilter * len(program))(*program)
    fprog = _SockFprog(len(program), filters)
    if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if _LIBC.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True


def _guard_works():
    """Can a job be guarded here? Tried in a child, so that the launcher itself stays unfiltered."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if _guard() else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _receive(ctl):
    """One request and the file descriptors that came with it; ``None`` when the runner is gone."""
    try:
        data, ancdata, _, _ = ctl.recvmsg(1 << 20, _socket.CMSG_SPACE(_MAX_FDS * 4))
    except OSError:
        return None
    if not data:
        return None
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return marshal.loads(data), list(fds)


def _apply_limits(limits):
    mib = 1024 * 1024
    for res, value in (
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mib),
        (resource.RLIMIT_STACK, int(limits["stack_mb"]) * mib),
        (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mib),
        # + the runner and this launcher, which run under the same uid
        (resource.RLIMIT_NPROC, int(limits["max_processes"]) + 2),
        # A backstop only: the runner enforces the wall-clock limit.
        (resource.RLIMIT_CPU, int(limits["time_s"]) + 2),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, 256),
    ):
        resource.setrlimit(res, (value, value))


def _syntax_check(path):
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


def _exit_code(exc):
    """The exit status CPython gives a SystemExit (see Py_HandleSystemExit)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1


def _set_dumpable(on):
    """For a trusted script: make this process (a fork of it) dumpable again, or not."""
    _LIBC.prctl(_PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0)


def _trusted_code(path):
    """The compiled code of a trusted script, compiled here in the launcher once per distinct source."""
    with open(path, "rb") as f:
        source = f.read()
    code = _TRUSTED_CODE.get(source)
    if code is None:
        if len(_TRUSTED_CODE) >= _TRUSTED_CACHE_SIZE:
            _TRUSTED_CODE.clear()
        code = _TRUSTED_CODE[source] = compile(source, os.path.abspath(path), "exec", dont_inherit=True)
    return code


def _run_python(argv, compiled=None):
    """Run ``argv[0]`` as ``__main__`` with ``sys.argv = argv``, then exit as the interpreter would."""
    script = os.path.abspath(argv[0])  # a script's __file__ and traceback paths are absolute since 3.9
    for name in [n for n in sys.modules if n not in _BASELINE]:
        del sys.modules[name]
    main = type(sys)("__main__")
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", script)
    main.__dict__.update(__file__=script, __builtins__=builtins, __cached__=None, __loader__=loader, __annotations__={})
    if compiled is not None:  # a trusted script, compiled by the launcher
        main.__dict__["__rlvr_set_dumpable__"] = _set_dumpable
        if _GUARDED:
            main.__dict__["__rlvr_guard__"] = _guard
    sys.modules["__main__"] = main
    sys.argv = list(argv)
    sys.orig_argv = ["python3", *argv]
    sys.path[0] = os.path.dirname(script)
    code = 0
    try:
        if compiled is None:
            with open(script, "rb") as f:
                source = f.read()
            compiled = compile(source, script, "exec", dont_inherit=True)
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        tb = exc.__traceback__
        exc.__traceback__ = tb.tb_next if tb is not None else None  # hide this frame, as the interpreter does
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    threading = sys.modules.get("threading")
    if threading is not None:
        with contextlib.suppress(BaseException):
            threading._shutdown()  # join non-daemon threads, as interpreter shutdown does
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = 120  # CPython's status when flushing the standard streams fails
    os._exit(code)


def _child(ctl, fds, argv, limits, mode, report_w, gate_r, compiled, guarded):
    """In the forked child: wire the pipes, apply the limits, wait for the go, then exec or run."""
    try:
        ctl.close()
        os.setpgid(0, 0)
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        os.dup2(fds[2], 2)
        keep = 3
        if len(fds) > 3:
            os.dup2(fds[3], _CHANNEL_FD)
            keep = _CHANNEL_FD + 1
        low, high = sorted((report_w, gate_r))
        os.closerange(keep, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
        _apply_limits(limits)
        if guarded:
            _guard()
        # No code of the job runs before the runner knows its pid: a job that kills the launcher at once
        # is then still one the runner can adopt.
        os.read(gate_r, 1)
        os.close(gate_r)
        if mode == "exec":
            # Python ignores SIGPIPE and SIGXFSZ; an ignored signal would stay ignored across exec.
            for sig in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT):
                _signal.signal(sig, _signal.SIG_DFL)
            os.execvpe(argv[0], argv, os.environ)
        os.close(report_w)
        if mode == "syntax":
            os._exit(_syntax_check(argv[0]))
        if mode == "python":
            _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # a job is an ordinary process again
        _run_python(argv, compiled)
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(report_w, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace"))
    os._exit(127)


def _prefer_for_oom_kill():
    """Make this process and every job forked from it the OOM killer's first choice (oom_score_adj 1000).

    Where sandboxes share one memory ceiling (the compose container: no cgroup per sandbox), a job's
    processes that together pass it must be what dies, not the server beside them (the largest process).
    Done before the launcher turns non-dumpable: a non-dumpable process's /proc/self files belong to root,
    so no fork of it could write the value, and jobs inherit it across fork and exec instead.
    """
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)
    except OSError as exc:  # raising one's own score needs no privilege: this is not expected to fail
        os.write(2, f"launcher: cannot set oom_score_adj: {exc}\n".encode())


def main():
    ctl = _socket.socket(fileno=int(sys.argv[1]))
    _prefer_for_oom_kill()
    if _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    # Move everything alive now out of the collector's sight: a job's collections then do not touch (and
    # so copy-on-write) the launcher's objects. Halves the page faults of a small job.
    global _GUARDED, _LAUNCHER
    _LAUNCHER = (os.getpid(), os.getpgid(0))
    _GUARDED = _guard_works()
    gc.collect()
    gc.freeze()
    ctl.send(marshal.dumps(("ready", os.getpid(), _GUARDED)))
    while True:
        request = _receive(ctl)
        if request is None:
            os._exit(0)
        (argv, limits, mode), fds = request
        compiled = None
        if mode == "trusted":
            # On failure the child reads and compiles the script itself, and fails as python3 would.
            with contextlib.suppress(OSError, SyntaxError, ValueError):
                compiled = _trusted_code(argv[0])
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        gate_r, gate_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            _child(ctl, fds, argv, limits, mode, report_w, gate_r, compiled, _GUARDED and mode != "syntax")
        for fd in (report_w, gate_r, *fds):
            os.close(fd)
        ctl.send(marshal.dumps(("forked", pid)))
        os.write(gate_w, b"g")
        os.close(gate_w)
        _, status, usage = os.wait4(pid, 0)
        # Text on the report pipe (close-on-exec, closed before a script runs) means the start failed.
        os.set_blocking(report_r, False)
        try:
            spawn_error = os.read(report_r, 4096).decode("utf-8", "replace") or None
        except BlockingIOError:
            spawn_error = None
        os.close(report_r)
        ctl.send(marshal.dumps(("exited", status, usage.ru_utime, usage.ru_stime, usage.ru_maxrss, spawn_error)))


if __name__ == "__main__":
    main()
