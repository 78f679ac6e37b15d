"""The Python test harness: runs INSIDE the sandbox as the job's main program (stdlib only), as two processes.

``harness.py`` is started non-dumpable (``languages.PYTHON_TRUSTED``). Before it reads anything it forks
the *worker*; then it reads from stdin a nonce line and the spec (``marshal``: mode, tests, time limit)
and becomes the *checker*:

* The worker loads the candidate's ``solution.py`` and then only does what the checker asks over a pair
  of pipes: look names up, call a function, get or set an attribute or an item, iterate, take a length.
  It answers with plain values (``None``, bools, ints, floats, complex, str, bytes, and lists, tuples,
  dicts, sets of them), copied out of builtin types and their subclasses by the builtin types' own
  methods (a subclass's overrides never run), and values of the standard library's value types
  (``Fraction``, ``Decimal``, dates, ``deque``, ``Counter``, namedtuples ...), which the checker rebuilds
  from plain data with its own classes. Anything else stays in the worker, and the checker gets a
  reference to it.
* The checker runs the test code (HumanEval's ``check``, MBPP's asserts, the calls of ``fn_name``) with
  the candidate's names bound to references into the worker. Every comparison the tests make therefore
  runs here, on values of exact builtin types: an object whose ``__eq__`` always returns True never gets
  here, and no method of the candidate's classes ever sees an expected value. A reference equals only
  itself, and has no order or arithmetic. The checker writes each case's verdict to the result channel
  (fd 3), with the nonce.

The worker was forked before the spec was read, so it never held the tests, the expected values or the
nonce; it drops the channel and stdin before it runs anything; the checker is non-dumpable, so the
worker (same uid) can neither ptrace it nor read its memory or file descriptors; and the checker never
imports from the work directory, where the program can write. A program cannot forge a verdict: all it
can do is answer with values, kill the checker (its cases then fail) or die.

Time (per case, like ``Limits.time_s``): a case may use ``time_s`` of the worker's CPU time, and ``time_s
+ idle_grace_s`` of wall-clock time less the worker's run-queue delay. Past that the checker interrupts
the program (SIGALRM, which raises ``_CaseTimeout`` in it) and, if it does not give control back within
``_KILL_GRACE_S``, kills the worker: that case and every later one time out.

Only modules that the interpreter has loaded at start-up or that are small extensions are imported (no
``json``, ``ast``, ``traceback``, ``contextlib``: they cost milliseconds per run, as much as a typical test).
"""

# ruff: noqa: SIM105  (contextlib.suppress would cost an import per run)

import _signal
import builtins
import marshal
import os
import select
import sys
import time

_CHANNEL_FD = 3
_SCOPE_NAME = "solution"  # __name__ of the test code's scope (and of the program's namespace)
_BIG_INT_BITS = 12_000  # above ~3600 digits, int -> str hits CPython's 4300-digit limit; send hex instead
_MAX_DEPTH = 100  # deeper containers cross as references
_KILL_GRACE_S = 0.3
_ALARM_REPEAT_S = 0.05
_FIRST_POLL_S = 0.02
_MAX_POLL_S = 0.05
_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(0x20)}, **{c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)}}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t"})
_CATCHABLE = (
    "SIGINT",
    "SIGTERM",
    "SIGHUP",
    "SIGQUIT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
)


_BUILTIN_KINDS = (type, type(len))


class _CaseTimeout(BaseException):
    """The case ran out of time (a BaseException, so ``except Exception`` in test or program misses it)."""

    status = "timeout"


class _HostOverloaded(_CaseTimeout):
    """The case reached the wall-clock ceiling within its CPU time and its time off the CPU: the host kept the
    program waiting for a CPU, so its verdict is unknown (ours to answer for, never the program's timeout)."""

    status = "sandbox_error"


class _WorkerGone(BaseException):
    """The worker died or was killed: ``status`` and ``detail`` hold the verdict of every case not run."""

    def __init__(self, status, detail):
        super().__init__(detail)
        self.status, self.detail = status, detail


class _ProgramExit(BaseException):
    """The program raised SystemExit during a test."""


class _TooLarge(Exception):
    """The program's answer is larger than the harness takes."""


class _NotJSON(Exception):
    pass


class _GraderFault(Exception):
    """The tests, not the program, are broken (e.g. no ``check`` function for an ``entry_point``)."""


# ---------------------------------------------------------------------------------------- wire format
# A value is text: N T F | i<hex>; | f<float.hex>; | c<hex>;<hex>; | s<len>:<chars> | b<len>:<latin-1> |
# a<len>:<latin-1> (bytearray) | l t S Z (list, tuple, set, frozenset) <count>: items | d<count>: keys and
# values | V<kind>;<value> (a standard library value type, see _LIBRARY_TYPES, as plain data) | r<id>; (a
# reference to an object of the worker) | B<name>; (a builtin type or function, such as `int` in MBPP's
# `remove_datatype(t, int)`) | G<module>:<qualname>; (from the checker only: a library's function or
# class, such as `operator.add`). Decoding is plain Python over a str: whatever the
# worker sends, the checker builds nothing but exact builtin values, its own library values, builtins and
# references.


def _encode(value, ref):
    out: list = []
    _enc(value, out, ref, 0, False)
    return "".join(out)


