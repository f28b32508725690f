"""Size expressions (toolchain/symdims.py) and what the tools take from a contract (toolchain/contract.py):
the grammar torch's printed sizes fall in, its limits, and hostile contracts falling back to positions."""

from __future__ import annotations

import pytest

from toolchain import contract, symdims

ENV = {"s0": 9, "s17": 3, "s27": 5, "s77": 4}


@pytest.mark.parametrize(("text", "value"), [
    ("s77", 4), ("s17 + s77", 7), ("2*s27", 10), ("((s27 + 1)//2)", 3), ("s27*s77", 20), ("s0 - 2*s17", 3),
    ("Max(s17, s77)", 4), ("Min(s17, 2)", 2), ("Mod(s0, 4)", 1), ("s0 % 4", 1), ("FloorDiv(s0, 2)", 4),
    ("-s0 + 10", 1), ("(-7)//2", -4), ("(-7) % 3", 2), ("  s77\t+ 1 ", 5), ("4611686018427387904", 1 << 62),
])
def test_torch_style_expressions_evaluate_as_python_does(text, value):
    assert symdims.evaluate(symdims.parse(text), ENV) == value


@pytest.mark.parametrize("text", [
    "", "s0/2", "s0**2", "s0 ^ 2", "Max(s0)", "Max(s0, 1, 2)", "1+", "(s0", "s0)", "x y", "Piecewise(s0)",
    "ceiling(s0)", "Max", "4611686018427387905", "s0 = 1", "s0.5", "(" * 65 + "s0" + ")" * 65, "-" * 66 + "s0",
    "s0 " + " " * 4094, "s0+s0*Max(s0," * 60 + "s0" + ")" * 60,
])
def test_anything_else_is_refused_with_a_reason(text):
    with pytest.raises(ValueError, match="size expression"):
        symdims.parse(text)


def test_depth_and_length_limits_are_exact():
    symdims.parse("(" * 64 + "s0" + ")" * 64)
    symdims.parse("-" * 65 + "s0")
    symdims.parse("s0" + " " * 4094)


def test_bounds_hold_every_value_and_give_up_where_they_cannot():
    ranges = {"a": (2, 10), "b": (1, None)}
    for text, want in [("a", (2, 10)), ("a + b", (3, None)), ("2*a", (4, 20)), ("a//2", (1, 5)), ("a % 3", (0, 2)),
                       ("Max(a, 4)", (4, 10)), ("Min(a, b)", (1, 10)), ("a - 1", (1, 9)), ("a - b", None),
                       ("-a", None), ("a // b", (0, 10)), ("a // (b - 1)", None)]:
        assert symdims.bounds(symdims.parse(text), ranges) == want, text
        if want is not None:
            for a in range(2, 11):
                for b in range(1, 6):
                    v = symdims.evaluate(symdims.parse(text), {"a": a, "b": b})
                    assert want[0] <= v and (want[1] is None or v <= want[1]), (text, a, b, v)


def test_solve_finds_the_symbol_of_a_linear_expression_only():
    assert symdims.solve(symdims.parse("2*s0 + 1"), 11, {}) == 5
    assert symdims.solve(symdims.parse("s0 + s1"), 7, {"s1": 3}) == 4
    assert symdims.solve(symdims.parse("2*s0"), 11, {}) is None  # no whole solution
    assert symdims.solve(symdims.parse("s0//2"), 3, {}) is None  # not linear
    assert symdims.solve(symdims.parse("s0*s1"), 6, {}) is None  # two unknowns


TREE = {"kind": "dict", "keys": ["logits", "aux"],
        "children": [{"kind": "leaf"}, {"kind": "tuple", "children": [{"kind": "leaf"}, {"kind": "list",
                                                                                        "children": [{"kind": "leaf"}]}]}]}


def test_structure_rebuilds_the_tree_and_falls_back_on_anything_that_does_not_fit():
    doc = {"output_tree": TREE}
    assert contract.structure(doc, [1, 2, 3]) == {"logits": 1, "aux": (2, [3])}
    for bad in ({"output_tree": TREE}, {"output_tree": {"kind": "leaf"}}, {"output_tree": {"kind": "set"}},
                {"output_tree": {"kind": "dict", "keys": [1], "children": [{"kind": "leaf"}]}}, None, {}):
        assert contract.structure(bad, [1, 2]) == (1, 2)  # too few, too many, unknown kinds: positions
    assert contract.structure(None, [7]) == 7
    deep: dict = {"kind": "leaf"}
    for _ in range(200):
        deep = {"kind": "tuple", "children": [deep]}
    assert contract.structure({"output_tree": deep}, [5]) == 5


@pytest.mark.parametrize(("names", "stems"), [
    (["output_0", "output_1"], ["0", "1"]),
    (["logits", "aux.0", "aux.1.0"], ["logits", "aux.0", "aux.1.0"]),
    (["../x", "y"], ["0", "1"]),           # not a file stem
    ([".hidden", "y"], ["0", "1"]),
    (["a", "a"], ["0", "1"]),              # clash
    (["output_x", "x"], ["0", "1"]),       # clash once output_ is dropped
    (["a" * 129, "b"], ["0", "1"]),
    ([5, "b"], ["0", "1"]),
])
def test_output_file_stems_are_safe_and_unique(names, stems):
    doc = {"outputs": [{"name": n} for n in names]}
    assert contract.output_file_stems(doc, len(names)) == stems
    assert contract.output_file_stems(doc, len(names) + 1) == [str(i) for i in range(len(names) + 1)]
