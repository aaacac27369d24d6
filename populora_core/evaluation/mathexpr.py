"""A small LaTeX arithmetic parser and evaluator for comparing math answers.

Answers come from a model, so they are never given to ``eval`` or to sympy's
``parse_expr`` (both execute Python): this recursive-descent parser accepts only
numbers, letters (symbols, ``x_{1}`` style subscripts), ``+ - * / ^ !``, brackets,
``\\frac``, ``\\sqrt[n]{}``, ``\\binom``, ``\\lfloor``/``\\lceil``, the usual functions
and Greek letters, with implicit multiplication (``2n``, ``2\\sqrt{6}``). ``e`` is
Euler's number and ``i`` the imaginary unit. Anything else is not an expression
(``None``), and the caller falls back to comparing text.

Evaluation is numeric (complex, ``cmath``); a symbolic answer is compared with
another by their values at fixed sample points of their symbols.
"""

from __future__ import annotations

import cmath
import math
import random
import re
from collections.abc import Callable

Node = tuple
_TOKEN = re.compile(r"\s*(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|\\[A-Za-z]+|[A-Za-z]|[-+*/^_()\[\]{}!|,=])")
_FUNCTIONS: dict[str, Callable] = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "arcsin": cmath.asin, "arccos": cmath.acos,
    "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh, "tanh": cmath.tanh, "exp": cmath.exp,
    "ln": cmath.log, "log": cmath.log, "cot": lambda z: 1 / cmath.tan(z), "sec": lambda z: 1 / cmath.cos(z),
    "csc": lambda z: 1 / cmath.sin(z),
}  # fmt: skip
_GREEK = frozenset((
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "kappa",
    "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi", "chi", "psi", "omega", "Gamma",
    "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega",
))  # fmt: skip
_CONSTANTS = {"pi": math.pi, "infty": math.inf}
_REWRITES = (
    ("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cdot", "*"),
    ("\\times", "*"), ("\\div", "/"), ("\\,", ""), ("\\;", ""), ("\\!", ""), ("\\ ", ""), ("~", ""),
    ("\\mathrm{e}", "e"), ("\\operatorname", ""),
)  # fmt: skip
_SHORTHANDS = (  # \frac12, \frac1{n}, \frac{1}2, \sqrt2 -> braced arguments
    (re.compile(r"\\frac\s*([0-9A-Za-z])\s*([0-9A-Za-z])"), r"\\frac{\1}{\2}"),
    (re.compile(r"\\frac\s*([0-9A-Za-z])\s*\{"), r"\\frac{\1}{"),
    (re.compile(r"\\frac\s*(\{[^{}]*\})\s*([0-9A-Za-z])"), r"\\frac\1{\2}"),
    (re.compile(r"\\sqrt\s*([0-9A-Za-z])"), r"\\sqrt{\1}"),
)
MAX_LENGTH = 400
"""Longer answers are not parsed (compared as text only)."""


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise ValueError(f"expected {want!r}, got {tok!r}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
                node = (tok, node, self.unary())
            elif tok is not None and self._starts_atom(tok):
                node = ("*", node, self.power())  # implicit multiplication
            else:
                return node

    def unary(self) -> Node:
        if self.peek() in ("-", "+"):
            sign = self.take()
            inner = self.unary()
            return ("neg", inner) if sign == "-" else inner
        return self.power()

    def power(self) -> Node:
        base = self.postfix()
        if self.peek() == "^":
            self.take()
            return ("^", base, self.exponent())
        return base

    def exponent(self) -> Node:
        if self.peek() in ("-", "+"):
            return self.unary()
        return self.postfix()

    def postfix(self) -> Node:
        node = self.atom()
        while self.peek() == "!":
            self.take()
            node = ("fact", node)
        return node

    @staticmethod
    def _starts_atom(tok: str) -> bool:
        if tok in ("\\rfloor", "\\rceil"):
            return False
        # not "|": after an atom it may close an absolute value
        return tok[0].isdigit() or tok[0] == "." or tok.isalpha() or tok in ("(", "{", "[") or tok[0] == "\\"

    def group(self) -> Node:
        self.take("{")
        node = self.expr()
        self.take("}")
        return node

    def atom(self) -> Node:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return ("num", complex(float(tok)))
        if tok in ("(", "[", "{"):
            node = self.expr()
            self.take({"(": ")", "[": "]", "{": "}"}[tok])
            return node
        if tok == "|":
            node = self.expr()
            self.take("|")
            return ("abs", node)
        if tok.isalpha():
            return self.symbol(tok)
        if tok.startswith("\\"):
            return self.command(tok[1:])
        raise ValueError(f"unexpected {tok!r}")

    def symbol(self, name: str) -> Node:
        if self.peek() == "_":
            self.take()
            sub = self.take()
            if sub == "{":
                parts = []
                while self.peek() != "}":
                    parts.append(self.take())
                self.take("}")
                sub = "".join(parts)
            name = f"{name}_{sub}"
        if name == "e":
            return ("num", complex(math.e))
        if name == "i":
            return ("num", 1j)
        return ("sym", name)

    def command(self, name: str) -> Node:
        if name == "frac":
            return ("/", self.group(), self.group())
        if name == "binom":
            return ("binom", self.group(), self.group())
        if name == "sqrt":
            degree = None
            if self.peek() == "[":
                self.take()
                degree = self.expr()
                self.take("]")
            return ("root", self.group() if self.peek() == "{" else self.atom(), degree)
        if name in ("lfloor", "lceil"):
            node = self.expr()
            self.take("\\r" + name[1:])
            return (name[1:], node)
        if name in _CONSTANTS:
            return ("num", complex(_CONSTANTS[name]))
        if name in _GREEK:
            return self.symbol(name)
        if name in _FUNCTIONS:
            return self.function(name)
        raise ValueError(f"unsupported command \\{name}")

    def function(self, name: str) -> Node:
        base = None
        if name == "log" and self.peek() == "_":
            self.take()
            base = self.group() if self.peek() == "{" else self.atom()
        power = None
        if self.peek() == "^":  # \sin^{2} x
            self.take()
            power = self.exponent()
        node: Node = ("fn", name, self.power(), base)
        return ("^", node, power) if power is not None else node


def parse(text: str) -> Node | None:
    """The expression tree of a LaTeX answer, or None when it is not plain arithmetic."""
    for old, new in _REWRITES:
        text = text.replace(old, new)
    for pattern, new in _SHORTHANDS:
        text = pattern.sub(new, text)
    text = text.strip()
    if not text or len(text) > MAX_LENGTH:
        return None
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            return None
        tokens.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    try:
        parser = _Parser(tokens)
        node = parser.expr()
        return node if parser.peek() is None else None
    except (ValueError, IndexError, RecursionError):
        return None


def symbols(node: Node) -> set[str]:
    if node[0] == "sym":
        return {node[1]}
    return set().union(*(symbols(c) for c in node[1:] if isinstance(c, tuple)))


def _real_int(z: complex, limit: int) -> int:
    if abs(z.imag) > 1e-9 or abs(z.real - round(z.real)) > 1e-9 or abs(z.real) > limit:
        raise ValueError("not a small integer")
    return round(z.real)


def _power(a: complex, b: complex) -> complex:
    if abs(b) > 10_000:
        raise OverflowError("exponent too large")
    if a.imag == 0 and b.imag == 0 and b.real == round(b.real):
        return complex(a.real ** round(b.real))
    return a**b


def _root(x: complex, degree: complex | None) -> complex:
    if degree is None:
        return cmath.sqrt(x)
    n = _real_int(degree, 1000)
    if x.imag == 0 and x.real < 0 and n % 2 == 1:  # the real odd root
        return complex(-((-x.real) ** (1 / n)))
    return x ** (1 / n)


def evaluate(node: Node, env: dict[str, complex]) -> complex:
    """The value of an expression tree at ``env`` (raises on anything undefined)."""
    op, args = node[0], node[1:]
    if op == "num":
        return args[0]
    if op == "sym":
        return env[args[0]]
    if op == "fn":
        value = _FUNCTIONS[args[0]](evaluate(args[1], env))
        return value / cmath.log(evaluate(args[2], env)) if args[2] is not None else value
    if op == "root":
        return _root(evaluate(args[0], env), None if args[1] is None else evaluate(args[1], env))
    vals = [evaluate(a, env) for a in args]
    if op == "+":
        return vals[0] + vals[1]
    if op == "-":
        return vals[0] - vals[1]
    if op == "*":
        return vals[0] * vals[1]
    if op == "/":
        return vals[0] / vals[1]
    if op == "^":
        return _power(vals[0], vals[1])
    if op == "neg":
        return -vals[0]
    if op == "abs":
        return complex(abs(vals[0]))
    if op == "fact":
        return complex(math.factorial(_real_int(vals[0], 10_000)))
    if op == "binom":
        return complex(math.comb(_real_int(vals[0], 10_000), _real_int(vals[1], 10_000)))
    if op in ("floor", "ceil"):
        if abs(vals[0].imag) > 1e-9:
            raise ValueError("floor of a complex number")
        return complex(math.floor(vals[0].real) if op == "floor" else math.ceil(vals[0].real))
    raise ValueError(f"unknown node {op}")


def close(a: complex, b: complex, tol: float) -> bool:
    """Relative closeness (exactly 0 needs |a| ≤ 1e-12)."""
    if a == b:  # infinities too
        return True
    if b == 0:
        return abs(a) <= 1e-12
    return abs(a - b) <= tol * max(abs(a), abs(b))


def value(text: str) -> complex | None:
    """The value of a constant answer (no symbols), or None."""
    node = parse(text)
    if node is None or symbols(node):
        return None
    try:
        return evaluate(node, {})
    except (ValueError, ArithmeticError, KeyError):
        return None


def same_function(a: Node, b: Node, *, tol: float = 1e-6, points: int = 8) -> bool:
    """Two expressions agree at fixed sample points of their symbols (integers and
    fractions, so floor and binomial answers compare too); at least three points must
    be defined for both."""
    names = sorted(symbols(a) | symbols(b))
    rng = random.Random(20240901)
    agreed = 0
    for k in range(points):
        env = {n: complex(rng.randint(2, 9) if k % 2 else rng.uniform(1.1, 3.9)) for n in names}
        try:
            va, vb = evaluate(a, env), evaluate(b, env)
        except (ValueError, ArithmeticError, KeyError):
            continue
        if not close(va, vb, tol):
            return False
        agreed += 1
    return agreed >= 3
