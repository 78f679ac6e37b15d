"""A program cannot make an assert-based test pass that it did not pass (on both backends).

The tests run in a checker process apart from the program and compare plain values only, so objects that
lie about equality (or order, or containment) fail, and a program that digs through its process, the
work directory or /proc for the harness's verdict channel, the nonce or the expected values finds none.
Every program here fails under both test styles, MBPP's ``test_list`` and HumanEval's ``check``, and the
same style of program with an honest value passes (so the checks are not failing everything).
"""

from __future__ import annotations

import pytest

from sandbox import AssertTests, Limits, Sandbox, Status, run_tests

MBPP = AssertTests(test_list=("assert sq(2) == 4", "assert sq(3) == 9"))
HUMANEVAL = AssertTests(
    test="def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n", entry_point="sq"
)
STYLES = [pytest.param(MBPP, id="mbpp"), pytest.param(HUMANEVAL, id="humaneval")]

# (program, why): each returns something that is not the right square, dressed up to compare equal.
LIARS = [
    (
        "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
        "def sq(x):\n    return A()\n",
        "an object whose __eq__ is always True (QA c2)",
    ),
    ("class I(int):\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return I(0)\n", "an int subclass"),
    (
        "class S(str):\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return S('no')\n",
        "a str subclass",
    ),
    (
        "class L(list):\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
        "def sq(x):\n    return L()\n",
        "a list subclass",
    ),
    (
        "class T(tuple):\n    def __eq__(self, o):\n        return True\n    def __hash__(self):\n        return 0\n"
        "def sq(x):\n    return T()\n",
        "a tuple subclass",
    ),
    (
        "class A:\n    __class__ = int\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return A()\n",
        "an object that claims to be an int",
    ),
    (
        "class F(float):\n    def __eq__(self, o):\n        return True\n    __hash__ = float.__hash__\n"
        "def sq(x):\n    return F(-1.5)\n",
        "a float subclass",
    ),
    (
        "class T(tuple):\n    _fields = ()\n    def __eq__(self, o):\n        return True\n"
        "    __hash__ = tuple.__hash__\ndef sq(x):\n    return T()\n",
        "a tuple subclass that poses as a namedtuple",
    ),
    (
        "import fractions\nclass Fake:\n    numerator = property(lambda self: self)\n    denominator = 1\n"
        "    def __eq__(self, o):\n        return True\nfractions.Fraction = Fake\ndef sq(x):\n    return Fake()\n",
        "an object that poses as a Fraction",
    ),
    (
        "import collections\nclass D(dict):\n    def __eq__(self, o):\n        return True\n"
        "collections.Counter = D\ndef sq(x):\n    return D(a=1)\n",
        "a dict subclass that poses as a Counter",
    ),
]


@pytest.mark.parametrize("tests", STYLES)
@pytest.mark.parametrize(("code", "why"), LIARS, ids=[w for _, w in LIARS])
async def test_values_that_lie_about_equality_fail(sandbox: Sandbox, tests: AssertTests, code: str, why: str) -> None:
    report = await run_tests(sandbox, "python", code, tests)
    assert report.passed == 0 and report.reward() == 0.0, (why, [(c.status, c.detail) for c in report.cases])


# (program, test_list, why): liars in other places, and tests that compare through arithmetic, order or
# containment.
LIARS_BEYOND_EQ = [
    (
        "class A:\n    def __eq__(self, o):\n        return True\ndef pair(x):\n    return [A(), A()]\n",
        ("assert pair(2) == [4, 8]", "assert pair(3) == [9, 27]"),
        "liars inside an honest list",
    ),
    (
        "class Z:\n    def __sub__(self, o):\n        return self\n    def __abs__(self):\n        return 0.0\n"
        "def area(r):\n    return Z()\n",
        ("assert abs(area(1) - 3.14159) < 1e-4",),
        "arithmetic that always lands on the expected value",
    ),
    (
        "class Z:\n    def __lt__(self, o):\n        return True\n    def __gt__(self, o):\n        return True\n"
        "def err(x):\n    return Z()\n",
        ("assert err(1) < 0.001", "assert err(2) > 10"),
        "an order that says yes to everything",
    ),
    (
        "class C:\n    def __contains__(self, o):\n        return True\n"
        "    def __iter__(self):\n        return iter(())\ndef squares(n):\n    return C()\n",
        ("assert 9 in squares(3)", "assert 16 in squares(4)"),
        "a container that contains everything",
    ),
]


