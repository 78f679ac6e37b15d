"""The math verifier's verdicts by answer type, in both directions, on the real data of ``RLVR_DATA_DIR`` (issue 23).

Answer types, from the reference answer (:func:`answer_type`): numbers (integers, decimals, fractions, with units or
a percent sign), expressions (radicals, pi, variables, equations), sets and intervals (unions, set braces, a list of
solutions), tuples (points, vectors, matrices), multiple choice (letters) and text (a word or name).

Both directions, from three sources:

* **MATH-500 solutions** (``math500.jsonl``): each reference solution, as written, against its answer: must be
  accepted. The same solution with its last ``\\boxed{}`` perturbed (near misses of its type: a digit one up, a
  sign, a bound moved or an open end closed, a solution dropped from a list, two coordinates swapped, another
  letter, another word; see :func:`perturbations`) must be refused.
* **Labelled model outputs** (``math_model_outputs.jsonl``): 800 sampled MATH solutions labelled by Qwen2.5-Math's
  grader and 5,276 GSM8K solutions labelled by OpenAI (``is_correct``): a label ``true`` must be accepted, ``false``
  refused. The labels are automatic, so a disagreement may be the label's.
* **Math-Verify's cases** (``math_verify_cases.jsonl``): its own test table, ``expected`` as the label. That is
  Math-Verify's behaviour, not an independent truth; the project differs from it on purpose in ten documented
  places (``tests/reward_server/test_math_data.py``: decimal commas, per-call precision, a questionable case).

The rule path only (no judge). Items run on a process pool as the server's workers do (``init_worker``,
``verify_payload`` under a 5 s soft deadline). Prints a Markdown table: accepted / right and refused / wrong per type
and source, items with no verdict apart, then the versions, CPU and load.

Usage: ``RLVR_DATA_DIR=../shared/data python benchmarks/math_answer_types.py [--workers N] [--show-misses 5]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time
import zlib
from collections import Counter, defaultdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reward_server.verifiers.math import init_worker, verify_payload

TYPES = ("number", "expression", "set/interval", "tuple", "choice", "text")

_TEXT_CMD = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")


def _strip(ans: str) -> str:
    a = ans.strip().strip("$").strip()
    a = re.sub(r"\\(?:left|right|!|,|;|:|quad|displaystyle)", "", a)
    return a.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").strip()


def _top_level_commas(a: str) -> int:
    depth = commas = 0
    for ch in a:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            commas += 1
    return commas


def answer_type(ans: str) -> str:
    """The type of a reference answer (one of :data:`TYPES`), by its form."""
    a = _strip(ans)
    words = _TEXT_CMD.sub(r"\1", a).strip()
    letters = re.sub(r"[\s(){},]", "", words)
    if letters and re.fullmatch(r"[A-J]+", letters) and len(letters) <= 5 and not re.search(r"[A-J]{2}", words):
        return "choice"
    if re.fullmatch(r"[A-Za-z]+(?:[ '\-][A-Za-z]+)*", words) and re.search(r"[A-Za-z]{2}", words):
        return "text"
    if re.search(r"\\cup|\\cap|\\infty|\\emptyset|\\varnothing", a) or a.startswith(("\\{", "\\lbrace")):
        return "set/interval"
    if re.fullmatch(r"[\(\[].*,.*[\)\]]", a) and a[0] + a[-1] in ("(]", "[)", "[]"):
        return "set/interval"
    if "pmatrix" in a or "bmatrix" in a or re.fullmatch(r"\(.*,.*\)", a):
        return "tuple"
    n = _TEXT_CMD.sub("", a)
    n = re.sub(r"\^\s*\{?\\circ\}?|\\%|%|\\\$|\$", "", n).replace(" ", "").replace("{,}", "")
    number = r"-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"  # 58,500 is a number, not a list
    if re.fullmatch(rf"{number}|-?(?:\d+)?\\frac\{{\d+\}}\{{\d+\}}|-?\\frac\d\d", n):
        return "number"
    if _top_level_commas(a) >= 1:
        return "set/interval"  # a list of solutions: a set written without braces
    return "expression"


def _bump_digit(a: str, which: int = 0) -> str | None:
    digits = [m.start() for m in re.finditer(r"\d", a)]
    if not digits:
        return None
    i = digits[which]
    return a[:i] + str((int(a[i]) + 1) % 10) + a[i + 1 :]


def perturb(ans: str, kind: str, texts: list[str]) -> str:
    """A near miss of ``ans`` of its own kind: a wrong answer a careless grader might still accept.

    number, expression, tuple: the first digit one up (``18`` -> ``28``, ``\\frac{3}{4}`` -> ``\\frac{4}{4}``; a
    coordinate of a tuple), or ``+ 1`` when there is no digit; set/interval: the last member dropped from a list of
    two or more, else the first digit one up, else an open end closed; choice: the next letter; text: the answer of
    another text item.
    """
    a = ans.strip()
    if kind == "choice":
        return re.sub(r"[A-E]", lambda m: "BCDEA"["ABCDE".index(m.group(0))], a, count=1)
    if kind == "text":
        others = [t for t in texts if _strip(t).lower() != _strip(a).lower()]
        return others[zlib.crc32(a.encode()) % len(others)] if others else f"\\text{{not }}{a}"
    if kind == "set/interval" and _top_level_commas(a) >= 1 and not re.match(r"[\(\[]|\\\{|\\left", a.strip()):
        depth, cut = 0, -1
        for k, ch in enumerate(a):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                cut = k
        return a[:cut].strip()
    bumped = _bump_digit(a)
    if bumped is not None:
        return bumped
    if kind == "set/interval" and "(" in a:
        return a.replace("(", "[", 1)
    return f"{a} + 1"


def _split_top(a: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for k, ch in enumerate(a):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(a[last:k])
            last = k + 1
    return [*parts, a[last:]]


def perturbations(ans: str, kind: str, texts: list[str]) -> list[tuple[str, str]]:
    """Near misses of ``ans``, each ``(name, wrong answer)``: :func:`perturb`'s, and where the form allows, a sign
    (numbers, expressions: ``-x``; never for 0, ``\\pm`` or an equation), an open end closed (intervals:
    ``(3,4]`` -> ``[3,4]``), two coordinates swapped (tuples, when they differ)."""
    a = ans.strip()
    out = [("first", perturb(a, kind, texts))]
    if kind in ("number", "expression") and "=" not in a and "\\pm" not in a and not re.fullmatch(r"[0.]+", a):
        out.append(("sign", a[1:].strip() if a.startswith("-") else f"-\\left({a}\\right)"))
    if kind == "set/interval":
        m = re.fullmatch(r"(\\left)?\(([^()]*),([^()]*?)(\\right)?([\])])", a)
        if m and "infty" not in m.group(2):
            out.append(("closed end", f"{m.group(1) or ''}[{m.group(2)},{m.group(3)}{m.group(4) or ''}{m.group(5)}"))
    if kind == "tuple" and a.startswith("(") and a.endswith(")"):
        coords = _split_top(a[1:-1])
        if len(coords) >= 2 and coords[0].strip() != coords[1].strip():
            out.append(("swapped", "(" + ",".join([coords[1], coords[0], *coords[2:]]) + ")"))
    return out


def _last_box_span(text: str) -> tuple[int, int] | None:
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for k in range(brace, len(text)):
        depth += text[k] == "{"
        depth -= text[k] == "}"
        if depth == 0:
            return brace + 1, k
    return None


def build_items(data_dir: Path) -> list[dict[str, Any]]:
    """Every (response, reference, must-accept) case of the three sources, with its type and source."""
    items: list[dict[str, Any]] = []
    math500 = [json.loads(line) for line in (data_dir / "math500.jsonl").open(encoding="utf-8")]
    texts = [r["answer"] for r in math500 if answer_type(r["answer"]) == "text"]
    for r in math500:
        kind = answer_type(r["answer"])
        span = _last_box_span(r["solution"])
        base = {"ground_truth": r["answer"], "type": kind, "id": r["unique_id"]}
        items.append({**base, "response": r["solution"], "right": True, "source": "MATH-500 solution"})
        for how, wrong in perturbations(r["answer"], kind, texts):
            if span is not None:
                response = r["solution"][: span[0]] + wrong + r["solution"][span[1] :]
            else:
                response = f"{r['solution']}\n\nThe answer is $\\boxed{{{wrong}}}$."
            perturbed = {"response": response, "right": False, "source": "MATH-500 perturbed", "wrong": wrong}
            items.append({**base, **perturbed, "how": how})
    for r in map(json.loads, (data_dir / "math_verify_cases.jsonl").open(encoding="utf-8")):
        items.append(
            {
                "ground_truth": r["gold"],
                "type": answer_type(r["gold"]),
                "id": f"{r['test_file']}::{r['test_name']}",
                "response": r["pred"],
                "right": bool(r["expected"]),
                "source": "Math-Verify cases",
                "options": {"strict": r["compare_kwargs"].get("strict", True)},
            }
        )
    for r in map(json.loads, (data_dir / "math_model_outputs.jsonl").open(encoding="utf-8")):
        origin = "labelled GSM8K" if r["dataset"].startswith("gsm8k") else "labelled MATH"
        items.append(
            {
                "ground_truth": r["gold"],
                "type": answer_type(r["gold"]),
                "id": r["problem_id"],
                "response": r["response"],
                "right": bool(r["label"]),
                "source": origin,
            }
        )
    return items


def _verify(item: dict[str, Any]) -> dict[str, Any]:
    payload = {"response": item["response"], "ground_truth": item["ground_truth"], "timeout_s": 5.0}
    v = verify_payload({**payload, "options": item.get("options")})
    return {"reward": v["reward"], "status": v["status"], "extracted": v["extracted_answer"]}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} x {os.cpu_count()}"


def _commit() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f}%)" if n else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=Path(os.environ.get("RLVR_DATA_DIR", "../shared/data")))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--show-misses", type=int, default=3, help="misses to print per type and direction")
    args = ap.parse_args()
    if not (args.data_dir / "math500.jsonl").exists():
        sys.exit(f"no math500.jsonl in {args.data_dir}: set RLVR_DATA_DIR to the benchmark data folder")

    items = build_items(args.data_dir)
    load_before = os.getloadavg()
    start = time.perf_counter()
    with multiprocessing.get_context("forkserver").Pool(args.workers, initializer=init_worker) as pool:
        verdicts = pool.map(_verify, items, chunksize=16)
    elapsed = time.perf_counter() - start

    # (type, source) -> counts: right accepted, right n, wrong refused, wrong n, no verdict
    cells: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    misses: dict[tuple[str, bool], list[str]] = defaultdict(list)
    for item, v in zip(items, verdicts, strict=True):
        cell = cells[item["type"], item["source"]]
        if v["reward"] is None:
            cell["none"] += 1
            cell[f"none:{v['status']}"] += 1
            continue
        key = "right" if item["right"] else "wrong"
        cell[key] += 1
        good = (v["reward"] == 1.0) == item["right"]
        cell[f"{key}_ok"] += good
        if not good and len(misses[item["type"], item["right"]]) < args.show_misses:
            shown = item.get("wrong", v["extracted"])
            misses[item["type"], item["right"]].append(
                f"{item['source']} {item.get('how', '')} {item['id']}: reference {item['ground_truth']!r}, "
                f"answer {shown!r}"
            )

    sources = ("MATH-500 solution", "MATH-500 perturbed", "labelled MATH", "labelled GSM8K", "Math-Verify cases")
    print(
        "| answer type | MATH-500 solutions accepted | perturbed refused | labelled right accepted "
        "| labelled wrong refused | Math-Verify cases: equal accepted | unequal refused | no verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    totals: Counter[str] = Counter()
    for kind in TYPES:
        sol, per = cells[kind, sources[0]], cells[kind, sources[1]]
        lab = cells[kind, sources[2]] + cells[kind, sources[3]]
        mv = cells[kind, sources[4]]
        none = sum(cells[kind, s]["none"] for s in sources)
        for c in (sol, per, lab, mv):
            totals.update({k: v for k, v in c.items() if not k.startswith("none")})
        totals["none"] += none
        print(
            f"| {kind} | {_pct(sol['right_ok'], sol['right'])} | {_pct(per['wrong_ok'], per['wrong'])} "
            f"| {_pct(lab['right_ok'], lab['right'])} | {_pct(lab['wrong_ok'], lab['wrong'])} "
            f"| {_pct(mv['right_ok'], mv['right'])} | {_pct(mv['wrong_ok'], mv['wrong'])} | {none} |"
        )
    print(
        f"| **all** | | | | | | | {totals['none']} |\n\n"
        f"Right answers accepted: {_pct(totals['right_ok'], totals['right'])}; "
        f"wrong answers refused: {_pct(totals['wrong_ok'], totals['wrong'])}."
    )
    statuses = Counter()
    for (_, _), c in cells.items():
        statuses.update({k[5:]: v for k, v in c.items() if k.startswith("none:")})
    print(f"No verdict, by status: {dict(statuses) or 'none'}")
    counts = Counter(item["type"] for item in items if item["source"] == sources[0])
    print(f"MATH-500 answers by type: {dict(counts)}")
    for (kind, right), shown in sorted(misses.items()):
        print(f"\n{'right answers refused' if right else 'wrong answers accepted'} ({kind}):")
        for line in shown:
            print(f"  {line[:300]}")
    print(
        f"\n{len(items)} items in {elapsed:.1f} s on {args.workers} workers; rlvr {_commit()}, "
        f"math-verify {version('math-verify')}, sympy {version('sympy')}, Python {platform.python_version()}; "
        f"CPU {_cpu()}; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