def _enc(v, out, ref, depth, key):
    t = type(v)
    if v is None:
        out.append("N")
    elif t is bool:
        out.append("T" if v else "F")
    elif issubclass(t, int):
        out.append(f"i{int.__int__(v):x};")
    elif issubclass(t, float):
        out.append("f" + float.hex(float.__float__(v)) + ";")
    elif issubclass(t, str):
        s = str.__str__(v)
        out.append(f"s{len(s)}:")
        out.append(s)
    elif issubclass(t, bytes) or (issubclass(t, bytearray) and not key):
        data = memoryview(v).tobytes()
        out.append(f"{'b' if issubclass(t, bytes) else 'a'}{len(data)}:")
        out.append(data.decode("latin-1"))
    elif issubclass(t, complex):
        c = complex.__complex__(v)
        out.append("c" + float.hex(c.real) + ";" + float.hex(c.imag) + ";")
    elif t not in _EXACT_CONTAINERS and depth < _MAX_DEPTH and (library := _library_value(v, t, key)) is not None:
        out.append(f"V{library[0]};")
        _enc(library[1], out, ref, depth + 1, key)
    elif depth < _MAX_DEPTH and (issubclass(t, (tuple, frozenset)) or (not key and issubclass(t, (list, set, dict)))):
        # A list, set or dict is unhashable once plain, so as a set item or dict key it crosses by reference.
        if issubclass(t, dict):
            pairs = list(dict.items(v))
            out.append(f"d{len(pairs)}:")
            for k, item in pairs:
                _enc(k, out, ref, depth + 1, True)
                _enc(item, out, ref, depth + 1, False)
            return
        if issubclass(t, list):
            tag, items, inner = "l", list(list.__iter__(v)), False
        elif issubclass(t, tuple):
            tag, items, inner = "t", list(tuple.__iter__(v)), key
        elif issubclass(t, set):
            tag, items, inner = "S", list(set.__iter__(v)), True
        else:
            tag, items, inner = "Z", list(frozenset.__iter__(v)), True
        out.append(f"{tag}{len(items)}:")
        for item in items:
            _enc(item, out, ref, depth + 1, inner)
    else:
        out.append(ref(v))


_EXACT_CONTAINERS = (list, tuple, set, frozenset, dict)
_LIBRARY_TYPES = {
    # kind: (module, class name, hashable). Values of these exact types cross by value, rebuilt on the
    # other side by that side's own import of the module, so a test comparing with `Fraction(1, 2)` or
    # reading `.most_common()`, a namedtuple's fields or a defaultdict's default sees what Python gives.
    "Fraction": ("fractions", "Fraction", True),
    "Decimal": ("decimal", "Decimal", True),
    "date": ("datetime", "date", True),
    "datetime": ("datetime", "datetime", True),
    "time": ("datetime", "time", True),
    "timedelta": ("datetime", "timedelta", True),
    "deque": ("collections", "deque", False),
    "Counter": ("collections", "Counter", False),
    "OrderedDict": ("collections", "OrderedDict", False),
    "defaultdict": ("collections", "defaultdict", False),
}
_NAMEDTUPLES: dict = {}  # (typename, fields) -> the class this side made for them


def _library_value(v, t, key):
    """``(kind, payload)`` when ``v`` is of a standard library value type (see ``_LIBRARY_TYPES``) or a
    namedtuple, else None. The payload is plain data; the other side rebuilds the value from it."""
    try:
        if issubclass(t, tuple):
            fields = t.__dict__.get("_fields")
            if t.__bases__ != (tuple,) or type(fields) is not tuple or not all(type(f) is str for f in fields):
                return None
            return "namedtuple", (str.__str__(t.__name__), fields, tuple(tuple.__iter__(v)))
        for kind, (module, name, hashable) in _LIBRARY_TYPES.items():
            found = sys.modules.get(module)
            if found is None or getattr(found, name, None) is not t:
                continue
            if key and not hashable:
                return None  # unhashable: as a set item or dict key it crosses by reference
            if kind == "Fraction":
                return kind, (v.numerator, v.denominator)
            if kind == "Decimal":
                return kind, str(v)
            if kind == "date":
                return kind, (v.year, v.month, v.day)
            if kind in ("datetime", "time"):
                if v.tzinfo is not None:
                    return None  # a time zone is an object of its own: it stays a reference
                parts = (v.hour, v.minute, v.second, v.microsecond, v.fold)
                return kind, ((v.year, v.month, v.day) if kind == "datetime" else ()) + parts
            if kind == "timedelta":
                return kind, (v.days, v.seconds, v.microseconds)
            if kind == "deque":
                return kind, (list(v), v.maxlen)
            if kind == "defaultdict":
                return kind, (v.default_factory, dict(dict.items(v)))
            return kind, dict(dict.items(v))
    except Exception:
        return None
    return None


def _library_build(kind, p):
    """The value that ``_library_value`` described, made of this side's own classes.

    Raises:
        ValueError: a payload that no such value has.
    """
    try:
        if kind == "namedtuple":
            name, fields, values = p
            if type(name) is not str or type(fields) is not tuple or type(values) is not tuple:
                raise TypeError("namedtuple payload")
            cls = _NAMEDTUPLES.get((name, fields))
            if cls is None:
                import collections

                if len(_NAMEDTUPLES) > 256:
                    _NAMEDTUPLES.clear()
                cls = _NAMEDTUPLES[name, fields] = collections.namedtuple(name, fields, rename=True)
            return cls(*values)
        if kind not in _LIBRARY_TYPES:
            raise TypeError(f"no library type {kind!r}")
        module, name, _ = _LIBRARY_TYPES[kind]
        __import__(module)
        cls = getattr(sys.modules[module], name)
        if kind == "Decimal":
            if type(p) is not str:
                raise TypeError("Decimal payload")
            return cls(p)
        if kind == "deque":
            items, maxlen = p
            if type(items) is not list or not (maxlen is None or type(maxlen) is int):
                raise TypeError("deque payload")
            return cls(items, maxlen)
        if kind == "defaultdict":
            factory, pairs = p
            if factory is not None and not callable(factory):
                raise TypeError("defaultdict payload")
            return cls(factory, _plain_dict(pairs))
        if kind in ("Counter", "OrderedDict"):
            return cls(_plain_dict(p))
        if type(p) is not tuple or not all(type(x) is int for x in p):
            raise TypeError(f"{kind} payload")
        if kind in ("datetime", "time"):
            *args, fold = p
            return cls(*args, fold=fold)
        return cls(*p)
    except Exception as exc:  # a payload no such value has: the sender broke the protocol
        raise ValueError(f"bad {kind} value ({type(exc).__name__})") from None


