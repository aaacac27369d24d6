"""Answer equivalence as OlympiadBench's published judge decides it
(OpenBMB/OlympiadBench ``eval/auto_scoring_judge.py``), with this project's safe
expression evaluator (`mathexpr.py`) in place of sympy's LaTeX parser.

1. Both answers are cleaned: the part after ``\\in``, ``\\left``/``\\right``, ``$``,
   ``^\\circ``, ``%``, primes and ``\\approx`` rewritten, ``\\mathrm{x}``/``\\mathbf{x}``
   unwrapped, spaces and edge punctuation dropped (plus a trailing ``\\text{unit}``
   after a number, and thousands separators).
2. Equal text is equal. Otherwise both are split at top-level commas (``\\pm``
   doubling an answer) and every gold part must pair with a different answer part
   (any order): equal text; or both bracketed (tuples, intervals, unions of
   intervals with ``\\cup``): same brackets and element-wise equal; or equal numbers
   (relative tolerance ``tol``; the gold, a hundredth of it or a hundred times it,
   as the published judge allows percentages); or expressions equal by value (the
   right-hand sides of ``=``; symbolic ones at sample points); or equations whose
   ``lhs - rhs`` differ by a constant integer factor.

The published judge compares numbers to an absolute 1e-8 (or the record's
``error``); here the tolerance is relative, so large and small answers are held to
the same number of significant digits.
"""

from __future__ import annotations

import re

from populora_core.evaluation import mathexpr

_SIGNALS = (
    ("\\left", ""), ("\\right", ""), ("∶", ":"), ("，", ","), ("$", ""), ("\\approx", "="), ("\\simeq", "="),
    ("\\sim", "="), ("^\\prime", "'"), ("^{\\prime}", "'"), ("^{\\circ}", ""), ("^\\circ", ""), ("\\%", ""),
    ("%", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\!", ""), ("\\,", ""), ("\\;", ""),
)  # fmt: skip
_EDGE = "\n$,.:;^_=+`!@#$%^&*~，。 "
_WRAPPED = re.compile(r"\\(?:mathrm|mathbf|textbf|text)\{~?([^}]*)\}")
_UNIT = re.compile(r"^(.*\d[)}]?)\s*\\(?:text|mathrm|mbox)\s*\{[^{}]*\}$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def clean(text: str) -> str:
    """Step 1 of the module docstring."""
    if "\\in " in text:
        text = text.split("\\in ", 1)[1]
    for old, new in _SIGNALS:
        text = text.replace(old, new)
    text = text.strip()
    if re.match(r"-?\.\d", text):  # ".5": the edge stripping below would drop the point
        text = text.replace(".", "0.", 1)
    text = text.strip(_EDGE)
    unit = _UNIT.match(text)
    if unit:
        text = unit.group(1)
    text = _squeeze(_WRAPPED.sub(r"\1", text))
    return text.replace(",", "") if _THOUSANDS.match(text) else text


def _squeeze(text: str) -> str:
    """No spaces, except one after a command word followed by a letter (``\\angle B``)."""
    text = re.sub(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])", "\\1\x00", text)
    return re.sub(r"\s+", "", text).replace("\x00", " ")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside (), [] and {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _with_plus_minus(parts: list[str]) -> list[str]:
    out = []
    for p in parts:
        out += [p.replace("\\pm", "+"), p.replace("\\pm", "-")] if "\\pm" in p else [p]
    return out


def _bracketed(text: str) -> bool:
    return len(text) >= 2 and text[0] in "([" and text[-1] in ")]"


def _brackets_equal(gold: str, answer: str, tol: float) -> bool:
    """Tuples and (unions of) intervals: same brackets, same length, equal elements."""
    pieces_g, pieces_a = gold.split("\\cup"), answer.split("\\cup")
    if len(pieces_g) != len(pieces_a):
        return False
    for g, a in zip(pieces_g, pieces_a, strict=True):
        if g == a:
            continue
        if not (_bracketed(g) and _bracketed(a)) or (g[0], g[-1]) != (a[0], a[-1]):
            return False
        elems_g, elems_a = split_top_level(g[1:-1]), split_top_level(a[1:-1])
        if len(elems_g) != len(elems_a):
            return False
        if not all(_expressions_equal(x, y, tol) for x, y in zip(elems_g, elems_a, strict=True)):
            return False
    return True


def _numbers_equal(gold: str, answer: str, tol: float) -> bool:
    try:
        g, a = float(gold), float(answer)
    except ValueError:
        return False
    return any(mathexpr.close(a, ref, tol) for ref in (g / 100, g, g * 100))


def _expressions_equal(gold: str, answer: str, tol: float) -> bool:
    """Equal by value (the right-hand sides of ``=``): numbers within ``tol``, symbolic
    expressions at sample points (and only with the same kind: both constant or not)."""
    if gold == answer:
        return True
    g = mathexpr.parse(gold.split("=")[-1])
    a = mathexpr.parse(answer.split("=")[-1])
    if g is None or a is None or bool(mathexpr.symbols(g)) != bool(mathexpr.symbols(a)):
        return False
    if not mathexpr.symbols(g):
        try:
            return mathexpr.close(mathexpr.evaluate(a, {}), mathexpr.evaluate(g, {}), tol)
        except (ValueError, ArithmeticError, KeyError):
            return False
    return mathexpr.same_function(g, a)


def _equations_equal(gold: str, answer: str) -> bool:
    """Both ``lhs = rhs`` and ``lhs - rhs`` of one is a nonzero integer multiple of the other's."""
    if gold.count("=") != 1 or answer.count("=") != 1:
        return False
    sides = [[mathexpr.parse(s) for s in e.split("=")] for e in (gold, answer)]
    if any(s is None for pair in sides for s in pair):
        return False
    (gl, gr), (al, ar) = sides
    diff_g, diff_a = ("-", gl, gr), ("-", al, ar)
    for k in (1, -1, 2, -2, 3, -3, 4, -4):
        if mathexpr.same_function(("*", ("num", complex(k)), diff_g), diff_a):
            return True
        if mathexpr.same_function(diff_g, ("*", ("num", complex(k)), diff_a)):
            return True
    return False


def parts_equal(gold: str, answer: str, tol: float) -> bool:
    """One gold part against one answer part (step 2 of the module docstring)."""
    if gold == answer:
        return True
    if _bracketed(gold) and _bracketed(answer):
        return _brackets_equal(gold, answer, tol)
    if _numbers_equal(gold, answer, tol):
        return True
    if _expressions_equal(gold, answer, tol) and not ("=" in gold and "=" in answer):
        return True
    return _equations_equal(gold, answer)


def answers_equal(answer: str, gold: str, *, tol: float = 1e-8) -> bool:
    """OlympiadBench's judgement of ``answer`` against ``gold`` (module docstring)."""
    answer, gold = clean(answer), clean(gold)
    if answer == gold:
        return bool(gold)
    golds = _with_plus_minus(split_top_level(gold))
    answers = _with_plus_minus(split_top_level(answer))
    if len(golds) != len(answers):
        return False
    for g in golds:
        match = next((a for a in answers if parts_equal(g, a, tol)), None)
        if match is None:
            return False
        answers.remove(match)
    return True
