r"""A variable written under another name (issue 23): the answer rewritten in the reference's names.

Two kinds, each only where the name cannot matter:

* **a function's variable**: ``g(x) = x^2`` for ``g(t) = t^2`` (both define the same function), and a bare
  ``x^2`` for ``g(t) = t^2`` (the reference names its variable). A bare ``x^2`` for a bare ``y^2`` is not
  renamed: nothing says that ``y`` was free to choose;
* **an integer parameter** of a solution family: ``\frac{\pi}{2} + m\pi`` for ``\frac{\pi}{2} + k\pi``
  (a periodic family: the parameter stands beside ``\pi``), ``(1+4s, 2-3s)`` for ``(1+4u, 2-3u)`` (a
  parametric tuple: the parameter is in two components or more). One parameter on each side, a letter among
  k, m, n, j, l, s, t, u, and every other name the same.

A rename never merges two names: the reference's name must not occur in the answer, nor the answer's in
the reference, so ``g(x) = x^2 + t`` is never read as ``g(t) = t^2 + t``.
"""

from __future__ import annotations

import re

from reward_server.verifiers.math.forms import split_top_level

_TOKEN = re.compile(r"\\[A-Za-z]+|[A-Za-z]|.", re.DOTALL)
# Commands whose braced argument is a name or a word, not variables: "\mathbb{Z}", "\text{ for }".
_NAMED_ARGUMENT = re.compile(r"\\(?:mathbb|mathrm|operatorname|text[a-z]*|mbox|begin|end)\s*\{[^{}]*\}")
_DEFINITION = re.compile(r"^\s*([A-Za-z](?:_\{?\w+\}?)?)\s*\(\s*([A-Za-z])\s*\)\s*=\s*(.+)$", re.DOTALL)
PARAMETERS = frozenset("kmnjlstu")
_SOLVED_FOR = re.compile(r"^\s*[a-z]\s*=\s*([^=]+)$")


def letters(s: str) -> set[str]:
    """The one-letter names in a LaTeX string (command names and their word arguments left out)."""
    return {t for t in _TOKEN.findall(_NAMED_ARGUMENT.sub(" ", s)) if len(t) == 1 and t.isalpha()}


def rename(s: str, old: str, new: str) -> str:
    """``s`` with the one-letter name ``old`` written ``new`` (never inside a command name)."""
    return "".join(new if t == old else t for t in _TOKEN.findall(s))


def _function_rename(gold: str, ans: str) -> str | None:
    gold_def = _DEFINITION.match(gold)
    if gold_def is None:
        return None
    name, var = gold_def.group(1), gold_def.group(2)
    ans_def = _DEFINITION.match(ans)
    if ans_def is not None:
        if ans_def.group(1) != name or ans_def.group(2) == var:
            return None
        old, body = ans_def.group(2), ans_def.group(3)
        if var in letters(body) or old in letters(gold_def.group(3)):
            return None
        return f"{name}({var}) = {rename(body, old, var)}"
    if "=" in ans:
        return None
    names = letters(ans)
    if len(names) != 1 or var in names:
        return None
    (old,) = names
    if old in letters(gold_def.group(3)):
        return None
    return rename(ans, old, var)


def _has_parameter_role(s: str, param: str) -> bool:
    """The parameter of a solution family: beside ``\\pi`` (a period), or in two components of a tuple."""
    if "\\pi" in s:
        return True
    inner = s.strip()
    if len(inner) < 2 or inner[0] not in "([" or inner[-1] not in ")]":
        return False
    parts = split_top_level(inner[1:-1], ",")
    return len(parts) >= 2 and sum(param in letters(p) for p in parts) >= 2


def _parameter_rename(gold: str, ans: str) -> str | None:
    gold_names, ans_names = letters(gold), letters(ans)
    only_gold, only_ans = gold_names - ans_names, ans_names - gold_names
    if len(only_gold) != 1 or len(only_ans) != 1:
        return None
    (param,), (old,) = only_gold, only_ans
    if param not in PARAMETERS or old not in PARAMETERS:
        return None
    if not (_has_parameter_role(gold, param) and _has_parameter_role(ans, old)):
        return None
    return rename(ans, old, param)


# "k \in \mathbb{Z}" after a family, with a comma or in parentheses: it only says the parameter is an integer.
_QUALIFIER = re.compile(
    r"\s*,?\s*(\(?)\s*(?:\\text\{\s*(?:for|where)\s*(?:some|any|all)?\s*\}\s*)?"
    r"([kmnjlstu])\s*\\in\s*\\(?:mathbb\s*\{?\s*Z\s*\}?|Z(?![A-Za-z]))\s*(\)?)\s*$"
)


def without_qualifier(s: str) -> str | None:
    """``s`` without a trailing ``, k \\in \\mathbb{Z}`` (or ``(k \\in \\mathbb{Z})``) whose parameter occurs in
    the family before it; ``None`` when there is none."""
    m = _QUALIFIER.search(s)
    if m is None or bool(m.group(1)) != bool(m.group(3)):
        return None
    family = s[: m.start()].strip()
    return family if family and m.group(2) in letters(family) else None


def renamed_answer(gold: str, ans: str) -> str | None:
    """The answer written in the reference's variable names, or ``None`` where no rename applies."""
    if gold == ans:
        return None
    renamed = _function_rename(gold, ans) or _parameter_rename(gold, ans)
    solved = _SOLVED_FOR.match(gold)
    if renamed is None and solved is not None and "=" not in ans:
        # "x = \frac{\pi}{2} + k\pi" against a bare "\frac{\pi}{2} + m\pi": the family on the right.
        renamed = _parameter_rename(solved.group(1), ans)
    return renamed
