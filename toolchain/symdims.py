"""Size expressions of a package's contract: the symbols torch names dynamic dimensions by (`s77`) and the
integer expressions it writes for the dimensions derived from them (`s17 + s77`, `2*s27`, `((s27 + 1)//2)`).

The grammar is the one the C++ runtime evaluates (runtime/src/host/contract.cpp) and docs/package-json.md states:

    expr  := term (('+' | '-') term)*
    term  := unary (('*' | '//' | '%') unary)*
    unary := '-' unary | atom
    atom  := INTEGER | SYMBOL | ('Max' | 'Min' | 'Mod' | 'FloorDiv') '(' expr ',' expr ')' | '(' expr ')'

SYMBOL is a letter or '_' then letters, digits or '_'; `//` and `%` (and Mod, FloorDiv) round toward minus
infinity, as Python and sympy do. Anything else (true division, powers, ceil) is not a size expression here:
`parse` raises ValueError and the exporter records that dimension by its range alone.
"""

from __future__ import annotations

import re

Node = tuple  # ("int", v) | ("sym", name) | ("neg", a) | (op, a, b) with op in + - * // % max min

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*%(),]))")
_FUNCS = {"Max": "max", "Min": "min", "Mod": "%", "FloorDiv": "//"}
MAX_LENGTH = 4096  # longer text is refused (the runtime's limit too)
MAX_VALUE = 1 << 62


def _tokens(text: str) -> list[str]:
    if len(text) > MAX_LENGTH:
        msg = f"size expression longer than {MAX_LENGTH} characters"
        raise ValueError(msg)
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            msg = f"size expression {text!r}: unexpected {text[pos:pos + 10]!r}"
            raise ValueError(msg)
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


