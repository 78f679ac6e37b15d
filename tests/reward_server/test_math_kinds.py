"""The kinds of input on which the verdicts disagreed with other projects' test suites (issue 15), one table
per kind, with values of our own. Each row: (response, reference, expected correct, why)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from reward_server.verifiers.math import MathStatus, extract_final_answer, verify_math
from reward_server.verifiers.math.forms import code_to_latex, read_number_words


def _check(response: str, reference: str, expected: bool) -> None:
    verdict = verify_math(response, reference)
    assert verdict.status in (MathStatus.OK, MathStatus.NO_ANSWER), verdict
    assert verdict.correct is expected, verdict


SPECIAL_TOKENS = [
    ("The train covers 135 km<|im_end|>", "135", True, "ChatML end of turn glued to the value"),
    ("The train covers 135 km<|im_end|>", "13", False, "the token is gone, the value is still compared"),
    ("Hence she keeps 0.75<|eot_id|>", "3/4", True, "Llama 3 end of turn"),
    ("So we need 404 tiles<|endoftext|><|endoftext|><|endoftext|>", "404", True, "padding after end of text"),
    ("The remainder is 6</s>", "6", True, "Llama 2 end of sequence"),
    ("The remainder is 6</", "6", True, "the end-of-sequence token cut off by the length limit"),
    ("The remainder is 6<|eot", "6", True, "a token cut off after three characters"),
    ("Total: 81im_end|>", "81", True, "a token that lost its '<|' in decoding"),
    ("Total: 81|endoftext|>", "81", True, "a token that lost its '<'"),
    ("Result 27<｜end▁of▁sentence｜>", "27", True, "DeepSeek's full-width end of sentence"),
    ("<|im_start|>assistant\nThe count is 19<|im_end|>", "19", True, "role header before, end of turn after"),
    ("The answer is 30<|im_end|>\n<|im_start|>user\nNow 31?", "30", True, "a turn after the end is not the answer"),
    ("The answer is 30<|im_end|>\n<|im_start|>user\nNow 31?", "31", False, "the later turn is never read"),
    ("\\boxed{0<|y|<2}", "0<|y|<2", True, "'<|' and '|>' inside math are not a token"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), SPECIAL_TOKENS, ids=[r[3] for r in SPECIAL_TOKENS]
)
def test_special_tokens_are_not_part_of_the_value(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


ANSWER_LINE_PROSE = [
    ("The answer is 64 and then we are finished with the problem", "64", True, "'and then we' starts a new clause"),
    ("The answer is 64 so the tank holds a lot", "64", True, "'so the' after the value; 'a lot' is not the answer"),
    ("The answer is 64 but we should double check it", "64", True, "'but we' after the value"),
    ("Final answer: 9 which is odd", "9", True, "'which' after the value"),
    ("The answer is 64 and it is a perfect square", "64", True, "'and it is' is prose, not a second value"),
    ("The answer is 64 and it is a perfect square", "8", False, "the later word is never the answer"),
    ("The answer is 7 or 8 depending on the reading", "7", False, "a hedge stays a hedge"),
    ("The answer is $x = 11$ and we are done", "11", True, "math, then prose"),
    ("Answer: 3 apples and 4 pears", "3", False, "two values joined by 'and' are still two"),
    ("The answer is that the winner is Dara", "Dara", True, "a clause without a value still reads its last 'is'"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), ANSWER_LINE_PROSE, ids=[r[3] for r in ANSWER_LINE_PROSE]
)
def test_prose_after_an_answer_line(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


NUMBER_WORDS = [
    ("\\boxed{418}", "four hundred and eighteen", True, "British 'and' after hundred"),
    ("\\boxed{481}", "four hundred and eighteen", False, "another number"),
    ("\\boxed{33}", "thirty-three", True, "hyphenated"),
    ("\\boxed{33}", "Thirty Three", True, "capitalised, spaced"),
    ("\\boxed{15}", "fifteen", True, "a teen"),
    ("\\boxed{9000}", "nine thousand", True, "a scale word"),
    ("\\boxed{2300000}", "two million three hundred thousand", True, "two scale words"),
    ("\\boxed{-11}", "negative eleven", True, "a sign word"),
    ("\\boxed{8}", "eight marbles", True, "a unit after the number"),
    ("\\boxed{\\frac{3}{5}}", "three fifths", True, "a fraction in words"),
    ("\\boxed{2.5}", "two and a half", True, "a mixed number in words"),
    ("\\boxed{36}", "three dozen", True, "dozen multiplies"),
    ("\\boxed{\\text{fifty-six}}", "56", True, "the answer in words"),
    ("The answer is seventy", "70", True, "an answer line in words"),
    ("The answer is seventy", "17", False, "seventy is not seventeen"),
    ("The answer is one of the two roots", "1", False, "'one of' is prose, not the number 1"),
    ("Answer is eighty one.", "Answer is eighty one.", True, "a reference that is an answer sentence in words"),
]


@pytest.mark.parametrize(("response", "reference", "expected", "why"), NUMBER_WORDS, ids=[r[3] for r in NUMBER_WORDS])
def test_numbers_in_words(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


@pytest.mark.parametrize(
    "reference",
    ["thirty twelve", "seven six", "one fifths", "ninety-something", "sixty or so"],
    ids=["tens then teen", "two units", "singular/plural", "vague", "approximate"],
)
def test_number_words_without_a_value_are_invalid(reference: str) -> None:
    """A reference in number words that names no one value is invalid_ground_truth, never a verdict of 0."""
    verdict = verify_math("\\boxed{30}", reference)
    assert verdict.status is MathStatus.INVALID_GROUND_TRUTH, verdict
    assert verdict.reward is None


def test_read_number_words_values() -> None:
    assert read_number_words("six hundred and seven cows") == (Fraction(607), " cows")
    assert read_number_words("minus nineteen") == (Fraction(-19), "")
    assert read_number_words("five point two five") == (Fraction(21, 4), "")
    assert read_number_words("a thousand") == (Fraction(1000), "")
    assert read_number_words("no one") is None
    with pytest.raises(ValueError):
        read_number_words("forty fifty")


CODE_SYNTAX = [
    ("\\boxed{\\sqrt{13}}", "sqrt(13)", True, "sympy's sqrt"),
    ("\\boxed{\\sqrt{31}}", "sqrt(13)", False, "another radicand"),
    ("\\boxed{4\\sqrt{5}}", "4*sqrt(5)", True, "a product with *"),
    ("\\boxed{\\frac{2\\pi}{5}}", "2*pi/5", True, "pi as a name"),
    ("\\boxed{\\frac{\\pi}{5}}", "2*pi/5", False, "half of it"),
    ("\\boxed{y^{4}+1}", "y**4 + 1", True, "** is a power"),
    ("\\boxed{e^{3}}", "exp(3)", True, "exp is e to the power"),
    ("\\boxed{\\ln 7}", "log(7)", True, "sympy's log is the natural logarithm"),
    ("\\boxed{\\begin{pmatrix} 0 & 5 \\\\ 2 & 9 \\end{pmatrix}}", "Matrix([[0, 5], [2, 9]])", True, "a sympy Matrix"),
    (
        "\\boxed{\\begin{pmatrix} 0 & 5 \\\\ 2 & 8 \\end{pmatrix}}",
        "Matrix([[0, 5], [2, 9]])",
        False,
        "one entry differs",
    ),
    ("\\boxed{\\begin{pmatrix} 3 \\\\ 7 \\end{pmatrix}}", "[[3], [7]]", True, "a nested list is a matrix"),
    ("\\boxed{\\frac{1}{6}}", "Rational(1, 6)", True, "a sympy Rational"),
    ("\\boxed{sqrt(6)/3}", "\\frac{\\sqrt{6}}{3}", True, "the answer in code syntax"),
    ("The answer is 7*sqrt(3)", "7\\sqrt{3}", True, "an answer line in code syntax"),
    ("The answer is 7*sqrt(3)", "3\\sqrt{7}", False, "the factors swapped"),
]


@pytest.mark.parametrize(("response", "reference", "expected", "why"), CODE_SYNTAX, ids=[r[3] for r in CODE_SYNTAX])
def test_code_syntax_is_math(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


def test_code_to_latex_forms() -> None:
    assert code_to_latex("2**(k-1)") == "2^{k-1}"
    assert code_to_latex("abs(t - 4)") == "\\left|t - 4\\right|"
    assert code_to_latex("\\sqrt{2}") == "\\sqrt{2}"  # LaTeX is left alone


MULTIPLE_VALUES = [
    ("\\boxed{(3,8),(6,2)}", "m=3,n=8; m=6,n=2", True, "assignment groups are tuples"),
    ("\\boxed{(6,2),(3,8)}", "m=3,n=8; m=6,n=2", True, "tuples in any order"),
    ("\\boxed{(8,3),(2,6)}", "m=3,n=8; m=6,n=2", False, "components swapped"),
    ("\\boxed{3, 8, 6, 2}", "m=3,n=8; m=6,n=2", False, "a flat list is not two tuples"),
    ("\\boxed{m=6,n=2; m=3,n=8}", "m=3,n=8; m=6,n=2", True, "the answer in the same form"),
    ("\\boxed{(m, n) = (3, 8), (6, 2)}", "m=3,n=8; m=6,n=2", True, "tuples named by their components"),
    ("\\boxed{(3,8)}", "m=3,n=8; m=6,n=2", False, "one of the two solutions"),
    ("The pair is $\\boxed{(2, 5)}$ for part (a) and $\\boxed{(4, 0)}$ for part (b).", "(2, 5), (4, 0)", True, "parts"),
    ("$\\boxed{7}$ for part (a) and $\\boxed{10}$ for part (b)", "7, 11", False, "part (b) is wrong"),
    ("\\(p = \\boxed{4}\\) and \\(q = \\boxed{9}\\)", "p=4, q=9", True, "labelled boxes against a system"),
    ("\\(p = \\boxed{9}\\) and \\(q = \\boxed{4}\\)", "p=4, q=9", False, "labels swapped"),
    ("\\boxed{7}, no wait, it should be \\boxed{11}", "7, 11", False, "a correction is not a second part"),
    ("\\boxed{7} or maybe \\boxed{11}", "7", False, "a hedge across boxes"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), MULTIPLE_VALUES, ids=[r[3] for r in MULTIPLE_VALUES]
)
def test_multiple_valued_answers(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


MULTIPLE_CHOICE = [
    ("E", "E", True, "the letter alone"),
    ("E", "B", False, "another letter alone"),
    ("(B)", "B", True, "in parentheses"),
    ("**D**", "D", True, "in bold"),
    ("A)", "A", True, "with a closing parenthesis"),
    (": C", "C", True, "after a colon, as a filter leaves it"),
    ("G. The others do not fit", "G", True, "a letter first, then prose"),
    ("Reading the options again, I am sure it's F", "F", True, "a letter right after 'it's'"),
    ("The answer is E, not B or D", "E", True, "the other letters are ruled out"),
    ("The answer is E, not B or D", "B", False, "a ruled-out letter is not the answer"),
    ("The correct option is (C) rather than (A)", "C", True, "rather than"),
    ("Answer: H, it can't be F", "H", True, "it can't be"),
    ("The answer is B or D", "B", False, "two letters named: a hedge"),
    ("La réponse est D, pas A", "D", True, "French"),
    ("Die Antwort ist E und nicht C", "E", True, "German"),
    ("La respuesta es A, no C", "A", True, "Spanish"),
    ("答案是D，而不是B", "D", True, "Chinese"),
    ("C不是 A", "C", True, "Chinese, the letter first"),
    ("Ответ: C, а не A", "C", True, "Russian"),
    ("\\boxed{\\mathcal{D}}", "D", True, "a letter in another font"),
    ("B", "(B) 32", True, "a reference that states its option's text"),
    ("B", "B Osman", True, "a reference with a name after the letter"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), MULTIPLE_CHOICE, ids=[r[3] for r in MULTIPLE_CHOICE]
)
def test_multiple_choice(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


MORE_LANGUAGES = [
    ("La réponse est 252.", "252", True, "French"),
    ("Réponse finale : 252", "252", True, "French, final"),
    ("Die endgültige Antwort lautet 252", "252", True, "German"),
    ("La respuesta correcta es 252", "252", True, "Spanish"),
    ("A resposta final é 252", "252", True, "Portuguese"),
    ("La risposta è 252", "252", True, "Italian"),
    ("Jawabannya adalah 252", "252", True, "Indonesian"),
    ("Jibu ni 252", "252", True, "Swahili"),
    ("उत्तर: 252", "252", True, "Hindi"),
    ("সুতরাং উত্তর: 252", "252", True, "Bengali"),
    ("الإجابة: 252", "252", True, "Arabic"),
    ("答复：252", "252", True, "Chinese, another word"),
    ("最终答案为 252", "252", True, "Chinese, 'is' as 为"),
    ("La réponse est 252.", "253", False, "the value still counts"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), MORE_LANGUAGES, ids=[r[3] for r in MORE_LANGUAGES]
)
def test_answer_lines_in_more_languages(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


OTHER_SCRIPTS = [
    ("所以概率是7/16", "7/16", True, "a fraction glued to Han text keeps its numerator"),
    ("所以概率是7/16", "16", False, "the denominator alone is not the value"),
    ("Вероятность равна3/10", "3/10", True, "glued to Cyrillic"),
    ("先算 6 * 7 = 42\n2. **结论**", "42", True, "a bold list item after the last value"),
    ("Adding gives 42.\n4. **Check**", "42", True, "the same in English"),
    ("Adding gives 42.\n4. **Check**", "4", False, "the item number is not the value"),
    ("Steps:\n1. Add the parts.\n2. Compare.", "2", False, "a counted list is no value"),
    ("Réponse : il faut 14 jours pour 3 ouvriers.", "14", True, "French: the value nearest the phrase"),
    ("答案：一共 36 本书，分给 4 个班。", "36", True, "Chinese: nearest the phrase"),
    ("Ответ: на полке 16 книг из 5 рядов.", "16", True, "Russian: nearest the phrase"),
    ("Antwort: Es dauert 9 Stunden für 2 Maschinen.", "9", True, "German: nearest the phrase"),
    ("Réponse : il faut 14 jours pour 3 ouvriers.", "3", False, "the last number is not the answer"),
]


@pytest.mark.parametrize(("response", "reference", "expected", "why"), OTHER_SCRIPTS, ids=[r[3] for r in OTHER_SCRIPTS])
def test_plain_text_in_other_scripts(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


PRECISION = [
    ("\\boxed{0.0454545}", "0.045454545", True, "six significant figures, correctly rounded"),
    ("\\boxed{0.04545}", "0.045454545", False, "four significant figures: less precise than the reference"),
    ("\\boxed{0.0454546}", "0.045454545", False, "six figures, but not the reference's rounding"),
    ("\\boxed{1.73205}", "\\sqrt{3}", True, "six figures of an exact radical"),
    ("\\boxed{1.7321}", "\\sqrt{3}", False, "five figures of an exact radical"),
    ("\\boxed{6.283185}", "2\\pi", True, "seven figures of 2 pi"),
    ("\\boxed{0.428571}", "3/7", True, "six figures of a fraction"),
    ("\\boxed{0.4286}", "3/7", False, "four figures of a fraction"),
    ("\\boxed{98765.43}", "98765.4321", True, "seven figures of a long decimal"),
]


@pytest.mark.parametrize(("response", "reference", "expected", "why"), PRECISION, ids=[r[3] for r in PRECISION])
def test_precision_floor(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


NOTATION = [
    ("\\boxed{4^{4} = 256}", "256", True, "an equation chain ending in its value"),
    ("\\boxed{4^{4} = 256}", "255", False, "the chain's value is compared"),
    ("\\boxed{6! = 720}", "720", True, "a factorial chain"),
    ("\\boxed{720}", "6! = 720", True, "a reference written as a chain"),
    ("$\\sum_{k=1}^{m} 2k = m(m+1)$", "m(m+1)", True, "a sum stated by its right side"),
    ("$e^{2\\pi i} = 1$", "1", True, "e and i are constants, not unknowns"),
    ("\\boxed{y = 3x - 1}", "3x - 1", True, "a line stays an equation math-verify compares"),
    ("\\boxed{\\mathscr{F}}", "F", True, "a script letter"),
    ("\\boxed{\\mathfrak{g}}", "g", True, "a Fraktur letter"),
    ("\\boxed{\\mathbb{H}}", "\\mathrm{H}", True, "a blackboard letter that is no number set"),
    ("\\boxed{\\mathbb{Q}}", "Q", False, "blackboard Q is the rationals"),
    ("\\boxed{45,\\!67,\\!890}", "4567890", True, "Indian grouping with thin spaces"),
    ("\\boxed{8,90,123}", "890123", True, "Indian grouping for a single value"),
    ("\\boxed{8,90,123}", "890124", False, "another number"),
    ("So the side is 5 + √11", "5+\\sqrt{11}", True, "a unicode radical joined by +"),
    ("So the side is 5 + √11", "\\sqrt{11}", False, "the radical alone is not the value"),
    ("Thus the height is 6 − 2√3 metres", "6-2\\sqrt{3}", True, "unicode minus and radical"),
    ("The length is 2 + √3 ≈ 3.732", "2+\\sqrt{3}", True, "the exact side of an approximation"),
]


@pytest.mark.parametrize(("response", "reference", "expected", "why"), NOTATION, ids=[r[3] for r in NOTATION])
def test_notation(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


HEDGES_AND_PRIMES = [
    ("So z = 6 or z = -6", "-6", False, "two assignments of one variable: a hedge"),
    ("The answer is z = 6 or z = -6.", "6", False, "the same after an answer phrase"),
    ("So $z = 6$ or z = -6", "-6", False, "math, then plain text"),
    ("So z = 6 or z = -6", "\\pm 6", True, "both values for a plus-minus reference"),
    ("\\boxed{M'}", "M", False, "a primed point is another point"),
    ("\\boxed{M}", "M'", False, "the other direction"),
    ("\\boxed{M'N'}", "M'N'", True, "the same primed names"),
    ("\\boxed{g'''}", "g''", False, "the number of primes counts"),
    ("\\boxed{C^{\\prime}}", "C'", True, "a prime written as a command"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), HEDGES_AND_PRIMES, ids=[r[3] for r in HEDGES_AND_PRIMES]
)
def test_hedges_and_primes(response: str, reference: str, expected: bool, why: str) -> None:
    _check(response, reference, expected)


def test_choice_hint_only_for_letter_references() -> None:
    """A letter after "it's" is read only when the reference is a letter: for a number it is prose."""
    text = "By symmetry it's B that we need, and B = 12"
    assert extract_final_answer(text, choice=True).parts == ("B",)
    assert extract_final_answer(text).parts == ("12",)


# Issue 23, forms that rule verifiers miss: right answers written another way, and the near misses of each
# form, which stay wrong.
EQUIVALENT_FORMS = [
    ("\\boxed{\\frac{3-t}s}", "\\frac{3-t}{s}", True, "one-letter denominator without braces"),
    ("\\boxed{\\frac{a+1}b}", "\\frac{a+1}{b}", True, "another one-letter denominator"),
    ("\\boxed{\\frac{7}2}", "3.5", True, "a one-digit denominator after a braced numerator"),
    ("\\boxed{\\frac{3+t}s}", "\\frac{3-t}{s}", False, "near miss: a sign in the numerator"),
    ("\\boxed{\\frac{a+1}c}", "\\frac{a+1}{b}", False, "near miss: another denominator"),
    ("\\boxed{72\\textcirc}", "72^\\circ", True, "\\textcirc typo for \\circ"),
    ("\\boxed{72^\\textcirc}", "72", True, "^\\textcirc typo"),
    ("\\boxed{72\\textdegree}", "72^\\circ", True, "\\textdegree"),
    ("\\boxed{27\\textcirc}", "72^\\circ", False, "near miss: digits swapped"),
    ("\\boxed{73\\textcirc}", "72", False, "near miss: off by one degree"),
]


@pytest.mark.parametrize(
    ("response", "reference", "expected", "why"), EQUIVALENT_FORMS, ids=[r[3] for r in EQUIVALENT_FORMS]
)
def test_equivalent_forms_and_their_near_misses(response: str, reference: str, expected: bool, why: str) -> None:
    assert verify_math(response, reference).correct is expected