def _plain_dict(p):
    if type(p) is not dict:
        raise TypeError("a dict payload")
    return p


def _builtin_token(v):
    """``B<name>;`` when ``v`` is a builtin type or function, else None."""
    name = getattr(v, "__name__", None)
    if type(name) is str and getattr(builtins, name, None) is v and isinstance(v, _BUILTIN_KINDS):
        return f"B{name};"
    return None


def _builtin(name):
    value = getattr(builtins, name, None)
    if not isinstance(value, _BUILTIN_KINDS):
        raise ValueError(f"no builtin {name!r}")
    return value


def _decode(text, remote):
    value, end = _dec(text, 0, remote, 0)
    if end != len(text):
        raise ValueError("trailing data")
    return value


def _dec(s, i, remote, depth):
    tag = s[i]
    if tag == "N":
        return None, i + 1
    if tag == "T":
        return True, i + 1
    if tag == "F":
        return False, i + 1
    if tag in "ifrBG":
        j = s.index(";", i)
        body = s[i + 1 : j]
        if tag == "i":
            return int(body, 16), j + 1  # base 16 has no digit limit
        if tag == "f":
            return float.fromhex(body), j + 1
        if tag == "B":
            return _builtin(body), j + 1
        return remote(tag, body), j + 1
    if tag == "V":
        if depth > _MAX_DEPTH:
            raise ValueError(f"bad value at {i}")
        j = s.index(";", i)
        payload, end = _dec(s, j + 1, remote, depth + 1)
        return _library_build(s[i + 1 : j], payload), end
    if tag == "c":
        j = s.index(";", i)
        k = s.index(";", j + 1)
        return complex(float.fromhex(s[i + 1 : j]), float.fromhex(s[j + 1 : k])), k + 1
    j = s.index(":", i)
    n = int(s[i + 1 : j])
    if n < 0:
        raise ValueError("negative length")
    i = j + 1
    if tag in "sab":
        end = i + n
        if end > len(s):
            raise ValueError("truncated")
        chunk = s[i:end]
        if tag == "s":
            return chunk, end
        data = chunk.encode("latin-1")
        return (data if tag == "b" else bytearray(data)), end
    if depth > _MAX_DEPTH or tag not in "ltSZd":
        raise ValueError(f"bad value at {i}")
    items = []
    for _ in range(2 * n if tag == "d" else n):
        item, i = _dec(s, i, remote, depth + 1)
        items.append(item)
    if tag == "l":
        return items, i
    if tag == "t":
        return tuple(items), i
    if tag == "S":
        return set(items), i
    if tag == "Z":
        return frozenset(items), i
    return dict(zip(items[::2], items[1::2], strict=True)), i


_HEADER_BYTES = 12


def _overloaded(ceiling_s, wait_s, cpu_s, time_s):
    """The detail of a case ended by the wall-clock ceiling (the same words as ``sandbox.base``'s)."""
    return (
        f"no verdict: the host kept the program waiting for a CPU for {wait_s:.2f} s, so it reached the "
        f"{ceiling_s:g} s wall-clock ceiling after {cpu_s:.2f} of its {time_s:g} s of CPU time (the host is overloaded)"
    )


def _frame(text):
    """A message on a pipe: its length in 12 ASCII digits, then its UTF-8 text."""
    data = text.encode("utf-8", "surrogatepass")
    return b"%012d" % len(data) + data


def _json_key(key):
    """A dict key as ``json.dumps`` writes it: str as is; int, float, bool and None as their JSON text."""
    t = type(key)
    if t is str:
        return key
    if t is bool or key is None or t is float or (t is int and key.bit_length() <= _BIG_INT_BITS):
        return _json(key)
    raise _NotJSON(f"a dict with a {t.__name__} key")


def _json(value, depth=0):
    """JSON text of a plain value as ``json.dumps`` writes it (tuples, namedtuples included, become lists;
    dicts, ``Counter`` and the like, objects, their int, float, bool and None keys strings); references,
    sets and other objects have no JSON form. Only ever called on the checker's own values."""
    if depth > 200:
        raise _NotJSON("nested too deeply")
    t = type(value)
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    if t is int:
        if value.bit_length() > _BIG_INT_BITS:
            return '{"__bigint__":"' + hex(value) + '"}'
        return repr(value)
    if t is float:
        if value != value or value in (float("inf"), float("-inf")):
            return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
        return repr(value)
    if t is str:
        return '"' + value.translate(_ESCAPES) + '"'
    if t is list or issubclass(t, tuple):
        return "[" + ",".join(_json(v, depth + 1) for v in value) + "]"
    if issubclass(t, dict):
        return "{" + ",".join(_json(_json_key(k)) + ":" + _json(v, depth + 1) for k, v in dict.items(value)) + "}"
    if t is _Remote:
        raise _NotJSON("an object that is not plain data")
    raise _NotJSON(f"a {t.__name__}")


