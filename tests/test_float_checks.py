"""No check compares a computed float exactly unless it says why the result is exact.

A float computed by a kernel can differ in its last bits between CPUs (AVX2 or AVX-512, or
ATEN_CPU_CAPABILITY=default), thread counts and code paths (batched or one by one, cached or not):
`F.kl_div(q.log(), q, reduction="sum").item()` is 0.0 on one CPU and -7.45e-09 on another. So a
check compares such a float with a tolerance (`test_close(a, b, eps=...)` in the notebooks,
`torch.testing.assert_close` or `pytest.approx` in tests/), and an exact comparison stays only
where the result is exact by construction (tokens, integer arithmetic, values copied or filled in,
masked positions, the same computation run twice on one machine), with a comment on the line that
contains the word `exact` and says why, such as `# exact: tokens`.

This file scans the code cells of nbs/*.ipynb, tests/ (with tests/reliability/) and benchmarks/ with
`ast` and fails listing each check that compares exactly without such a comment:

- `test_eq(...)` or `test_ne(...)` with a float literal (0.0, 1e-3, -1.5) as an argument, alone
  or in a tuple, list or dict's values;
- an `assert` whose `==` or `!=` has a float literal on a side;
- `torch.equal(...)` in an `assert` (but `assert not torch.equal(...)`: a difference holds on any
  CPU) or as an argument of `test_eq`;
- `assert_close(..., rtol=0, atol=0)`.

A float literal is a number written with a point or an exponent; an int such as 0 is not one.
The comment may be on any line of the statement, or on the comment lines just above it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
EXACT = re.compile(r"#.*\bexact\b", re.IGNORECASE)  # a comment that says why it is exact


def _is_float_literal(node: ast.AST) -> bool:
    "A float written out, maybe signed, or a tuple, list, set or dict (values) holding one."
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Constant):
        return isinstance(node.value, float)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_float_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_is_float_literal(v) for v in node.values)
    return False


def _name(call: ast.Call) -> str:
    "The called name: `test_eq` for test_eq(...), `torch.equal` for torch.equal(...)."
    f = call.func
    if isinstance(f, ast.Attribute):
        return f"{f.value.id}.{f.attr}" if isinstance(f.value, ast.Name) else f.attr
    return f.id if isinstance(f, ast.Name) else ""


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _compares_exactly(stmt: ast.stmt) -> bool:
    "Does this simple statement hold one of the exact comparisons the module docstring lists?"
    in_assert = isinstance(stmt, ast.Assert)
    # `assert not torch.equal(a, b)`: that they differ holds on any CPU
    negated = {id(n.operand) for n in ast.walk(stmt) if isinstance(getattr(n, "op", None), ast.Not)}
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            name = _name(node)
            if name.split(".")[-1] in ("test_eq", "test_ne"):
                if any(_is_float_literal(a) for a in node.args):
                    return True
                if any(isinstance(a, ast.Call) and _name(a) == "torch.equal" for a in node.args):
                    return True
            if name == "torch.equal" and in_assert and id(node) not in negated:
                return True
            if name.split(".")[-1] == "assert_close":
                tolerances = {k.arg: k.value for k in node.keywords if k.arg in ("rtol", "atol")}
                if len(tolerances) == 2 and all(map(_is_zero, tolerances.values())):
                    return True
        if in_assert and isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.Eq, ast.NotEq)) and (
                    _is_float_literal(left) or _is_float_literal(right)
                ):
                    return True
    return False


def _says_why(lines: list[str], stmt: ast.stmt) -> bool:
    "Has the statement a comment with the word exact, on its lines or on comment lines just above?"
    first = stmt.lineno - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return any(EXACT.search(line) for line in lines[first : stmt.end_lineno])


def exact_comparisons(source: str) -> list[tuple[int, str]]:
    "(line, text) of each statement of `source` that compares a float exactly and says not why."
    lines = source.splitlines()
    found = []
    for stmt in ast.walk(ast.parse(source)):
        if not isinstance(stmt, ast.stmt) or hasattr(stmt, "body"):
            continue  # compound statements: their inner statements are visited on their own
        if _compares_exactly(stmt) and not _says_why(lines, stmt):
            found.append((stmt.lineno, lines[stmt.lineno - 1].strip()))
    return sorted(found)


def _python(cell: str) -> str:
    "A code cell as Python: IPython's magics and shell lines (%, !) become empty lines."
    return "\n".join("" if line.lstrip()[:1] in ("%", "!") else line for line in cell.split("\n"))


def sources() -> list[tuple[str, str]]:
    "(where, Python source): each notebook's code cells, then each test and benchmark file."
    found = []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "code":
                where = f"nbs/{nb.name} cell {i} ({cell.get('id', 'no id')})"
                found.append((where, _python("".join(cell["source"]))))
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        if path.resolve() != THIS:  # this file's planted examples are strings, not checks
            found.append((str(path.relative_to(ROOT)), path.read_text()))
    return found


def test_no_check_compares_a_computed_float_exactly_without_saying_why() -> None:
    problems = []
    for where, source in sources():
        try:
            found = exact_comparisons(source)
        except SyntaxError as e:  # not read: say so rather than pass it by
            problems.append(f"{where} line {e.lineno}: not Python the scan can read ({e.msg})")
            continue
        problems += [f"{where} line {n}: {t}" for n, t in found]
    assert not problems, (
        "exact comparisons of computed floats: use test_close / assert_close / pytest.approx "
        "with a tolerance, or say why the result is exact in a comment with the word exact:\n"
        + "\n".join(problems)
    )


def test_the_scan_reads_the_notebooks_and_the_tests() -> None:
    where = [w for w, _ in sources()]
    assert any(w.startswith("nbs/04_label_smoothing.ipynb cell") for w in where)
    assert "tests/test_losses.py" in where and "benchmarks/common.py" in where
    assert not any(w.endswith("test_float_checks.py") for w in where)


def test_the_scan_finds_planted_exact_comparisons() -> None:
    planted = [
        "x = torch.tensor([0.1, 0.2])",
        "test_eq(x.sum().item(), 0.3)",
        "assert loss.item() == 0.0",
        "assert (a, b) != (1, -2.5)",
        "assert torch.equal(fast, slow)",
        "test_eq(torch.equal(fast, slow), True)",
        "torch.testing.assert_close(a, b, rtol=0, atol=0)",
        "for x in xs:\n    test_eq(\n        f(x),\n        1e-3,\n    )",
    ]
    found = exact_comparisons("\n".join(planted))
    assert [text for _, text in found] == [*planted[1:-1], "test_eq("]
    assert [line for line, _ in found] == [2, 3, 4, 5, 6, 7, 9]  # a statement's first line


def test_the_scan_passes_what_is_exact_or_has_a_tolerance() -> None:
    fine = [
        "test_eq(x.sum().item(), 0.3)  # exact: a sum of copies",
        "test_eq(\n    f(x),\n    0.5,  # exact: one half, exactly\n)",
        "# exact: a sum of copies,\n# written above\ntest_eq(x.sum().item(), 0.3)",
        "test_close(x.sum().item(), 0.3, eps=1e-6)",
        "assert loss.item() == pytest.approx(0.0, abs=1e-6)",
        "torch.testing.assert_close(a, b, rtol=0, atol=1e-6)",
        "test_eq(tokens, [1, 2])",  # ints are no floats
        "assert n == 3 and s == 'a'",
        "assert not torch.equal(a, b)",
        "if torch.equal(a, b):  # not a check\n    pass",
        "test_eq(f([0.5]), None)",  # a float among a call's arguments is not the compared value
        "%time x = 1.0",  # a notebook's magic
    ]
    assert exact_comparisons(_python("\n".join(fine))) == []


def test_a_comment_that_does_not_say_exact_is_not_enough() -> None:
    for source in (
        "test_eq(x.sum().item(), 0.3)  # every example exactly once",
        "# exact: about the line above\nx = 1\ntest_eq(x.sum().item(), 0.3)",
        "test_eq(exact, 1.0)",  # a name, not a comment
    ):
        assert len(exact_comparisons(source)) == 1, source
