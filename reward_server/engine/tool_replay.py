"""The program one tool call runs in the sandbox: a session's earlier cells replayed silently, then the new cell.

A session's interpreter state is rebuilt for each call by running the code of its earlier calls again, in order,
in one fresh sandboxed interpreter, with file descriptors 1 and 2 pointed at ``/dev/null``; then the new cell
runs with its output kept. The state is exactly what those cells leave behind (variables, functions, imports,
files in the work directory), never another session's: each call is a new sandbox job with a new work
directory. The cost is that of running the earlier cells again (O(turns²) in all over a rollout); see
``docs/tools.md``.

Cells are files (``cell_0.py`` ...) so that a traceback shows the line that failed. A cell that raises during
the replay is skipped silently (it raised the first time too, and its state up to the error is kept, as a
REPL keeps it).
"""

from __future__ import annotations

WRAPPER_FILE = "rlvr_tool_main.py"

REPLAYED = b"R"
"""Written to the result channel once the earlier cells have run (a cell that ends the interpreter stops it)."""
FINISHED = b"F"
"""Written once the new cell has run to its end or raised: without it the cell ended the interpreter itself
(``os._exit``, a signal), and is not kept in the session's log."""

# Runs as __main__ in the sandbox; argv[1] is the number of cells, the last one being the new call; the markers are
# written to fd 3, the job's result channel.
WRAPPER = (
    f"REPLAYED, FINISHED = {REPLAYED!r}, {FINISHED!r}\n"
    + r"""
import os as _os
import sys as _sys
import traceback as _traceback


def _rlvr_run() -> None:
    count = int(_sys.argv[1])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    saved_out, saved_err = _os.dup(1), _os.dup(2)
    null = _os.open(_os.devnull, _os.O_WRONLY)
    for index in range(count - 1):
        _os.dup2(null, 1)
        _os.dup2(null, 2)
        try:
            name = f"cell_{index}.py"
            with open(name, encoding="utf-8", errors="surrogateescape") as source:
                exec(compile(source.read(), name, "exec"), namespace)
        except BaseException:
            pass
        for stream in (_sys.stdout, _sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    _os.dup2(saved_out, 1)
    _os.dup2(saved_err, 2)
    for fd in (saved_out, saved_err, null):
        _os.close(fd)
    _mark(REPLAYED)
    name = f"cell_{count - 1}.py"
    try:
        with open(name, encoding="utf-8", errors="surrogateescape") as source:
            exec(compile(source.read(), name, "exec"), namespace)
    except SystemExit:
        _mark(FINISHED)
        raise
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        _traceback.print_exception(type(exc), exc, tb)
        _sys.stderr.flush()
        _mark(FINISHED)
        _sys.exit(1)
    _mark(FINISHED)


def _mark(what: bytes) -> None:
    try:
        _os.write(3, what)
    except OSError:
        pass


_rlvr_run()
"""
)


def replay_files(cells: list[str]) -> dict[str, bytes]:
    """The job's files for running ``cells[-1]`` after replaying ``cells[:-1]`` silently.

    Raises:
        ValueError: ``cells`` is empty.
    """
    if not cells:
        raise ValueError("a tool call needs at least one cell")
    files = {f"cell_{i}.py": code.encode("utf-8", "surrogatepass") for i, code in enumerate(cells)}
    files[WRAPPER_FILE] = WRAPPER.encode()
    return files
