"""Math answer normalisation: Hendrycks et al.'s MATH `strip_string` / `is_equiv`,
the comparison MATH-500 results are usually reported with, and GSM8K numbers."""

from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if sub.startswith("{") or len(sub) < 2:
            out += sub
            continue
        a, b, rest = sub[0], sub[1], sub[2:]
        out += f"{{{a}}}{{{b}}}{rest}" if b != "{" else f"{{{a}}}{b}{rest}"
    return out


def _fix_a_slash_b(s: str) -> str:
    if len(s.split("/")) != 2:
        return s
    a, b = s.split("/")
    try:
        return f"\\frac{{{int(a)}}}{{{int(b)}}}" if s == f"{int(a)}/{int(b)}" else s
    except ValueError:
        return s


def _remove_right_units(s: str) -> str:
    return s.split("\\text{ ")[0] if "\\text{ " in s else s


def _fix_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\sqrt" + (sub if sub.startswith("{") or not sub else f"{{{sub[0]}}}{sub[1:]}")
    return out


def strip_string(s: str) -> str:
    """Hendrycks et al.'s normalisation of a MATH answer."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = _remove_right_units(s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def math_equal(answer: str, gold: str) -> bool:
    """MATH's ``is_equiv``: equal after ``strip_string`` (or as given, if that fails)."""
    try:
        return strip_string(answer) == strip_string(gold)
    except Exception:  # noqa: BLE001 - the reference implementation falls back the same way
        return answer == gold


def number_equal(answer: str, gold: str) -> bool:
    """GSM8K: equal as numbers, commas, dollar signs and a trailing period ignored."""

    def value(text: str) -> float | None:
        text = text.replace(",", "").replace("$", "").strip().rstrip(".")
        try:
            return float(text)
        except ValueError:
            return None

    a, g = value(answer), value(gold)
    return a is not None and g is not None and abs(a - g) < 1e-6
