"""The reward server's floor plan (issue 21): the scoring engine imports no HTTP framework, and no module of
``reward_server`` imports itself back through others."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator

from tests.conftest import CHILD_PYTHONPATH, REPO_ROOT

_ENGINE_ALONE = """
import importlib, json, pkgutil, sys
import reward_server.engine as engine
names = [m.name for m in pkgutil.walk_packages(engine.__path__, "reward_server.engine.")]
for name in names:
    importlib.import_module(name)
web = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "starlette"))
print(json.dumps({"modules": names, "web": web}))
"""


def test_the_engine_imports_no_web_framework() -> None:
    """``python -m reward_server score FILE`` and the routers share the engine; only the routers speak HTTP."""
    out = subprocess.run(
        [sys.executable, "-c", _ENGINE_ALONE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": CHILD_PYTHONPATH, "PATH": "/usr/bin:/bin"},
        check=True,
    )
    report = json.loads(out.stdout.splitlines()[-1])
    assert "reward_server.engine.batch" in report["modules"]  # the walk found the package's modules
    assert report["web"] == [], f"the engine pulled in {report['web']}"


def _module_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements that run at import, ``if TYPE_CHECKING:`` blocks included; not those in functions."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports at module level."""
    files = {}
    for path in (REPO_ROOT / package).rglob("*.py"):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in _module_level(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])) is not None:
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])) is not None:
            return found
    return None


def test_the_reward_server_has_no_import_cycle() -> None:
    """A newcomer reads the modules bottom up (the engine, then the routers); a cycle, like the one
    rewards <-> step_rewards had, leaves no bottom."""
    graph = _import_graph("reward_server")
    assert "reward_server.engine.steps" in graph["reward_server.engine.batch"]  # the graph sees imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
