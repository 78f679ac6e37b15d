"""Math answer equivalence: does a completion's final answer equal the reference answer?

Built on math-verify (latex2sympy + sympy) for the symbolic comparison; this module owns the *policy*
around it, decided once and applied to every input of the kind:

Extraction (:func:`extract_final_answer`), from the text after the last ``</think>`` if there is one:

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (also ``\\boxed 5``). An empty or unterminated last box is
   *no answer*: an earlier box is never credited. Boxes joined to the last one only by separators
   (``,``, ``and``, ``or``) belong to the same final answer (``\\boxed{2}, \\boxed{5}``);
2. else the last ``<answer>...</answer>`` tag (an unterminated last tag is no answer);
3. else the last "final answer is ...", "answer is ...", "Answer: ..." or ``#### ...`` line;
4. else (fallback, on by default, ``options.fallback``) the last number or LaTeX math span of the text,
   unless the text stops in unfinished working: a chain that ends in ``=`` or an operator
   (``7 \\cdot 6 \\cdot 12 - 220 =``), or a math span opened on the last line and never closed (``$3^3=``).
   An item marked ``truncated`` (cut at the length limit) never gets a letter or fallback answer.

Comparison (:func:`answers_match`):

* The last final answer decides. A final answer that gives several different values (``3 or 5``) for a
  single-valued reference is wrong, even if one of them is right.
* A ``±`` reference needs both values; a list or set reference needs all its members, in any order, and
  nothing else.
* Numbers are exact rationals where they can be: ``2 2/3`` and ``2\\frac{2}{3}`` are 8/3; ``007`` is 7;
  thousands separators, currency signs, units, ``\\text{}``, ``^\\circ``, ``\\left``/``\\right`` and
  ``\\dfrac`` do not change the value; unicode ``√ − × ÷ ° π ±`` mean what they say; ``35%`` equals 35
  and 0.35.
* **The reference sets the precision.** A reference written as a decimal with *d* places (``0.67``,
  ``14.3``, ``1.5\\times10^{-10}``) stands for every value that rounds to it, so an answer is accepted
  when its exact value lies within half a unit of the reference's last place (``\\frac{2}{3}`` for 0.67,
  ``\\frac{100}{7}`` for 14.3), unless the answer is itself a decimal *less* precise than the reference.
  An exact reference (integer, fraction, radical, π ...) accepts a decimal answer only within a relative
  ``rel_tol`` (1e-6). So ``37.7`` is not accepted for ``12\\pi``. All numeric tolerances are relative:
  ``10^{-20}`` never equals ``2\\cdot10^{-20}``.
* Multiple-choice references (a single letter A-J, ``(B)``, ``\\text{(C)}``) compare as letters.
* Equations compare as equations (``3x+6y-4=0`` equals ``y=-\\frac12x+\\frac23``), through math-verify.
* Forms that rule verifiers miss (issue 23), each only against the form it reads: a function's variable or a
  family's integer parameter renamed (``renaming``), sets as set-builder, intervals or conditions (``sets``),
  a column vector for a tuple, a labelled expression, degrees and minutes (``rewrites``), and short word or
  phrase references compared as normalised text, sentences on an unambiguous key span only (``text_answers``).

A reference that yields no value (prose, empty) is ``invalid_ground_truth``: the item must not train.

This module knows nothing of HTTP or processes; :func:`verify_payload` is the entry point that the
server's worker pool calls, with a soft in-process deadline (the pool adds a hard one).
"""

from __future__ import annotations

import functools
import logging
import signal
from collections.abc import Callable
from typing import Any

from reward_server.verifiers.math.compare import Reference, answers_match, parse_reference
from reward_server.verifiers.math.extract import Extraction, extract_final_answer
from reward_server.verifiers.math.text import Num, normalize_answer, parse_number
from reward_server.verifiers.math.types import MathOptions, MathStatus, MathVerdict

__all__ = [
    "Extraction",
    "MathOptions",
    "MathStatus",
    "MathVerdict",
    "Num",
    "Reference",
    "answers_match",
    "extract_final_answer",
    "init_worker",
    "normalize_answer",
    "parse_number",
    "parse_reference",
    "verify_math",
    "verify_payload",
]


logger = logging.getLogger(__name__)