def _describe(exc):
    """``Type: message (solution.py, line N)``, without the traceback module."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "solution.py":
            where = f" (solution.py, line {tb.tb_lineno})"
        tb = tb.tb_next
    try:
        message = str(exc)
    except BaseException:
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return (text[:2000] + where) if len(text) > 2000 else text + where


# ---------------------------------------------------------------------------------------- the worker


def _read_exactly(fd, n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_message(fd):
    """One framed message (blocking), or None when the other side hung up."""
    header = _read_exactly(fd, _HEADER_BYTES)
    data = None if header is None else _read_exactly(fd, int(header))
    return None if data is None else data.decode("utf-8", "surrogatepass")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _worker(requests, answers, max_bytes):
    """Load the candidate's program, then answer the checker's requests until it hangs up."""
    # This process holds no secret, so it may be an ordinary process again (the launcher would have made it
    # one): its /proc files are then its own, as any program expects. The launcher lends us its prctl;
    # without it (run by hand), ctypes does it.
    set_dumpable = globals().get("__rlvr_set_dumpable__")
    if set_dumpable is not None:
        set_dumpable(True)
    else:
        import ctypes

        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
        for name in [n for n in sys.modules if n == "ctypes" or n.startswith("ctypes.")]:
            del sys.modules[name]

    objects: list = []
    ids: dict = {}

    def ref(obj):
        token = _builtin_token(obj)
        if token is not None:
            return token
        number = ids.get(id(obj))
        if number is None:
            number = ids[id(obj)] = len(objects)
            objects.append(obj)  # kept alive, so its id is never reused
        return f"r{number};"

    def resolve(tag, body):
        if tag == "G":
            module, _, qualname = body.partition(":")
            __import__(module)
            value = sys.modules[module]
            for part in qualname.split("."):
                value = getattr(value, part)
            return value
        return objects[int(body)]

    busy = [False]

    def on_alarm(signum, frame):
        if busy[0]:
            raise _CaseTimeout()

    _signal.signal(_signal.SIGALRM, on_alarm)
    namespace = {"__name__": _SCOPE_NAME, "__file__": "solution.py", "__builtins__": builtins}
    while True:
        message = _read_message(requests)
        if message is None:
            break
        request = _decode(message, resolve)
        busy[0] = True
        try:
            try:
                answer = _serve(request, namespace)
            finally:
                busy[0] = False
        except _CaseTimeout:
            busy[0] = False
            answer = ("timeout",)
        except SystemExit as exc:
            answer = ("exit", _short_repr(exc.code))
        except BaseException as exc:  # the program's exception, raised in a call: the checker re-raises it
            args = exc.args if type(exc.args) is tuple else ()
            answer = ("raise", tuple(c.__name__ for c in type(exc).__mro__), _describe(exc), args)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # the program's output reaches the job's output before the verdict
            except BaseException:
                pass
        try:
            text = _encode(answer, ref)
        except (RecursionError, MemoryError) as exc:
            text = _encode(("raise", (type(exc).__name__, "BaseException"), _describe(exc), ()), ref)
        if len(text) > max_bytes:
            text = _encode(("toolarge", len(text)), ref)
        _write_all(answers, _frame(text))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(0)


def _short_repr(value):
    try:
        text = repr(value)
    except BaseException:
        text = "<unprintable>"
    return text[:200]


def _serve(request, namespace):
    op = request[0]
    if op == "load":
        with open("solution.py", "rb") as f:
            source = f.read()
        try:
            code = compile(source, "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            return ("compile_error", _describe(exc))
        try:
            exec(code, namespace)
        except SystemExit as exc:
            # sys.exit(0) at the end of a module is a clean exit: its definitions stand and are tested.
            if exc.code not in (None, 0):
                raise
        return ("ok", None)
    if op == "names":
        found: dict = {}
        for name in request[1]:
            if name in namespace:
                value = namespace[name]
                if type(value) is type(sys):  # a module: the checker imports its own copy
                    found[name] = ("module", str(getattr(value, "__name__", "")), value)
                else:
                    found[name] = ("value", value)
        return ("ok", found)
    obj = request[1]
    if op == "call":
        return ("ok", obj(*request[2], **request[3]))
    if op == "getattr":
        return ("ok", getattr(obj, request[2]))
    if op == "setattr":
        setattr(obj, request[2], request[3])
        return ("ok", None)
    if op == "delattr":
        delattr(obj, request[2])
        return ("ok", None)
    if op == "getitem":
        return ("ok", obj[request[2]])
    if op == "setitem":
        obj[request[2]] = request[3]
        return ("ok", None)
    if op == "delitem":
        del obj[request[2]]
        return ("ok", None)
    if op == "next":  # up to request[2] items at once: one round trip per batch, not per item
        items = []
        for _ in range(request[2]):
            try:
                items.append(next(obj))
            except StopIteration:
                return ("ok", (items, True))
        return ("ok", (items, False))
    convert: dict = {"len": len, "bool": bool, "str": str, "repr": repr, "int": int, "float": float, "iter": iter}
    return ("ok", convert[op](obj))


# ---------------------------------------------------------------------------------------- the checker


class _Link:
    """The checker's end of the pipes to the worker: requests under each case's time limit."""

    def __init__(self, pid, requests, answers, spec):
        self.pid, self.requests, self.answers = pid, requests, answers
        self.time_s = float(spec["time_s"])
        self.active_s = self.time_s + float(spec["idle_grace_s"])
        self.ceiling_s = float(spec["wall_s"])
        self.max_bytes = int(spec["max_value_bytes"])
        self.clock = ((~pid) << 3) | 2  # the worker's process CPU clock (MAKE_PROCESS_CPUCLOCK, CPUCLOCK_SCHED)
        self.remotes = {}
        self.dead = None  # _WorkerGone once the worker is gone: every later request raises it
        self.failure = None  # the current case's timeout or the worker's end, even if the test code swallowed it
        self.cpu0 = self.wall0 = self.wait0 = 0.0
        self.last_cpu = 0.0
        os.set_blocking(requests, False)

    # ---- measurements

    def cpu(self):
        try:
            self.last_cpu = time.clock_gettime(self.clock)
        except OSError:
            pass
        return self.last_cpu

    def run_delay(self):
        """The worker's time spent waiting for a CPU, in s (0 where the kernel keeps no schedstat)."""
        try:
            with open(f"/proc/{self.pid}/schedstat", "rb") as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def peak_mb(self):
        try:
            with open(f"/proc/{self.pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return round(int(line.split()[1]) / 1024, 3)
        except (OSError, ValueError, IndexError):
            pass
        return 0.0

    def begin_case(self):
        self.failure = self.dead
        self.wall0 = time.perf_counter()
        self.cpu0 = self.cpu()
        self.wait0 = self.run_delay()

    def case_usage(self):
        """(CPU s, run-queue wait s) of the worker since the case began."""
        cpu = max(0.0, (self.cpu() if self.dead is None else self.last_cpu) - self.cpu0)
        wait = max(0.0, self.run_delay() - self.wait0) if self.dead is None else 0.0
        return cpu, wait

    def _over(self, now):
        cpu = self.cpu() - self.cpu0
        if cpu >= self.time_s:
            return _CaseTimeout(f"used {cpu:.2f} s of CPU time, over the {self.time_s:g} s limit")
        wall = now - self.wall0
        wait = self.run_delay() - self.wait0
        if wall - wait >= self.active_s:
            return _CaseTimeout(
                f"still running after {self.active_s:g} s of wall-clock time not spent waiting for a CPU"
            )
        if wall >= self.ceiling_s:
            return _HostOverloaded(_overloaded(self.ceiling_s, wait, cpu, self.time_s))
        return None

    # ---- requests

    def ask(self, *request):
        """Send one request and return the value of its answer (raising what the program raised)."""
        if self.dead is not None:
            raise self.dead
        if self.failure is not None:
            raise self.failure
        answer = self._decode(self._exchange(_frame(_encode(request, self._ref))))
        if self.failure is not None:  # out of time while the answer came
            raise self.failure
        kind = answer[0]
        if kind == "ok":
            return answer[1]
        if kind == "raise":
            raise _rebuild(*answer[1:4])
        if kind == "exit":
            raise _ProgramExit(answer[1])
        if kind == "timeout":
            raise _CaseTimeout(f"still running after {self.time_s:g} s")
        if kind == "toolarge":
            raise _TooLarge(f"the program's value is {answer[1]} bytes long; at most {self.max_bytes} are checked")
        if kind == "compile_error":
            return answer
        raise self._broken(f"unknown answer {kind!r}")

    def _ref(self, value):
        if type(value) is _Remote:
            return f"r{object.__getattribute__(value, '_number')};"
        token = _builtin_token(value)
        if token is not None:
            return token
        # A library's module-level function or class (not one the tests define) crosses by its name.
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if type(module) is str and type(qualname) is str and module in sys.modules and module != _SCOPE_NAME:
            found: object = sys.modules[module]
            for part in qualname.split("."):
                found = getattr(found, part, None)
            if found is value:
                return f"G{module}:{qualname};"
        raise _GraderFault(
            f"the tests pass a {type(value).__name__} to the program; only plain values, builtins and "
            "library functions can cross"
        )

    def _remote(self, tag, body):
        if tag != "r":
            raise ValueError(f"unexpected {tag!r} from the program")
        number = int(body)
        proxy = self.remotes.get(number)
        if proxy is None:
            proxy = self.remotes[number] = _Remote(self, number)
        return proxy

    def _decode(self, text):
        try:
            answer = _decode(text, self._remote)
        except (ValueError, IndexError, TypeError, RecursionError, OverflowError, UnicodeError) as exc:
            raise self._broken(f"an answer that cannot be read ({type(exc).__name__})") from None
        if type(answer) is not tuple or not answer or type(answer[0]) is not str:
            raise self._broken("an answer of the wrong shape")
        return answer

    def _broken(self, why):
        self.kill()
        self.dead = self.failure = _WorkerGone(
            "runtime_error", f"the program broke the harness's protocol ({why}); killed"
        )
        return self.dead

    def _exchange(self, payload):
        """Write the request and read one framed answer, enforcing the case's time limit meanwhile."""
        pending = memoryview(payload)
        try:  # most requests fit in the pipe at once
            pending = pending[os.write(self.requests, pending[: 1 << 16]) :]
        except BlockingIOError:
            pass
        except OSError:
            raise self._ended() from None
        buffer = bytearray()
        size = None
        alarm_at = None
        next_check = time.perf_counter() + _FIRST_POLL_S
        while True:
            now = time.perf_counter()
            wait = max(0.0, next_check - now)
            readable, writable, _ = select.select([self.answers], [self.requests] if pending else [], [], wait)
            if writable:
                try:
                    pending = pending[os.write(self.requests, pending[: 1 << 16]) :]
                except BlockingIOError:
                    pass
                except OSError:
                    raise self._ended() from None
            if readable:
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    raise self._ended()
                buffer += chunk
                if size is None and len(buffer) >= _HEADER_BYTES:
                    header = bytes(buffer[:_HEADER_BYTES])
                    if not header.isdigit() or int(header) > 4 * self.max_bytes + 1024:
                        raise self._broken("a bad frame")
                    size = int(header)
                    del buffer[:_HEADER_BYTES]
                if size is not None and len(buffer) >= size:
                    if len(buffer) > size or pending:
                        raise self._broken("an answer before the question")
                    try:
                        return bytes(buffer).decode("utf-8", "surrogatepass")
                    except UnicodeError:
                        raise self._broken("text that is not UTF-8") from None
            now = time.perf_counter()
            if now < next_check:
                continue
            if alarm_at is None:
                failure = self._over(now)
                if failure is not None:
                    self.failure = failure
                    alarm_at = now
                    self._signal(_signal.SIGALRM)
                next_check = now + _MAX_POLL_S
            elif now - alarm_at >= _KILL_GRACE_S:
                # The program ignored or swallowed the interruption: it goes, and the later cases with it.
                self.kill()
                detail = f"{self.failure}; the program did not stop when interrupted and was killed"
                kind = type(self.failure) if isinstance(self.failure, _CaseTimeout) else _CaseTimeout
                self.dead = _WorkerGone(kind.status, detail)
                self.failure = kind(detail)
                raise self.failure
            else:
                self._signal(_signal.SIGALRM)
                next_check = now + _ALARM_REPEAT_S

    def _signal(self, signum):
        if self.pid is None:  # reaped: its pid may be another process's by now
            return
        try:
            os.kill(self.pid, signum)
        except OSError:
            pass

    def _ended(self):
        """The worker closed its pipe: it exited or was killed. Reap it (killing it if it lingers) and say how."""
        status = None
        deadline = time.perf_counter() + 0.1
        while self.pid is not None and status is None and time.perf_counter() < deadline:
            status = self.reap(block=False)
            if status is None:
                time.sleep(0.001)
        if status is None and self.pid is not None:
            self.kill()
            why = "it closed the harness's pipe"
        elif status is None:
            why = "it closed the harness's pipe"
        elif os.WIFSIGNALED(status) and os.WTERMSIG(status) in _OUTSIDE_SIGNALS and _WORKER_GUARDED:
            # Under the launcher's kill guard the program cannot send these to itself, and this checker
            # kills it only through kill(), which does not come here: the kernel or someone outside did.
            self.dead = self.failure = _WorkerGone(
                "sandbox_error", f"the program was killed by signal {os.WTERMSIG(status)} from outside the sandbox"
            )
            return self.dead
        elif os.WIFSIGNALED(status):
            why = f"killed by signal {os.WTERMSIG(status)}"
        else:
            why = f"exit code {os.WEXITSTATUS(status)}"
        self.dead = self.failure = _WorkerGone(
            "runtime_error", f"the program ended before the harness confirmed this test ({why})"
        )
        return self.dead

    def kill(self):
        self._signal(9)  # SIGKILL
        self.reap(block=True)

    def reap(self, block):
        if self.pid is None:
            return None
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, None
        if pid == 0:
            return None
        self.pid = None
        return status

    def close(self):
        """End the worker. It has flushed its output after its last answer, and nothing it would do after
        that counts (it exits without atexit handlers either way), so it is killed rather than waited for."""
        for fd in (self.requests, self.answers):
            try:
                os.close(fd)
            except OSError:
                pass
        self.kill()


def _rebuild(names, detail, args):
    """The checker's own exception for one the program raised: the first builtin class in its MRO, with
    the same arguments where they are plain values (so ``str(e)`` reads as in plain Python)."""
    if type(names) is not tuple:
        names = ()
    for name in names:
        cls = getattr(builtins, name, None) if type(name) is str else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            if cls is SystemExit:
                return _ProgramExit(detail)
            try:
                exc = cls(*args) if type(args) is tuple else cls(detail)
            except BaseException:
                try:
                    exc = cls(detail)
                except BaseException:
                    continue
            setattr(exc, "rlvr_detail", str(detail))  # noqa: B010  (already "Type: message (solution.py, line N)")
            return exc
    return RuntimeError(str(detail))


class _Remote:
    """An object that lives in the worker. It equals only itself; everything else is a request."""

    __slots__ = ("__weakref__", "_link", "_number")

    def __init__(self, link, number):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_number", number)

    def _ask(self, op, *args):
        return object.__getattribute__(self, "_link").ask(op, self, *args)

    def __getattr__(self, name):
        return self._ask("getattr", name)

    def __setattr__(self, name, value):
        self._ask("setattr", name, value)

    def __delattr__(self, name):
        self._ask("delattr", name)

    def __call__(self, *args, **kwargs):
        return self._ask("call", args, kwargs)

    def __getitem__(self, key):
        return self._ask("getitem", key)

    def __setitem__(self, key, value):
        self._ask("setitem", key, value)

    def __delitem__(self, key):
        self._ask("delitem", key)

    def __len__(self):
        n = self._ask("len")
        if type(n) is not int:
            raise TypeError("the program's __len__ did not return an int")
        return n

    def __bool__(self):
        return self._ask("bool") is True

    def __iter__(self):
        return _RemoteIterator(self._ask("iter"))

    def __contains__(self, item):
        return any(x is item or x == item for x in self)

    def __str__(self):
        text = self._ask("str")
        return text if type(text) is str else "<program object>"

    def __repr__(self):
        link = object.__getattribute__(self, "_link")
        if link.dead is not None:
            return "<program object>"
        text = self._ask("repr")
        return text if type(text) is str else "<program object>"

    def __int__(self):
        value = self._ask("int")
        if type(value) is not int:
            raise TypeError("the program's __int__ did not return an int")
        return value

    def __float__(self):
        value = self._ask("float")
        if type(value) is not float:
            raise TypeError("the program's __float__ did not return a float")
        return value

    __hash__ = object.__hash__


class _RemoteIterator:
    """Iterates an iterator of the worker, fetching items in batches."""

    _BATCH = 256

    def __init__(self, remote):
        self.remote = remote
        self.items = []
        self.done = type(remote) is not _Remote  # iter() returned a plain value: nothing to iterate
        if self.done and type(remote) in (list, tuple):
            self.items = list(remote)[::-1]

    def __iter__(self):
        return self

    def __next__(self):
        if not self.items:
            if self.done:
                raise StopIteration
            batch = self.remote._ask("next", self._BATCH)
            if type(batch) is not tuple or len(batch) != 2 or type(batch[0]) is not list:
                raise TypeError("the program's iterator answered nonsense")
            self.items = batch[0][::-1]
            self.done = batch[1] is True
            if not self.items:
                raise StopIteration
        return self.items.pop()


_OUTSIDE_SIGNALS = (9, 15)  # SIGKILL, SIGTERM
# Given by the launcher to a trusted script: guards a process (see _launcher.py's kill guard).
_WORKER_GUARDED = "__rlvr_guard__" in globals()


def _start_worker(max_bytes):
    """Fork the worker before anything secret is read. Returns (pid, requests fd, answers fd)."""
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(requests_w)
            os.close(answers_r)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # the spec is still unread in the stdin pipe: the worker never sees it
            os.close(devnull)
            try:
                os.close(_CHANNEL_FD)
            except OSError:
                pass  # run by hand without a channel
            if _WORKER_GUARDED:  # the program cannot SIGKILL or SIGTERM itself: such a death is an outside one
                globals()["__rlvr_guard__"]()
            _worker(requests_r, answers_w, max_bytes)
        finally:
            os._exit(70)
    os.close(requests_r)
    os.close(answers_w)
    return pid, requests_w, answers_r


def _program_names(link, wanted, entry_point):
    """The program's values for the names the tests use, as the tests may see them.

    Only names asked for count, whatever the worker answers. A name of a library module (``math``,
    ``sys``) is the checker's own import of it, whatever the program bound to it, and so is a module
    the program imported under another name where the checker can import it too. A builtin's name stays
    the builtin, unless it is the only name of the program's that the tests use (MBPP's ``sum``): then it
    is the function under test, not a tool of the tests.
    """
    found = link.ask("names", tuple(sorted(wanted)))
    if type(found) is not dict or not all(
        type(name) is str
        and name in wanted
        and type(entry) is tuple
        and ((len(entry) == 2 and entry[0] == "value") or (len(entry) == 3 and entry[0] == "module"))
        for name, entry in found.items()
    ):
        raise link._broken("a names answer of the wrong shape")
    builtin_named = {name for name in found if hasattr(builtins, name)}
    only_one = len(builtin_named) == 1 == len(found)
    allowed = {entry_point} if entry_point else builtin_named if only_one else set()
    values = {}
    for name, entry in found.items():
        if hasattr(builtins, name) and name not in allowed:
            continue
        modules = [name] if name in sys.stdlib_module_names else []
        if entry[0] == "module" and type(entry[1]) is str:
            modules.append(entry[1])
        values[name] = entry[-1]
        for module in modules:
            try:
                __import__(module)
                values[name] = sys.modules[module]
                break
            except BaseException:
                pass
    return values


def _code_names(code, names):
    """Every name a code object (and the code nested in it) refers to: globals and attribute names."""
    names.update(code.co_names)
    for const in code.co_consts:
        if type(const) is type(code):
            _code_names(const, names)
    return names


def main():
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22
    pid, requests, answers = _start_worker(max_bytes)
    write, perf = os.write, time.perf_counter
    for name in _CATCHABLE:  # the worker (same uid) may signal us; nothing it sends interrupts a verdict
        _signal.signal(getattr(_signal, name), _signal.SIG_IGN)
    data = sys.stdin.buffer.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    nonce, _, blob = data.partition(b"\n")
    nonce = nonce.decode()
    spec = marshal.loads(blob)
    del data, blob
    # Test code must never import a module the program wrote into the work directory.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here, os.getcwd())]
    link = _Link(pid, requests, answers, spec)

    def emit(raw_value=None, **record):
        """Write one record; ``raw_value`` is JSON text already made from the program's return value."""
        record["nonce"] = nonce
        line = _json(record)  # harness-made fields only: str, int, float, None
        if raw_value is not None:
            line = line[:-1] + ',"value":' + raw_value + "}"
        write(_CHANNEL_FD, (line + "\n").encode("utf-8", "replace"))

    def guarded(fn):
        """Run fn() as one case; return (status, detail, value, wall s, (CPU s, CPU wait s) of the program)."""
        link.begin_case()
        start = perf()
        value = None
        try:
            value = fn()
            if link.failure is not None:  # the test code caught a timeout or the worker's end
                raise link.failure
            status, detail = "ok", None
        except _CaseTimeout as exc:
            status, detail = exc.status, str(exc)
        except _WorkerGone as exc:
            status, detail = exc.status, exc.detail
        except _GraderFault as exc:
            status, detail = "grader_error", str(exc)
        except _TooLarge as exc:
            status, detail = "output_limit", str(exc)
        except AssertionError as exc:
            status, detail = "wrong_answer", getattr(exc, "rlvr_detail", None) or _describe(exc)
        except MemoryError as exc:
            status, detail = "memory_limit", getattr(exc, "rlvr_detail", None) or _describe(exc)
        except _ProgramExit as exc:
            status, detail = "runtime_error", f"the program called exit({exc}) during the test"
        except BaseException as exc:
            status, detail = "runtime_error", getattr(exc, "rlvr_detail", None) or _describe(exc)
        if isinstance(link.failure, _HostOverloaded) and status != "grader_error":
            status, detail = link.failure.status, str(link.failure)  # whatever the test code made of it
        elif link.failure is not None and status not in ("timeout", "runtime_error", "grader_error", "sandbox_error"):
            status, detail = "timeout", str(link.failure)
        return status, detail, value, perf() - start, link.case_usage()

    def emit_case(index, status, detail, elapsed, usage, raw_value=None):
        cpu, wait = usage
        emit(
            raw_value,
            kind="case",
            index=index,
            status=status,
            detail=detail,
            time_s=round(elapsed, 6),
            cpu_s=round(cpu, 6),
            cpu_wait_s=round(wait, 6),
            memory_mb=link.peak_mb(),
        )

    def finish(abort=None):
        if abort is not None:
            emit(kind="abort", status=abort.status, detail=abort.detail)
        emit(kind="done")
        link.close()

    mode = spec["mode"]
    tests = []
    try:
        if mode == "assert":
            setup = compile(spec["setup_code"], "setup.py", "exec", dont_inherit=True)
            for i, text in enumerate(spec["tests"]):
                tests.append(compile(text, f"test_{i}.py", "exec", dont_inherit=True))
    except (SyntaxError, ValueError) as exc:
        emit(kind="grader_error", detail=f"the test code does not compile: {_describe(exc)}")
        return finish()

    status, detail, loaded, _, _ = guarded(lambda: link.ask("load"))
    if status == "ok" and type(loaded) is tuple and loaded[0] == "compile_error":
        emit(kind="compile_error", detail=str(loaded[1]))
        return finish()
    if status != "ok":
        emit(kind="load_error", status=status, detail=f"while loading the program: {detail}")
        return finish()

    early_stop = bool(spec["early_stop"])
    if mode == "assert":
        entry_point = spec["entry_point"]
        wanted = _code_names(setup, set())
        for test in tests:
            _code_names(test, wanted)
        wanted = {name for name in wanted if not name.startswith("__")}
        if entry_point:
            wanted.add(entry_point)
        scope = {"__name__": _SCOPE_NAME, "__builtins__": builtins}

        def bind():
            for name, value in _program_names(link, wanted, entry_point).items():
                scope[name] = value
            exec(setup, scope)

        status, detail, _, _, _ = guarded(bind)
        if status != "ok":
            emit(kind="load_error", status=status, detail=f"while running the test setup: {detail}")
            return finish(link.dead)
        for i, test in enumerate(tests):
            if entry_point:

                def run(test=test):
                    exec(test, scope)
                    check = scope.get("check")
                    if not callable(check):
                        raise _GraderFault("the test code defines no check(candidate) function")
                    if entry_point not in scope:
                        raise NameError(f"the program does not define {entry_point!r}")
                    check(scope[entry_point])
            else:

                def run(test=test):
                    exec(test, scope)

            status, detail, _, elapsed, usage = guarded(run)
            status = "passed" if status == "ok" else status
            if status == "wrong_answer" and not entry_point:
                detail = f"{detail}: {spec['tests'][i].strip()[:300]}"
            emit_case(i, status, detail, elapsed, usage)
            if link.dead is not None or (early_stop and status != "passed"):
                break
    else:  # call
        fn_name = spec["fn_name"]

        def find():
            found = link.ask("names", (fn_name, "Solution"))
            if fn_name in found:
                return found[fn_name][-1]
            if "Solution" in found:
                # LeetCode-style problems (TACO, LiveCodeBench) put the function on a Solution class.
                try:
                    return getattr(found["Solution"][-1](), fn_name)
                except AttributeError:
                    return None
            return None

        status, detail, function, _, _ = guarded(find)
        if status != "ok":
            emit(kind="load_error", status=status, detail=detail)
            return finish(link.dead)
        if function is None or (type(function) is not _Remote and not callable(function)):
            emit(
                kind="load_error", status="runtime_error", detail=f"the program does not define a function {fn_name!r}"
            )
            return finish()
        for i, args in enumerate(spec["inputs"]):
            status, detail, value, elapsed, usage = guarded(lambda args=args: function(*args))
            if status == "ok":
                try:
                    raw = _json(value)
                except (_NotJSON, RecursionError) as exc:
                    status, detail = "wrong_answer", f"returned {exc}, which has no JSON form"
                else:
                    emit_case(i, "returned", None, elapsed, usage, raw)
                    continue
            emit_case(i, status, detail, elapsed, usage)
            if link.dead is not None or early_stop:
                break
    finish(link.dead)


if __name__ == "__main__":
    main()