MAX_DEPTH = 64  # parentheses, function arguments and unary minus nested deeper are refused (as in C++)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.toks, self.i = text, _tokens(text), 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            msg = f"size expression {self.text!r}: expected {want or 'more'}, got {tok or 'the end'}"
            raise ValueError(msg)
        self.i += 1
        return tok

    def deep(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            msg = f"size expression {self.text[:80]!r}: nested more than {MAX_DEPTH} deep"
            raise ValueError(msg)

    def expr(self, depth: int) -> Node:
        self.deep(depth)
        node = self.term(depth)
        while self.peek() in ("+", "-"):
            node = (self.take(), node, self.term(depth))
        return node

    def term(self, depth: int) -> Node:
        node = self.unary(depth)
        while self.peek() in ("*", "//", "%"):
            node = (self.take(), node, self.unary(depth))
        return node

    def unary(self, depth: int) -> Node:
        if self.peek() == "-":
            self.take()
            self.deep(depth)
            return ("neg", self.unary(depth + 1))
        return self.atom(depth)

    def atom(self, depth: int) -> Node:
        tok = self.take()
        if tok.isdigit():
            if int(tok) > MAX_VALUE:
                msg = f"size expression {self.text!r}: {tok} is above 2^62"
                raise ValueError(msg)
            return ("int", int(tok))
        if tok == "(":
            node = self.expr(depth + 1)
            self.take(")")
            return node
        if tok in _FUNCS and self.peek() == "(":
            self.take("(")
            a = self.expr(depth + 1)
            self.take(",")
            b = self.expr(depth + 1)
            self.take(")")
            return (_FUNCS[tok], a, b)
        if tok[0].isalpha() or tok[0] == "_":
            if tok in _FUNCS:
                msg = f"size expression {self.text!r}: {tok} needs two arguments"
                raise ValueError(msg)
            return ("sym", tok)
        msg = f"size expression {self.text!r}: unexpected {tok!r}"
        raise ValueError(msg)


def parse(text: str) -> Node:
    """The expression tree of `text`; ValueError naming the defect when it is not in the grammar."""
    p = _Parser(text)
    node = p.expr(0)
    if p.peek() is not None:
        msg = f"size expression {text!r}: unexpected {p.peek()!r}"
        raise ValueError(msg)
    if _stack_need(node) > EVAL_STACK:
        msg = f"size expression {text[:80]!r}: needs more than {EVAL_STACK} pending values to evaluate"
        raise ValueError(msg)
    return node


EVAL_STACK = 2 * MAX_DEPTH + 8  # the C++ evaluator's fixed stack (contract.cpp kEvalStack)


def _stack_need(node: Node) -> int:
    """The deepest stack a postfix evaluation of `node` uses (left operand first, as contract.cpp runs it)."""
    if node[0] in ("int", "sym"):
        return 1
    if node[0] == "neg":
        return _stack_need(node[1])
    return max(_stack_need(node[1]), 1 + _stack_need(node[2]))


def symbols(node: Node) -> set[str]:
    if node[0] == "sym":
        return {node[1]}
    if node[0] == "int":
        return set()
    return set().union(*(symbols(c) for c in node[1:]))


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        msg = "division by zero in a size expression"
        raise ZeroDivisionError(msg)
    return a // b


def evaluate(node: Node, env: dict[str, int]) -> int:
    """The value of `node` with the symbols bound in `env` (KeyError for an unbound one)."""
    op = node[0]
    if op == "int":
        return node[1]
    if op == "sym":
        return env[node[1]]
    if op == "neg":
        return -evaluate(node[1], env)
    a, b = evaluate(node[1], env), evaluate(node[2], env)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return _floordiv(a, b)
    if op == "%":
        return a - b * _floordiv(a, b)
    return max(a, b) if op == "max" else min(a, b)


Range = tuple[int, "int | None"]  # (low, high); None: unbounded above


def bounds(node: Node, ranges: dict[str, Range]) -> Range | None:
    """A range holding every value of `node` over the symbols' ranges, for non-negative sizes; None when
    this simple interval reasoning can't bound it (a negative part, a divisor that may be 0)."""
    op = node[0]
    if op == "int":
        return (node[1], node[1])
    if op == "sym":
        return ranges.get(node[1])
    if op == "neg":
        return None
    a, b = bounds(node[1], ranges), bounds(node[2], ranges)
    if a is None or b is None or a[0] < 0 or b[0] < 0:
        return None

    a_hi, b_hi = a[1], b[1]
    if op == "+":
        return (a[0] + b[0], None if a_hi is None or b_hi is None else a_hi + b_hi)
    if op == "-":
        if b_hi is None:
            return None
        return (max(a[0] - b_hi, 0), None if a_hi is None else max(a_hi - b[0], 0))
    if op == "*":
        return (a[0] * b[0], None if a_hi is None or b_hi is None else a_hi * b_hi)
    if op in ("//", "%") and b[0] == 0:
        return None
    if op == "//":
        return (0 if b_hi is None else a[0] // b_hi, None if a_hi is None else a_hi // b[0])
    if op == "%":
        return (0, a_hi if b_hi is None else (b_hi - 1 if a_hi is None else min(a_hi, b_hi - 1)))
    if op == "max":
        return (max(a[0], b[0]), None if a_hi is None or b_hi is None else max(a_hi, b_hi))
    return (min(a[0], b[0]), b_hi if a_hi is None else (a_hi if b_hi is None else min(a_hi, b_hi)))


def solve(node: Node, value: int, env: dict[str, int]) -> int | None:
    """The value of the one symbol of `node` unbound in `env` for which `node` equals `value`, when `node` is
    linear in it (a*s + b with a != 0 and the solution a whole number); None otherwise."""
    free = symbols(node) - set(env)
    if len(free) != 1:
        return None
    (s,) = free
    try:
        b = evaluate(node, {**env, s: 0})
        a = evaluate(node, {**env, s: 1}) - b
        if a == 0 or (value - b) % a:
            return None
        x = (value - b) // a
        return x if evaluate(node, {**env, s: x}) == value and evaluate(node, {**env, s: x + 7}) == value + 7 * a \
            else None
    except ZeroDivisionError:
        return None