@pytest.mark.parametrize(("code", "test_list", "why"), LIARS_BEYOND_EQ, ids=[w for *_, w in LIARS_BEYOND_EQ])
async def test_values_that_lie_beyond_equality_fail(
    sandbox: Sandbox, code: str, test_list: tuple[str, ...], why: str
) -> None:
    report = await run_tests(sandbox, "python", code, AssertTests(test_list=test_list))
    assert report.passed == 0, (why, [(c.status, c.detail) for c in report.cases])


# (program, test_list, why): honest programs whose values are builtin subclasses or the program's own
# objects still pass, as they do when program and tests run together in plain Python.
HONEST = [
    (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef pt(a):\n    return P(a, a + 1)\n",
        ("assert pt(1) == (1, 2)", "assert pt(2)[1] == 3"),
        "a namedtuple equals its plain tuple",
    ),
    (
        "from collections import Counter\ndef count(s):\n    return Counter(s)\n",
        ("assert count('aab') == {'a': 2, 'b': 1}",),
        "a Counter equals its plain dict",
    ),
    (
        "class Node:\n    def __init__(self, v):\n        self.v, self.left, self.right = v, None, None\n"
        "def total(n):\n    return 0 if n is None else n.v + total(n.left) + total(n.right)\n",
        ("assert total(root) == 10", "assert root.left.v == 2", "assert root.right.left is None"),
        "objects built by the setup code (as in MBPP 367 and 927), passed back and inspected",
    ),
    (
        "def evens(n):\n    return (i for i in range(0, n, 2))\n",
        ("assert list(evens(7)) == [0, 2, 4, 6]", "assert 4 in evens(7)", "assert sum(evens(5)) == 6"),
        "a generator, iterated by the tests",
    ),
    (
        "def keep(xs, kind):\n    return [x for x in xs if isinstance(x, kind)]\n",
        ("assert keep((1, 'a', 2.0), int) == [1]", "assert keep((1, 'a'), str) == ['a']"),
        "a builtin type passed to the program (MBPP 533)",
    ),
    (
        "import operator\ndef fold(f, xs):\n    acc = xs[0]\n    for x in xs[1:]:\n        acc = f(acc, x)\n"
        "    return acc\n",
        ("assert fold(operator.mul, [1, 2, 3, 4]) == 24", "assert fold(max, [3, 9, 2]) == 9"),
        "library and builtin functions passed to the program",
    ),
    (
        "def sum(a, b):\n    return a + b\n",
        ("assert sum(10, 15) == 25",),
        "a function under test named like a builtin (MBPP 126)",
    ),
    (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef pt(a):\n    return P(a, a + 1)\n",
        ("assert pt(1).x == 1", "assert pt(2)._asdict() == {'x': 2, 'y': 3}", "assert {pt(1): 5}[(1, 2)] == 5"),
        "a namedtuple keeps its fields",
    ),
    (
        "from collections import Counter, defaultdict, deque\ndef count(s):\n    return Counter(s)\n"
        "def groups(xs):\n    d = defaultdict(list)\n    for x in xs:\n        d[x % 2].append(x)\n    return d\n"
        "def window(xs):\n    return deque(xs, maxlen=2)\n",
        (
            "assert count('aab').most_common(1) == [('a', 2)]",
            "assert count('ab')['z'] == 0",
            "assert groups([1, 2, 3])[1] == [1, 3] and groups([1])[0] == []",
            "from collections import deque\nassert window([1, 2, 3]) == deque([2, 3]) and window([1]).maxlen == 2",
        ),
        "Counter, defaultdict and deque behave as themselves",
    ),
    (
        "from fractions import Fraction\nfrom decimal import Decimal\nimport datetime\n"
        "def half(x):\n    return Fraction(x, 2)\ndef price(s):\n    return Decimal(s)\n"
        "def next_day(d):\n    return d + datetime.timedelta(days=1)\n",
        (
            "from fractions import Fraction\nassert half(1) == Fraction(1, 2) and half(3).denominator == 2",
            "from decimal import Decimal\nassert price('1.50') == Decimal('1.5') and str(price('1.50')) == '1.50'",
            "import datetime\nassert next_day(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)",
            "from fractions import Fraction\nassert half(Fraction(1, 3)) == Fraction(1, 6)",
        ),
        "Fraction, Decimal and dates, returned and passed in, compare as in plain Python",
    ),
    (
        "def boom(x):\n    raise ValueError(x)\n",
        (
            "try:\n    boom(3)\nexcept ValueError as e:\n    assert str(e) == '3' and e.args == (3,)\n"
            "else:\n    assert False",
        ),
        "the program's exception reaches the test as its builtin class",
    ),
]


