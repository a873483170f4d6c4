"""The package's structure as the project keeps it: small functions, small exported cells."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import tool

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def structure():
    "tools/structure.py as a module."
    return tool("structure")


def test_no_function_over_40_lines_and_no_exported_cell_over_30() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "structure.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def test_the_caps_are_the_issue_s(structure) -> None:
    assert (structure.MAX_FUNCTION_LINES, structure.MAX_EXPORTED_CELL_LINES) == (40, 30)


def test_the_check_counts_a_function_s_lines(structure, tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * 70)
    assert structure.functions(tmp_path / "long.py") == [(71, "long.f")]


def test_parameters_are_counted_without_self(structure, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "def f(a, b, /, c, *args, d, **kw):\n    pass\n\n"
        "class C:\n    def g(self, x):\n        pass\n"
    )
    assert structure.parameters(tmp_path / "m.py") == [(6, "m.f"), (1, "m.C.g")]


def test_the_report_names_functions_with_many_parameters(structure) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "structure.py")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"functions with more than {structure.MAX_PARAMETERS} parameters" in done.stdout


def test_the_change_plans_name_tests_that_exist() -> None:
    "Each plan CONTRIBUTING.md says is carried out names a test function that exists."
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = re.findall(r"`(tests/test_\w+\.py)::(\w+)`", " ".join(text.split()))
    assert len(named) >= 3, named  # the CLI option, the data set, rotary positions
    for path, name in named:
        assert f"\ndef {name}(" in (ROOT / path).read_text(encoding="utf-8"), (path, name)


def test_methods_attached_outside_their_class_are_found(structure, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "class A:\n    def inside(self):\n        pass\n\n\n"
        "@patch_to(A)\ndef late(self):\n    pass\n\n\n"
        "@patch\ndef later(self: A):\n    pass\n\n\n"
        "def f(self):\n    pass\n\n\nA.g = f\n"
    )
    assert structure.attached_methods(tmp_path / "m.py") == [
        "m.A.late (@patch_to)",
        "m.A.later (@patch)",
        "m.A.g (assigned)",
    ]


def test_the_notebooks_that_write_each_module_are_read_from_their_directives(structure) -> None:
    written = structure.writers()
    assert "01_model" in written["model"] and "09_trainer" in written["trainer"]
    assert all(nbs for nbs in written.values())


def test_the_longest_import_chain_follows_imports(structure) -> None:
    chain = structure.longest_import_chain()
    package = structure.PACKAGE
    for upper, lower in zip(chain, chain[1:]):
        assert lower in structure.package_imports(package / f"{upper}.py"), (upper, lower)
    assert structure.package_imports(package / f"{chain[-1]}.py") in ([], [chain[-1]])
