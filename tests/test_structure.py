"""The package's structure as the project keeps it: small functions, small exported cells."""

from __future__ import annotations

import json
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
        "def f(self):\n    pass\n\n\nA.g = f\nA.h, A.i = f, f\n"
    )
    assert structure.attached_methods(tmp_path / "m.py") == [
        "m.A.late (@patch_to)",
        "m.A.later (@patch)",
        "m.A.g (assigned)",
        "m.A.h (assigned)",
        "m.A.i (assigned)",
    ]


def test_the_notebooks_that_write_each_module_are_read_from_their_directives(structure) -> None:
    written = structure.writers()
    assert "01_model" in written["model"] and "20_pipeline" in written["pipeline"]
    assert all(nbs for nbs in written.values())


def test_the_longest_import_chain_follows_imports(structure) -> None:
    chain = structure.longest_import_chain()
    package = structure.PACKAGE
    for upper, lower in zip(chain, chain[1:]):
        assert lower in structure.package_imports(package / f"{upper}.py"), (upper, lower)
    assert structure.package_imports(package / f"{chain[-1]}.py") in ([], [chain[-1]])


# ---------------------------------------------------------------- one notebook, one module
def notebook(path: Path, *sources: str) -> None:
    "A notebook of code cells with these sources."
    cells = [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in sources]
    path.write_text(json.dumps({"cells": cells}))


def test_one_notebook_writes_one_module_and_one_module_is_written_by_one_notebook(structure):
    "fastcore's rule, read from the notebooks' `default_exp` and `export` directives."
    shared = {m: nbs for m, nbs in structure.writers().items() if len(nbs) > 1}
    several = {nb: mods for nb, mods in structure.written_by_notebook().items() if len(mods) > 1}
    assert shared == {} and several == {}, (shared, several)


def test_the_one_module_rule_can_fail(structure, tmp_path: Path) -> None:
    notebook(tmp_path / "01_a.ipynb", "#| default_exp a", "#| export\nx = 1", "#| export b\ny = 2")
    notebook(tmp_path / "02_c.ipynb", "#| default_exp c", "#| exports\nz = 3", "#| export a\nw = 4")
    assert structure.writers(tmp_path) == {"a": ["01_a", "02_c"], "b": ["01_a"], "c": ["02_c"]}
    assert structure.written_by_notebook(tmp_path) == {"01_a": ["a", "b"], "02_c": ["a", "c"]}


def test_no_method_is_attached_outside_its_class(structure) -> None:
    "Methods live in their class bodies: no @patch_to, no `Class.name = function` after it."
    attached = [m for p in structure.modules() for m in structure.attached_methods(p)]
    assert attached == [], attached


def test_no_notebook_imports_a_private_name(structure, tmp_path: Path) -> None:
    assert structure.private_imports() == []
    notebook(
        tmp_path / "06_x.ipynb",
        "from annotated_transformer.translator import Translator, _nbest  # the plumbing",
        "from annotated_transformer.model import (\n    __version__,\n    _attention,\n)",
        "from annotated_transformer._chapters import ROOT",
    )
    assert structure.private_imports(tmp_path) == [
        "06_x: translator._nbest",
        "06_x: model._attention",
    ]


def test_part_one_modules_import_only_part_one_modules(structure, tmp_path: Path) -> None:
    "Part I's modules hold the learner's code: they import no Part II module at run time."
    assert structure.part_one_imports() == {}
    notebook(tmp_path / "01_a.ipynb", "#| default_exp a", "#| export\nx = 1")
    notebook(tmp_path / "09_b.ipynb", "#| default_exp b", "#| export\nfrom .a import x")
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import y\n"
    )
    (tmp_path / "b.py").write_text("from .a import x\n")
    assert structure.part_one_imports(tmp_path, tmp_path) == {}  # a type hint's import only
    (tmp_path / "a.py").write_text("from annotated_transformer.b import y\n")
    assert structure.part_one_imports(tmp_path, tmp_path) == {"a": ["b"]}


def test_no_module_imports_a_later_chapter_s_module(structure, tmp_path: Path) -> None:
    "The chapters read in order: each chapter's code imports only what earlier chapters wrote."
    assert structure.later_chapter_imports() == []
    notebook(tmp_path / "01_a.ipynb", "#| default_exp a", "#| export\nx = 1")
    notebook(tmp_path / "02_b.ipynb", "#| default_exp b", "#| export\ny = 2")
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import y\n"
    )
    (tmp_path / "b.py").write_text("from .a import x\n")
    assert structure.later_chapter_imports(tmp_path, tmp_path) == []  # a type hint's import only
    (tmp_path / "a.py").write_text("def f():\n    from annotated_transformer.b import y\n")
    assert structure.later_chapter_imports(tmp_path, tmp_path) == ["a (01) imports b (02)"]