@pytest.mark.parametrize(("code", "test_list", "why"), HONEST, ids=[w for *_, w in HONEST])
async def test_honest_values_still_pass(sandbox: Sandbox, code: str, test_list: tuple[str, ...], why: str) -> None:
    setup = (
        "root = Node(1)\nroot.left = Node(2)\nroot.right = Node(3)\nroot.left.left = Node(4)\n"
        if "Node" in code
        else ""
    )
    report = await run_tests(sandbox, "python", code, AssertTests(test_list=test_list, setup_code=setup))
    assert report.status is Status.PASSED, (why, [(c.status, c.detail) for c in report.cases])


# QA's c3.py: walk the frames up to the harness's emit function and report every case as passed.
FRAME_FORGE = """
import sys, os
f = sys._getframe()
while f is not None and 'emit' not in f.f_locals:
    f = f.f_back
if f is not None:
    emit, spec = f.f_locals['emit'], f.f_locals['spec']
    for i in range(len(spec.get('tests') or spec.get('inputs') or [])):
        emit(kind="case", index=i, status="passed", detail=None, time_s=0.0)
    emit(kind="done")
    os._exit(0)
def sq(x):
    return 0
"""
# The same through the garbage collector: any function called emit, any string that looks like a nonce.
GC_FORGE = """
import gc, os, re
for obj in gc.get_objects():
    if callable(obj) and getattr(obj, "__name__", "") == "emit":
        obj(kind="case", index=0, status="passed", detail=None, time_s=0.0)
        obj(kind="case", index=1, status="passed", detail=None, time_s=0.0)
        os._exit(0)
nonces = [o for o in gc.get_objects() if isinstance(o, str) and re.fullmatch("[0-9a-f]{32}", o)]
for n in nonces:
    for i in range(2):
        os.write(1, ('{"kind": "case", "index": %d, "status": "passed", "nonce": "%s"}\\n' % (i, n)).encode())
def sq(x):
    return 0
"""
# Into the checker through /proc: its channel, its memory, its environment (it is non-dumpable).
PROC_FORGE = """
import os
checker = os.getppid()
line = b'{"kind": "case", "index": 0, "status": "passed", "nonce": "x"}\\n'
opened = []
for path in ("/proc/%d/fd/3" % checker, "/proc/%d/mem" % checker, "/proc/%d/environ" % checker):
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        continue
    opened.append(path)
    os.close(fd)
def sq(x):
    if opened:
        return x * x  # it got in: pass, so the test below fails loudly
    return 0
"""
# A module of the test code's, planted in the work dir: the checker must import the real one.
PLANTED_MODULE = (
    "open('random.py', 'w').write(" + repr(FRAME_FORGE) + ")\nopen('math.py', 'w').write('x = 1')\n"
    "def sq(x):\n    return 0\n"
)
PLANTED_TESTS = AssertTests(test_list=("import random\nassert sq(2) == 4", "import random\nassert sq(3) == 9"))
PLANTED_HE = AssertTests(
    test="def check(candidate):\n    import random\n    assert candidate(2) == 4\n", entry_point="sq"
)


@pytest.mark.parametrize("tests", STYLES)
@pytest.mark.parametrize(
    "code",
    [
        FRAME_FORGE,
        GC_FORGE,
        PROC_FORGE,
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef sq(x):\n    return 0",
    ],
    ids=["frames (QA c3)", "gc and nonce guessing", "proc files of the checker", "kills the checker"],
)
async def test_a_program_cannot_forge_a_verdict(sandbox: Sandbox, tests: AssertTests, code: str) -> None:
    report = await run_tests(sandbox, "python", code, tests)
    assert report.passed == 0 and report.reward() == 0.0, [(c.status, c.detail) for c in report.cases]


# The program rewrites the worker (it is the program's process) so that its answer to the checker's
# name lookup binds what it likes: the tests' builtins, names they did not ask for, fake modules.
REWIRED = """
import __main__
honest = __main__._serve
def serve(request, namespace):
    answer = honest(request, namespace)
    if request[0] == "names":
        answer[1].update(EXTRA)
    return answer
__main__._serve = serve
def always_zero(*args, **kwargs):
    return 0.0
def area(r):
    return 1.0
"""
# (extra names in the answer, why)
REWIRINGS = [
    ('{"abs": ("value", always_zero)}', "the tests' abs"),
    ('{"abs": ("value", always_zero), "area": ("module", "no_such_module", area)}', "abs, hiding area as a module"),
    ('{"__builtins__": ("value", {"abs": always_zero})}', "the tests' __builtins__"),
    ('{"math": ("value", type("M", (), {"isclose": staticmethod(lambda *a, **k: True)})())}', "a fake math"),
    ('{"math": ("module", "no_such_module", type("M", (), {"isclose": always_zero})())}', "math as another module"),
]