def verify_math(
    response: str,
    ground_truth: str | Reference,
    options: MathOptions | None = None,
    *,
    truncated: bool = False,
) -> MathVerdict:
    """Verify one response against a reference answer.

    Args:
        response: the completion text.
        ground_truth: the reference answer (see :func:`parse_reference`), or an already parsed one.
        options: the comparison options.
        truncated: the completion hit the length limit without ending (``max_completion_length``, no EOS):
            only an explicit final answer (a box, an ``<answer>`` tag, an "answer is" line) counts, never
            the fallback's last value, which in a cut text is working, not a result (issue 23).

    Returns:
        A :class:`MathVerdict`. Never raises for bad input: an unparsable reference gives
        ``invalid_ground_truth``, a response without a final answer ``no_answer``. This function has no
        time limit of its own; callers in a server run it under :func:`verify_payload`'s deadline.
    """
    options = options or MathOptions()
    ref = ground_truth if isinstance(ground_truth, Reference) else parse_reference(ground_truth, options)
    if ref.invalid:
        return MathVerdict(MathStatus.INVALID_GROUND_TRUTH, None, detail=ref.invalid)
    extraction = extract_final_answer(
        response, fallback=options.fallback, choice=ref.kind == "choice", explicit_only=truncated
    )
    if not extraction.parts:
        return MathVerdict(MathStatus.NO_ANSWER, False, None, ref.shown, extraction.detail)
    answer = ", ".join(extraction.parts)
    correct, detail = answers_match(ref, answer, options)
    if not correct and len(ref.members) > 1 and len(extraction.multipart) > len(extraction.parts):
        # "\boxed{3} for part (a) and \boxed{5} for part (b)" against a reference that lists both parts.
        joined = ", ".join(extraction.multipart)
        if answers_match(ref, joined, options)[0]:
            answer, correct, detail = joined, True, "the boxes of a multi-part answer, joined by their part labels"
    return MathVerdict(MathStatus.OK, correct, answer, ref.shown, detail)


# --- worker side --------------------------------------------------------------------------------

_cached_reference: Callable[[str, MathOptions], Reference] = functools.lru_cache(maxsize=4096)(parse_reference)


class _SoftDeadline(BaseException):
    """Raised by SIGALRM inside a worker. A BaseException, so no ``except Exception`` in sympy or
    math-verify swallows it and turns a timeout into a silent wrong answer."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftDeadline


def init_worker(cache_size: int = 4096) -> None:
    """Per-process set-up, called once by each pool worker: size the reference cache, warm the parser."""
    global _cached_reference
    _cached_reference = functools.lru_cache(maxsize=cache_size)(parse_reference)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    signal.signal(signal.SIGALRM, _on_alarm)
    # Warm up antlr/sympy so the first real item does not pay for lazy imports.
    verify_math("\\boxed{\\frac{1}{2}}", "0.5")


def options_from_dict(d: dict[str, Any] | None) -> MathOptions:
    """Build :class:`MathOptions` from a JSON-like dict (unknown keys were rejected by the schema)."""
    if not d:
        return MathOptions()
    return MathOptions(**{k: v for k, v in d.items() if k in MathOptions.__dataclass_fields__})


def verify_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: ``{"response", "ground_truth", "options"?, "truncated"?, "timeout_s"?}`` -> verdict dict.

    ``timeout_s`` arms a soft deadline (SIGALRM) that turns a slow sympy call into ``timeout`` without
    killing the worker; code stuck in C ignores it, and the pool's hard deadline kills the worker instead.
    """
    options = options_from_dict(payload.get("options"))
    timeout_s = float(payload.get("timeout_s") or 0)
    if timeout_s > 0:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        ref = _cached_reference(payload["ground_truth"], options)
        verdict = verify_math(payload["response"], ref, options, truncated=bool(payload.get("truncated")))
    except _SoftDeadline:
        verdict = MathVerdict(MathStatus.TIMEOUT, None, detail=f"no verdict within {timeout_s:g} s")
    except RecursionError:
        verdict = MathVerdict(MathStatus.ERROR, None, detail="expression too deeply nested")
    except MemoryError:
        verdict = MathVerdict(MathStatus.ERROR, None, detail="out of memory while verifying")
    finally:
        if timeout_s > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return verdict.to_dict()
