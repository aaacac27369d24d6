"""EvalPlus's differential test, run inside the sandbox by the judged program; the candidate
is the answer's process (``candidate_process.py``), which keeps each input's time limit.

Standard library only: ``harness_source()`` pastes this module's source into the
judged program (the sandbox's interpreter has no numpy and no site-packages).
Semantics follow EvalPlus (evalplus/eval, v0.2-v0.3): every base and plus input is
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

import copy as _evalplus_copy
import json as _evalplus_json
import math as _evalplus_math
import time as _evalplus_time

_EVALPLUS_MIN_SECONDS = 1.0
_EVALPLUS_TIME_FACTOR = 4.0

_EVALPLUS_NOT_NONE = ("check_str", "text_match_three", "text_starta_endb")
_EVALPLUS_SET_EQ = (
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
_EVALPLUS_MBPP_ARGS = {
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


def _evalplus_all_tuples(value):
    return tuple(_evalplus_all_tuples(v) for v in value) if isinstance(value, list) else value


def _evalplus_mbpp_args(task: int, args: list) -> list:
    """One MBPP+ input's arguments as the task's Python values (EvalPlus's deserialisation)."""
    how = _EVALPLUS_MBPP_ARGS.get(task)
    if how == "each_tuple":
        return [tuple(a) for a in args]
    if how == "each_list_of_tuples":
        return [[tuple(x) for x in a] for a in args]
    if how == "each_tuple_of_tuples":
        return [tuple(tuple(x) for x in a) for a in args]
    if how == "first_list_of_tuples":
        return [[tuple(x) for x in args[0]], *args[1:]]
    if how == "first_tuple":
        return [tuple(args[0]), *args[1:]]
    if how == "second_tuple":
        return [args[0], tuple(args[1]), *args[2:]]
    if how == "first_list_of_sets":
        return [[set(x) if isinstance(x, list) and x else {} for x in args[0]]]
    if how == "float_complex":
        return [float(args[0]), complex(args[1])]
    if how == "complex":
        return [complex(args[0])]
    if how == "first_tuple_of_tuples_or_items":
        return [tuple(tuple(x) if isinstance(x, list) else x for x in args[0])]
    if how == "first_dict_of_tuples":
        return [{k: tuple(v) for k, v in args[0].items()}, *args[1:]]
    if how == "all_tuples":
        return list(_evalplus_all_tuples(args))
    return args


def _evalplus_is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(i, float) for i in x)


def _evalplus_close(out, exp, atol: float) -> bool:
    """``np.allclose(out, exp, rtol=1e-7, atol=atol)`` for numbers and nested sequences."""
    if isinstance(exp, (list, tuple)):
        return (
            isinstance(out, (list, tuple))
            and len(out) == len(exp)
            and all(_evalplus_close(o, e, atol) for o, e in zip(out, exp, strict=True))
        )
    try:
        return out == exp or abs(out - exp) <= atol + 1e-7 * abs(exp)
    except TypeError:
        return False


def _evalplus_poly(xs: list, x: float) -> float:
    return sum(c * _evalplus_math.pow(x, i) for i, c in enumerate(xs))


def _evalplus_surface_area(base_edge, height):
    slant = _evalplus_math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 2 * base_edge * slant)


def _evalplus_digit_distance(a, b):
    x, y = str(a), str(b)
    width = max(len(x), len(y))
    return sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(width), y.zfill(width), strict=True))


def _evalplus_exact(dataset: str, entry: str, args: list, out, exp, atol: float) -> bool:
    """Equality, or what the task's special oracle accepts instead."""
    exact = out == exp
    if dataset != "mbpp":
        return exact
    if entry == "are_equivalent":
        return True
    if entry == "sum_div":
        return exact or out == 0
    if entry == "surface_Area":
        return exact or abs(out - _evalplus_surface_area(*args)) <= atol
    if entry == "digit_distance_nums":
        return exact or out == _evalplus_digit_distance(*args)
    if entry in _EVALPLUS_SET_EQ:
        return set(out) == set(exp)
    if entry in _EVALPLUS_NOT_NONE:
        return out == exp if isinstance(out, bool) else exp == (out is not None)
    return exact


def _evalplus_check(
    dataset: str, entry: str, candidate, reference: str, inputs_json: str, atol, task: int, base_count: int = 0
) -> bool:
    """Raises AssertionError at the first input where ``candidate`` and the reference disagree,
    tagged ``wrong_base`` for the first ``base_count`` inputs (the benchmark's base inputs) and
    ``wrong_plus`` after them."""
    scope: dict = {"__name__": "__reference__"}
    exec(reference, scope)  # noqa: S102 - the benchmark's canonical solution, in the sandbox
    truth = scope[entry]
    for number, raw in enumerate(_evalplus_json.loads(inputs_json)):
        failure = "wrong_base" if number < base_count else "wrong_plus"
        args = _evalplus_mbpp_args(task, raw) if dataset == "mbpp" else raw
        start = _evalplus_time.perf_counter()
        exp = truth(*_evalplus_copy.deepcopy(args))
        limit = max(_EVALPLUS_MIN_SECONDS, _EVALPLUS_TIME_FACTOR * (_evalplus_time.perf_counter() - start))
        if dataset == "mbpp" and entry in _EVALPLUS_NOT_NONE:
            exp = exp is not None
        out = candidate.timed(limit, *args)  # the answer's process keeps the limit (candidate_process.py)
        if dataset == "humaneval" and entry == "find_zero":
            assert abs(_evalplus_poly(*args, out)) <= atol, (failure, args, out)
            continue
        exact = bool(_evalplus_exact(dataset, entry, args, out, exp, atol))
        if atol == 0 and _evalplus_is_floats(exp):
            atol = 1e-6
        if not exact and atol != 0:
            exact = type(out) is type(exp) and _evalplus_close(out, exp, atol)
        assert exact, (failure, args, out, exp)
    return True


def harness_source() -> str:
    """This module's definitions, pasted after a candidate's code (a ``__future__`` import
    is legal only at a program's top, so it is left out)."""
    from pathlib import Path

    return Path(__file__).read_text().replace("from __future__ import annotations\n", "")