@pytest.mark.parametrize(("extra", "why"), REWIRINGS, ids=[w for _, w in REWIRINGS])
async def test_a_rewired_worker_cannot_rebind_what_the_tests_use(sandbox: Sandbox, extra: str, why: str) -> None:
    tests = AssertTests(
        test_list=("assert abs(area(1) - 3.14159) < 1e-4", "assert math.isclose(area(2), 12.566, rel_tol=1e-3)")
    )
    code = REWIRED.replace("honest = ", f"EXTRA = {extra}\nhonest = ") + "import math\n"
    report = await run_tests(sandbox, "python", code, tests)
    assert report.passed == 0, (why, [(c.status, c.detail) for c in report.cases])


async def test_a_program_cannot_stand_in_for_a_library_module(sandbox: Sandbox) -> None:
    # MBPP's tests use the modules the program imported (`sys`, `math`): they get the real ones.
    code = "class FakeMath:\n    def isclose(self, *a, **k):\n        return True\nmath = FakeMath()\n"
    code += "def area(r):\n    return 1.0\n"
    report = await run_tests(sandbox, "python", code, AssertTests(test_list=("assert math.isclose(area(2), 12.566)",)))
    assert report.status is Status.WRONG_ANSWER, [(c.status, c.detail) for c in report.cases]


async def test_only_a_lone_builtin_named_function_is_the_programs(sandbox: Sandbox) -> None:
    # `sum` alone is the function under test (MBPP 126); beside `sorted` it is the builtin again.
    code = "def sum(xs):\n    return [1, 2]\ndef sorted(xs):\n    return [1, 2]\n"
    alone = await run_tests(sandbox, "python", code, AssertTests(test_list=("assert sum([2, 1]) == [1, 2]",)))
    both = await run_tests(sandbox, "python", code, AssertTests(test_list=("assert sorted(sum([5])) == [1, 2]",)))
    assert alone.status is Status.PASSED, [(c.status, c.detail) for c in alone.cases]
    assert both.passed == 0, [(c.status, c.detail) for c in both.cases]


@pytest.mark.parametrize("tests", [PLANTED_TESTS, PLANTED_HE], ids=["mbpp", "humaneval"])
async def test_test_code_never_imports_what_the_program_wrote(sandbox: Sandbox, tests: AssertTests) -> None:
    report = await run_tests(sandbox, "python", PLANTED_MODULE, tests)
    assert report.passed == 0 and report.status is Status.WRONG_ANSWER, [(c.status, c.detail) for c in report.cases]


async def test_a_program_that_stops_its_checker_fails(sandbox: Sandbox) -> None:
    code = "import os, signal\ndef sq(x):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return x * x\n"
    report = await run_tests(sandbox, "python", code, MBPP, limits=Limits(time_s=0.3))
    assert report.passed == 0, [(c.status, c.detail) for c in report.cases]
    assert {c.status for c in report.cases} <= {Status.TIMEOUT, Status.RUNTIME_ERROR}


async def test_the_expected_values_are_nowhere_in_the_programs_reach(sandbox: Sandbox) -> None:
    # The program searches its memory, its stdin, the work dir and the checker's /proc files for the
    # expected value, and returns it if found; it must not find it.
    code = """
import gc, os
def secret(x):
    places = [repr(o) for o in gc.get_objects() if isinstance(o, (str, bytes, dict, tuple, list))]
    places.append(os.read(0, 1 << 16).decode(errors="replace"))
    for root, _, files in os.walk("/work"):
        places += [open(os.path.join(root, f), errors="replace").read() for f in files]
    for name in ("cmdline", "environ", "mem", "fd/0"):
        try:
            places.append(open("/proc/%d/%s" % (os.getppid(), name), errors="replace").read(1 << 16))
        except OSError:
            pass
    wanted = "-".join(["31337", "hidden"])  # built at run time, so this program's own text holds no copy
    return wanted if any(wanted in p for p in places) else "not found"
"""
    tests = AssertTests(test_list=("assert secret(1) == '31337-hidden'",))
    report = await run_tests(sandbox, "python", code, tests)
    assert report.status is Status.WRONG_ANSWER, [(c.status, c.detail) for c in report.cases]
