"""The format verifier: every case in cases/format.jsonl, and variants of each fault's kind."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from reward_server.schemas.format import DEFAULT_END_OF_TURN_TOKENS, DEFAULT_START_OF_TURN_TOKENS, FormatParams
from reward_server.verifiers.format import check_format, score_format
from reward_server.verifiers.markup import chain_of_thought, code_spans
from tests.conftest import cases_dir, cases_or_placeholder, require_file

STRICT = FormatParams()
SOFT = FormatParams(mode="soft")
PREFILLED = FormatParams(think_prefilled=True)


def _cases() -> list[dict]:
    path = cases_dir() / "format.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("mode", ["strict", "soft"])
@pytest.mark.parametrize("case", cases_or_placeholder(_cases(), "format.jsonl"), ids=lambda c: c["id"])
def test_shared_case(case: dict, mode: str) -> None:
    require_file(cases_dir() / "format.jsonl")
    prompt_tail = case["input"].get("prompt_tail", "")
    params = FormatParams(mode=mode, think_prefilled=prompt_tail.rstrip().endswith("<think>"))
    result = score_format(case["input"]["completion"], params)
    expected = case["expected"]
    assert result.info["format_ok"] is expected["format_ok"], result.detail
    assert (result.score == 1.0) is expected["format_ok"]
    if "extracted_answer" in expected:
        assert result.info["answer"] == expected["extracted_answer"]
    if not expected["format_ok"]:
        assert result.status == "bad_format" and result.detail


def test_shared_cases_present() -> None:
    require_file(cases_dir() / "format.jsonl")
    assert len(_cases()) >= 6


# Each row: completion, params, format_ok, extracted answer, reason (the kind of fault it varies).
WELL_FORMED = [
    ("<think>\nline one\n\nline two\n</think>\n<answer>\n12\n</answer>", STRICT, "12", "001: newlines everywhere"),
    ("<think>\r\nwindows\r\nnewlines\r\n</think>\r\n<answer>7</answer>\r\n", STRICT, "7", "001: CRLF"),
    ("  <think>a</think><answer>x = 3</answer>", STRICT, "x = 3", "leading blanks are not text"),
    ("<think>steps</think>\nThe answer is \\boxed{42}.", STRICT, "The answer is \\boxed{42}.", "R1: bare answer"),
    ("so 6*7 = 42\n</think>\n<answer>42</answer>", PREFILLED, "42", "004: prefilled, other values"),
    ("\n</think> 5", FormatParams(think_prefilled=True, min_think_chars=1), None, "004: prefilled but empty"),
    ("<think>t</think><answer>1</answer><|im_end|>", STRICT, "1", "005: trailing ChatML end-of-turn"),
    ("<think>t</think><answer>1</answer>\n<|eot_id|>\n<|end_of_text|>\n", STRICT, "1", "005: several EOT tokens"),
    ("<think>t</think><answer>1</answer><｜end▁of▁sentence｜>", STRICT, "1", "005: DeepSeek EOS"),
    ("<think>\n```python\nprint('</think>')\n```\nok</think><answer>2</answer>", STRICT, "2", "tag in fenced code"),
    ("<think>\n~~~~\n<answer>1</answer>\n~~~~\n</think><answer>2</answer>", STRICT, "2", "tags in a tilde fence"),
    ("<think>the tag `<answer>` comes later</think><answer>3</answer>", STRICT, "3", "tag in inline code"),
    ("<think>a</think><answer>`<think>` is a tag</answer>", STRICT, "`<think>` is a tag", "tag in code in answer"),
    (
        "<reasoning>r</reasoning><solution>9</solution>",
        FormatParams(think_tag="reasoning", answer_tag="solution"),
        "9",
        "configurable tag names",
    ),
]


@pytest.mark.parametrize(("completion", "params", "answer", "reason"), WELL_FORMED, ids=[r[3] for r in WELL_FORMED])
def test_well_formed(completion: str, params: FormatParams, answer: str | None, reason: str) -> None:
    result = score_format(completion, params)
    if answer is None:  # the one row here that must fail: prefilled, but nothing was thought
        assert result.score == 0.0 and result.info["checks"]["think_nonempty"] is False
        return
    assert result.score == 1.0, result.detail
    assert result.status == "ok" and result.detail is None
    assert result.info["answer"] == answer


MALFORMED = [
    ("<think>a</think><answer>1</answer></answer>", "answer_close", "002: duplicate </answer>, no newlines"),
    ("<think>a</think></think><answer>1</answer>", "think_close", "002: duplicate </think>"),
    ("<think>a</think><answer>1<answer>2</answer>", "answer_open", "002: duplicate <answer>"),
    ("<think><think>a</think><answer>1</answer>", "think_open", "002/008: duplicate <think>"),
    ("<think>a<think>b</think>c</think><answer>1</answer>", "think_open", "008: nested think"),
    ("<think>a <answer>1</answer></think><answer>1</answer>", "answer_open", "008: answer nested in think"),
    ("<think>p</think><answer>1</answer><think>q</think>", "think_open", "008: think after answer"),
    ("<think>x</think><answer>5</answer>\nBecause 2+3.", "nothing_else", "005: prose after answer"),
    ("<think>x</think><answer>5</answer><|im_end|>more", "nothing_else", "005: text after an EOT token"),
    ("<think>x</think>\nSo:\n<answer>5</answer>", "nothing_else", "text between </think> and <answer>"),
    ("<think>\n \n\t</think><answer>7</answer>", "think_nonempty", "007: blank think block"),
    ("Sure! <think>x</think><answer>5</answer>", "think_open", "text before <think>"),
    ("x</think><answer>5</answer>", "think_open", "004 kind: missing <think> when not prefilled"),
    ("<THINK>x</THINK><answer>5</answer>", "think_open", "non-canonical tag spelling"),
    ("<think>x</think><answer> </answer>", "answer_nonempty", "empty answer"),
    ("<think>x</think>", "answer_nonempty", "no answer at all"),
    ("<think>x\n```\nopen fence</think><answer>5</answer>", "think_close", "unclosed fence hides the rest"),
    ("<think>x</think><answer>5", "answer_close", "unclosed answer"),
]


@pytest.mark.parametrize(("completion", "failed_check", "reason"), MALFORMED, ids=[r[2] for r in MALFORMED])
@pytest.mark.parametrize("mode", ["strict", "soft"])
def test_malformed(completion: str, failed_check: str, reason: str, mode: str) -> None:
    result = score_format(completion, FormatParams(mode=mode))
    assert result.info["format_ok"] is False and result.info["answer"] is None
    assert result.info["checks"][failed_check] is False
    assert result.status == "bad_format"
    assert result.score < 1.0 if mode == "soft" else result.score == 0.0


def test_prefilled_completion_must_not_reopen_think() -> None:
    result = score_format("<think>again</think><answer>1</answer>", PREFILLED)
    assert result.info["checks"]["think_open"] is False and result.score == 0.0


def test_prefilled_completion_fails_when_not_declared() -> None:
    assert score_format("6*7 = 42\n</think>\n<answer>42</answer>", STRICT).score == 0.0


@pytest.mark.parametrize("token", DEFAULT_END_OF_TURN_TOKENS)
def test_every_default_end_of_turn_token_may_trail(token: str) -> None:
    assert score_format(f"<think>t</think><answer>1</answer>{token}", STRICT).score == 1.0


def test_custom_end_of_turn_tokens_replace_the_defaults() -> None:
    params = FormatParams(end_of_turn_tokens=("[END]",))
    assert score_format("<think>t</think><answer>1</answer>[END]", params).score == 1.0
    assert score_format("<think>t</think><answer>1</answer><|im_end|>", params).score == 0.0


def test_soft_scores_are_the_share_of_checks_passed() -> None:
    # 7 checks with answer tags: trailing prose fails only nothing_else -> 6/7.
    assert score_format("<think>x</think><answer>5</answer> and more", SOFT).score == pytest.approx(6 / 7)
    # Bare answer: the same 7 checks; empty thinking fails one -> 6/7 (it was 3/4 of 4 checks before).
    assert score_format("<think></think> 42", SOFT).score == pytest.approx(6 / 7)
    # Interleaved pairs (cases format-008): every tag is doubled, so only nothing_else (vacuous) passes: 1/7.
    interleaved = "<think>partial</think><answer>1</answer><think>more work</think><answer>2</answer>"
    assert score_format(interleaved, SOFT).score == pytest.approx(1 / 7)


# The same fault in the bare and the tagged layout costs the same in soft mode: both have the same 7 checks.
# Each row: bare completion, tagged completion, expected soft score (passed checks / 7), reason.
SAME_SCALE = [
    ("<think></think>42", "<think></think><answer>42</answer>", 6 / 7, "empty thinking"),
    ("x</think>42", "x</think><answer>42</answer>", 6 / 7, "missing <think>"),
    ("<think>x</think>", "<think>x</think><answer></answer>", 6 / 7, "empty answer"),
    ("<think>x</think>4<|im_end|>2", "<think>x</think><answer>4<|im_end|>2</answer>", 6 / 7, "text after EOT"),
    ("<think>x</think></think>42", "<think>x</think></think><answer>42</answer>", 2 / 7, "duplicated </think>"),
    ("<think>x 42", "<think>x <answer>42</answer>", 2 / 7, "missing </think>"),
    ("just 42", "just <answer>42</answer>", 1 / 7, "no layout at all"),
    ("<think>x</think>42", "<think>x</think><answer>42</answer>", 1.0, "well formed"),
]


@pytest.mark.parametrize(("bare", "tagged", "expected", "reason"), SAME_SCALE, ids=[r[3] for r in SAME_SCALE])
def test_bare_and_tagged_layouts_score_on_one_scale(bare: str, tagged: str, expected: float, reason: str) -> None:
    bare_result, tagged_result = score_format(bare, SOFT), score_format(tagged, SOFT)
    assert list(bare_result.info["checks"]) == list(tagged_result.info["checks"])
    assert len(bare_result.info["checks"]) == 7
    assert bare_result.score == pytest.approx(expected) and tagged_result.score == pytest.approx(expected)


@pytest.mark.parametrize("token", DEFAULT_END_OF_TURN_TOKENS)
@pytest.mark.parametrize(
    "completion",
    [
        "<think>x</think>42{eot}garbage",  # bare layout: the answer would swallow what follows the token
        "<think>x</think>42{eot}\n<|im_start|>user\nand now?",
        "<think>x</think>42 {eot} {eot} 43{eot}",  # trailing tokens may follow, but not text between them
        "<think>x</think><answer>42{eot}more</answer>",
        "<think>x</think><answer>42</answer>{eot}<answer>43</answer>",
    ],
)
def test_text_after_an_end_of_turn_token_fails(completion: str, token: str) -> None:
    result = score_format(completion.format(eot=token), STRICT)
    assert result.score == 0.0 and result.info["checks"]["nothing_else"] is False and result.info["answer"] is None


def test_end_of_turn_token_inside_code_or_thinking_is_text() -> None:
    answer = "ChatML ends a turn with `<|im_end|>`, then the user speaks."
    result = score_format(f"<think>x</think>{answer}<|im_end|>", STRICT)
    assert result.score == 1.0 and result.info["answer"] == answer
    # The thinking may discuss chat templates: only what follows </think> is searched for the tokens.
    completion = "<think>Qwen ends each turn with <|im_end|> and then a newline.</think>\n42<|im_end|>"
    assert score_format(completion, STRICT).score == 1.0


# Whitespace of every kind and the invisible (default-ignorable) characters are blank.
INVISIBLE = [
    "\u200b",  # zero-width space
    "\u200c\u200d",  # zero-width non-joiner and joiner
    "\u2060",  # word joiner
    "\ufeff",  # BOM / zero-width no-break space
    "\u00ad",  # soft hyphen
    "\u3164",  # Hangul filler
    "\u2800",  # Braille blank
    "\u180e",  # Mongolian vowel separator (no longer whitespace in Unicode)
    "\ufe0f",  # variation selector
    "\u00a0\u3000\u2003",  # no-break, ideographic and em spaces
    "\u200b \n\u2060\t",
]


@pytest.mark.parametrize("blank", INVISIBLE, ids=[repr(b) for b in INVISIBLE])
@pytest.mark.parametrize("mode", ["strict", "soft"])
def test_invisible_characters_are_blank(blank: str, mode: str) -> None:
    params = FormatParams(mode=mode)
    thinking = score_format(f"<think>{blank}</think>42", params)
    assert thinking.info["checks"]["think_nonempty"] is False and thinking.score < 1.0
    bare = score_format(f"<think>x</think>{blank}", params)
    assert bare.info["checks"]["answer_nonempty"] is False and bare.score < 1.0
    tagged = score_format(f"<think>x</think><answer>{blank}</answer>", params)
    assert tagged.info["checks"]["answer_nonempty"] is False and tagged.score < 1.0
    # Blank before <think> or around the answer is allowed, and is stripped from the answer.
    padded = score_format(f"{blank}<think>x</think><answer>{blank}42{blank}</answer>{blank}", params)
    assert padded.score == 1.0 and padded.info["answer"] == "42"


def test_min_think_chars_does_not_count_invisible_characters() -> None:
    params = FormatParams(min_think_chars=5)
    assert score_format("<think>a\u200bb\u200bc\u200bd\u200b</think>1", params).score == 0.0  # 4 visible
    assert score_format("<think>a\u200bb\u200bc\u200bd\u200be</think>1", params).score == 1.0


def test_many_trailing_end_of_turn_tokens() -> None:
    completion = "<think>x</think><answer>42</answer>" + "<|im_end|>\n" * 15_000
    result = score_format(completion, STRICT)
    assert result.score == 1.0 and result.info["answer"] == "42"


def test_empty_thinking_scores_below_real_thinking_in_both_modes() -> None:
    for params in (STRICT, SOFT):
        empty = score_format("<think></think><answer>7</answer>", params).score
        real = score_format("<think>3 + 4 = 7</think><answer>7</answer>", params).score
        assert empty is not None and real == 1.0 and empty < real


def test_min_think_chars_counts_non_blank_characters() -> None:
    params = FormatParams(min_think_chars=5)
    assert score_format("<think>a b c d</think><answer>1</answer>", params).score == 0.0  # 4 non-blank
    assert score_format("<think>a b c d e</think><answer>1</answer>", params).score == 1.0


def test_require_answer_tag() -> None:
    params = FormatParams(require_answer_tag=True)
    assert score_format("<think>t</think> 42", params).info["checks"]["answer_open"] is False
    assert score_format("<think>t</think><answer>42</answer>", params).score == 1.0
    assert score_format("<think>t</think> 42", STRICT).score == 1.0


def test_report_names_every_failed_check() -> None:
    report = check_format("<think>a</think><answer>1</answer></answer>", STRICT)
    assert not report.ok
    assert [name for name, passed in report.checks.items() if not passed] == ["answer_close", "answer_nonempty"]
    assert len(report.problems) == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"mode": "lenient"}, "mode"),
        ({"think_tag": "think>"}, "think_tag"),
        ({"min_think_chars": 0}, "min_think_chars"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_params_name_the_field(params: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        FormatParams(**params)
    assert field in str(info.value)


def test_think_and_answer_tags_must_differ() -> None:
    with pytest.raises(ValidationError, match="must differ"):
        FormatParams(think_tag="x", answer_tag="X")


def test_code_spans() -> None:
    text = "a `b` c\n```\nd `\n```\n`` e ` f `` g ` h\n~~~\nunclosed"
    spans = [text[a:b] for a, b in code_spans(text)]
    assert spans == ["`b`", "```\nd `\n```", "`` e ` f ``", "~~~\nunclosed"]


def test_code_spans_lines_and_fences_as_commonmark() -> None:
    # Lines end at "\n", "\r\n" or a lone "\r".
    text = "a\r```\r<think>\r```\rb `c` d"
    assert [text[a:b] for a, b in code_spans(text)] == ["```\r<think>\r```", "`c`"]
    # A tab before the closing fence is four columns of indentation: it does not close the fence.
    text = "```\nx\n\t```\ny"
    assert [text[a:b] for a, b in code_spans(text)] == [text]
    # A backtick fence whose info string holds a backtick is not a fence; its runs are inline code.
    text = "``` a ` b ```\nc"
    assert [text[a:b] for a, b in code_spans(text)] == ["``` a ` b ```"]


# Each row: completion, the clause its detail must hold, a clause it must not hold (the old, false one).
DETAILS = [
    # Without one </think> the boundary is unknown: the detail says so, not "the thinking is empty" or
    # "found 1 <answer>" as if one answer tag were a fault.
    ("<think>x</think></think><answer>9</answer>", "cannot be told apart", "thinking is empty"),
    ("<think>x</think></think><answer>9</answer>", "cannot be told apart", "<answer> after the thinking, found 1"),
    ("<THINK>x</THINK><answer>9</answer>", "1 misspelled", "thinking is empty"),
    ("<think>x</think><answer>9</answer></answer>", "after one <answer>, found 2", "the answer is empty"),
    # Attributes and a self-closing slash make a tag, only not a canonical one.
    ('<think type="cot">x</think><answer>9</answer>', "found 1 (1 misspelled", "found 0"),
    ("<think/>x</think><answer>9</answer>", "found 1 (1 misspelled", "found 0"),
    ('<think>x</think><answer id="1">9</answer>', "<answer> after the thinking, found 1 (1 misspelled", "found 0"),
]


@pytest.mark.parametrize(("completion", "says", "not_says"), DETAILS)
def test_details_name_the_real_fault(completion: str, says: str, not_says: str) -> None:
    result = score_format(completion, STRICT)
    assert result.score == 0.0 and result.detail is not None
    assert says in result.detail and not_says not in result.detail, result.detail


def test_tags_with_attributes_are_tags() -> None:
    # A stray tag with attributes inside the answer is a second <think>, not text.
    result = score_format('<think>x</think><answer>9 <think mode="again"></answer>', STRICT)
    assert result.info["checks"]["think_open"] is False
    # "<thinking>" is another name, and stays text.
    assert score_format("<think>use <thinking> here</think><answer>9</answer>", STRICT).score == 1.0
    # The chain of thought starts after an opening tag with attributes.
    assert chain_of_thought('<think effort="high">a b</think> c') == "a b"


def test_prose_fences_for_the_language_check_only() -> None:
    text = "a\n```text\nprose `x`\n```\n```\nunclosed `y`"
    # The format check: CommonMark, every fence is code to its close (or the end).
    assert [text[a:b] for a, b in code_spans(text)] == ["```text\nprose `x`\n```", "```\nunclosed `y`"]
    # The language check: a prose fence and an unclosed one give their fence lines; their bodies are text.
    spans = [text[a:b] for a, b in code_spans(text, prose_fences=True)]
    assert spans == ["```text", "`x`", "```", "```", "`y`"]
    # A tag in a prose fence is still text to the format check.
    completion = "<think>\n```text\n</think>\n```\nreal thinking</think><answer>9</answer>"
    assert score_format(completion, STRICT).score == 1.0


def test_inline_spans_pair_each_run_with_the_next_of_its_width() -> None:
    text = "`a ``b`` c` ``` d ``x"
    assert [text[a:b] for a, b in code_spans(text)] == ["`a ``b`` c`"]
    # Runs of 299 widths (the input that made the forward search quadratic): the first run pairs with the
    # next single backtick, and the last one is literal.
    widths = "".join("`" * k + " " for k in range(1, 300))
    text = widths + "`z`"
    assert code_spans(text) == [(0, len(widths) + 1)]


def test_chain_of_thought() -> None:
    assert chain_of_thought("<think>a</think> b") == "a"
    assert chain_of_thought("pre-filled a</think> b") == "pre-filled a"
    assert chain_of_thought("no tags") == "no tags"
    assert chain_of_thought("<think>open to the end") == "open to the end"
    assert chain_of_thought("<think>a</think>x<think>b</think>") == "a\nb"
    assert chain_of_thought("<think>`</think>` a</think> b") == "`</think>` a"


# --- Real model-output layouts and chat-template artefacts (held-out probes) -------------------------------

R1_THINKING = "<think>\nOkay, so 2 + 2. Wait, is it 4? Hmm, let me check: 2 + 2 = 4. Yes.\n</think>\n\n"


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        # DeepSeek-R1's own layout: a bold header and a box after the thinking.
        (R1_THINKING + "**Final Answer**\n\\boxed{4}", "**Final Answer**\n\\boxed{4}"),
        (R1_THINKING + "## Answer\n| x | y |\n|---|---|\n| 4 | 🎉 |", "## Answer\n| x | y |\n|---|---|\n| 4 | 🎉 |"),
        # End of turn, then the padding of a batch decoded without skipping special tokens.
        (R1_THINKING + "\\boxed{4}<|im_end|>" + "<|endoftext|>" * 5, "\\boxed{4}"),
        (R1_THINKING + "\\boxed{4}<｜end▁of▁sentence｜>" + "<｜▁pad▁｜>" * 5, "\\boxed{4}"),
        (R1_THINKING + "\\boxed{4}<|end▁of▁sentence|>", "\\boxed{4}"),  # ASCII bars, U+2581 between words
        (R1_THINKING + "\\boxed{4}<|eot_id|><|finetune_right_pad_id|><|finetune_right_pad_id|>", "\\boxed{4}"),
        (R1_THINKING + "\\boxed{4}</s></s><pad><pad>", "\\boxed{4}"),
        # A completion decoded with its role header.
        ("<|im_start|>assistant\n" + R1_THINKING + "4<|im_end|>", "4"),
        ("<｜begin▁of▁sentence｜><｜Assistant｜>" + R1_THINKING + "4<｜end▁of▁sentence｜>", "4"),
        ("<|start_header_id|>assistant<|end_header_id|>\n\n" + R1_THINKING + "4<|eot_id|>", "4"),
    ],
)
def test_real_model_layouts(completion: str, answer: str) -> None:
    for params in (STRICT, SOFT):
        result = score_format(completion, params)
        assert (result.score, result.info["answer"]) == (1.0, answer), result.detail


@pytest.mark.parametrize("token", DEFAULT_START_OF_TURN_TOKENS)
def test_every_default_start_of_turn_token_may_lead(token: str) -> None:
    assert score_format(f"{token}\n<think>t</think><answer>1</answer>", STRICT).score == 1.0
    # Text before the header, or between it and <think>, is still text before the thinking.
    for completion in (f"hi {token}<think>t</think>1", f"{token}\nhi<think>t</think>1"):
        result = score_format(completion, SOFT)
        assert result.info["checks"]["think_open"] is False and result.score == pytest.approx(6 / 7)


def test_start_of_turn_tokens_are_a_parameter() -> None:
    params = FormatParams(start_of_turn_tokens=())
    assert score_format("<|im_start|>assistant\n<think>t</think>1", params).score == 0.0
    # A token that is the think tag itself (think_tag "s" and "<s>") stays the layout's tag.
    assert score_format("<s>x</s><a>4</a>", FormatParams(think_tag="s", answer_tag="a")).score == 1.0


@pytest.mark.parametrize("closer", ["</THINK>", "</think >", "< /think>", '</think id="1">'])
def test_misspelled_closing_tag_costs_one_check(closer: str) -> None:
    """A single misspelled ``</think>`` still ends the thinking, so soft mode loses only ``think_close``."""
    for completion in (f"<think>x{closer}<answer>4</answer>", f"<think>x{closer}4"):
        soft = score_format(completion, SOFT)
        assert soft.score == pytest.approx(6 / 7), soft.detail
        assert [k for k, v in soft.info["checks"].items() if not v] == ["think_close"]
        assert score_format(completion, STRICT).score == 0.0
    # Still nothing gained by a misspelled tag: an empty thinking or answer fails as it would otherwise.
    assert score_format(f"<think>{closer}4", SOFT).score == pytest.approx(5 / 7)
    assert score_format(f"<think>x{closer}", SOFT).score == pytest.approx(5 / 7)
    # Two closing tags, one misspelled, leave the boundary unknown.
    assert score_format(f"<think>x</think>{closer}4", SOFT).score == pytest.approx(2 / 7)


def test_misspelled_opening_tag_ends_the_header() -> None:
    # The thinking starts after "<THINK>", so the tag's own text is not thinking.
    assert score_format("<THINK></think>4", SOFT).score == pytest.approx(5 / 7)
    assert score_format("<THINK>x</think>4", SOFT).score == pytest.approx(6 / 7)
