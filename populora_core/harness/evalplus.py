"""EvalPlus's differential test, run inside the sandbox by the judged program (``check``); the
candidate is the answer's process (``candidate.py``), which keeps each input's time limit.

No numpy: the sandbox's interpreter has the standard library only. Semantics follow EvalPlus
(evalplus/eval, v0.2-v0.3): every base and plus input is
given to the canonical solution (a deep copy) and to the candidate (a copy, sent to its
process; it has max(1 s, 4 x the reference's time) per input, EvalPlus's defaults); outputs
match when equal, or with floats within ``atol`` (raised to 1e-6 once a float
output is seen, then kept), ``np.allclose``'s rtol 1e-7 and the same type; plus
EvalPlus's special oracles (MBPP+ set-valued and not-None outputs, Mbpp/164, 295,
558, 581; HumanEval/32 by the polynomial's value at the returned root). MBPP+
inputs are stored as JSON lists; tasks whose arguments are tuples, sets or
complex numbers are converted back the way EvalPlus's loader does.
"""

from __future__ import annotations

import copy
import json
import math
import time

MIN_SECONDS = 1.0
TIME_FACTOR = 4.0

_NOT_NONE = ("check_str", "text_match_three", "text_starta_endb")
_SET_EQ = (
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
)
# MBPP+ task number -> how its JSON arguments become the Python values the task takes
_MBPP_ARGS = {
    **dict.fromkeys(
        (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809),
        "each_tuple",
    ),
    **dict.fromkeys((63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780), "each_list_of_tuples"),
    **dict.fromkeys((75, 413, 444, 753), "first_list_of_tuples"),
    **dict.fromkeys((106, 750), "second_tuple"),
    **dict.fromkeys((250, 405, 446, 617, 720, 763, 808, 307), "first_tuple"),
    **dict.fromkeys((259, 401, 445), "each_tuple_of_tuples"),
    **dict.fromkeys((580, 615, 791), "all_tuples"),
    115: "first_list_of_sets",
    124: "float_complex",
    252: "complex",
    278: "first_tuple_of_tuples_or_items",
    722: "first_dict_of_tuples",
}


def _all_tuples(value):
    return tuple(_all_tuples(v) for v in value) if isinstance(value, list) else value


_CONVERT = {
    "each_tuple": lambda args: [tuple(a) for a in args],
    "each_list_of_tuples": lambda args: [[tuple(x) for x in a] for a in args],
    "each_tuple_of_tuples": lambda args: [tuple(tuple(x) for x in a) for a in args],
    "first_list_of_tuples": lambda args: [[tuple(x) for x in args[0]], *args[1:]],
    "first_tuple": lambda args: [tuple(args[0]), *args[1:]],
    "second_tuple": lambda args: [args[0], tuple(args[1]), *args[2:]],
    "first_list_of_sets": lambda args: [[set(x) if isinstance(x, list) and x else {} for x in args[0]]],
    "float_complex": lambda args: [float(args[0]), complex(args[1])],
    "complex": lambda args: [complex(args[0])],
    "first_tuple_of_tuples_or_items": lambda args: [tuple(tuple(x) if isinstance(x, list) else x for x in args[0])],
    "first_dict_of_tuples": lambda args: [{k: tuple(v) for k, v in args[0].items()}, *args[1:]],
    "all_tuples": lambda args: list(_all_tuples(args)),
}


def _mbpp_args(task: int, args: list) -> list:
    """One MBPP+ input's arguments as the task's Python values (EvalPlus's deserialisation)."""
    how = _MBPP_ARGS.get(task)
    return _CONVERT[how](args) if how else args


def _is_floats(x) -> bool:
    return isinstance(x, float) or (isinstance(x, (list, tuple)) and bool(x) and all(isinstance(i, float) for i in x))


def _close(out, exp, atol: float) -> bool:
    """``np.allclose(out, exp, rtol=1e-7, atol=atol)`` for numbers and nested sequences."""
    if isinstance(exp, (list, tuple)):
        return (
            isinstance(out, (list, tuple))
            and len(out) == len(exp)
            and all(_close(o, e, atol) for o, e in zip(out, exp, strict=True))
        )
    try:
        return out == exp or abs(out - exp) <= atol + 1e-7 * abs(exp)
    except TypeError:
        return False


def _poly(xs: list, x: float) -> float:
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 2 * base_edge * slant)


def _digit_distance(a, b):
    x, y = str(a), str(b)
    width = max(len(x), len(y))
    return sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(width), y.zfill(width), strict=True))


def _exact(dataset: str, entry: str, args: list, out, exp, atol: float) -> bool:
    """Equality, or what the task's special oracle accepts instead."""
    exact = out == exp
    if dataset != "mbpp":
        return exact
    if entry == "are_equivalent":
        return True
    if entry == "sum_div":
        return exact or out == 0
    if entry == "surface_Area":
        return exact or abs(out - _surface_area(*args)) <= atol
    if entry == "digit_distance_nums":
        return exact or out == _digit_distance(*args)
    if entry in _SET_EQ:
        return set(out) == set(exp)
    if entry in _NOT_NONE:
        return out == exp if isinstance(out, bool) else exp == (out is not None)
    return exact


def check(
    dataset: str, entry: str, candidate, reference: str, inputs_json: str, atol, task: int, base_count: int = 0
) -> bool:
    """Raises AssertionError at the first input where ``candidate`` and the reference disagree,
    tagged ``wrong_base`` for the first ``base_count`` inputs (the benchmark's base inputs) and
    ``wrong_plus`` after them."""
    scope: dict = {"__name__": "__reference__"}
    exec(reference, scope)  # noqa: S102 - the benchmark's canonical solution, in the sandbox
    truth = scope[entry]
    for number, raw in enumerate(json.loads(inputs_json)):
        failure = "wrong_base" if number < base_count else "wrong_plus"
        args = _mbpp_args(task, raw) if dataset == "mbpp" else raw
        start = time.perf_counter()
        exp = truth(*copy.deepcopy(args))
        limit = max(MIN_SECONDS, TIME_FACTOR * (time.perf_counter() - start))
        if dataset == "mbpp" and entry in _NOT_NONE:
            exp = exp is not None
        out = candidate.timed(limit, *args)  # the answer's process keeps the limit (candidate.py)
        if dataset == "humaneval" and entry == "find_zero":
            assert abs(_poly(*args, out)) <= atol, (failure, args, out)
            continue
        exact = bool(_exact(dataset, entry, args, out, exp, atol))
        if atol == 0 and _is_floats(exp):
            atol = 1e-6
        if not exact and atol != 0:
            exact = type(out) is type(exp) and _close(out, exp, atol)
        assert exact, (failure, args, out, exp)
    return True
