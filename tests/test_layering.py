"""The package's layering, read from its source without importing it.

1. Each module imports only from the modules above it in the package docstring's list, and that
   list names every module once.
2. No module imports or reads another module's underscore names (its private parts), and only
   model.py and fast_decoding.py read the model's internal layout: the attention projections
   `w_q`, `w_k`, `w_v`, `w_o`, the positional table `pe` and the residual connections by index,
   `sublayer[i]`. fast_decoding wraps Part I's layers (their step one position at a time, and the
   accessors exporters read); every other module uses the model's public methods and those
   accessors. Exempt: nbdev's index, `_modidx.py`.
3. The front of the package: `from annotated_transformer import make_model, Translator, train`
   works, each name imported from its module on first use, so importing the package loads nothing
   heavy (no PyTorch).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import annotated_transformer

PACKAGE = Path(annotated_transformer.__file__).parent
EXEMPT = {"__init__", "_modidx"}  # the front and nbdev's generated index of names
MODEL_INTERNALS = {"w_q", "w_k", "w_v", "w_o", "pe"}
LAYOUT_READERS = {"model", "fast_decoding"}  # the model, and the module that wraps its layers


def modules() -> dict[str, str]:
    "Every module of the package that the rules apply to, by name: its source."
    return {p.stem: p.read_text() for p in sorted(PACKAGE.glob("*.py")) if p.stem not in EXEMPT}


# =========================================================================== 1. the layering
def layering(doc: str | None = None) -> list[str]:
    "The modules in their layering order: the docstring's first list of `annotated_transformer.X`."
    names = []
    for line in (doc or annotated_transformer.__doc__).splitlines():
        found = re.match(r"- `annotated_transformer\.(\w+)`", line)
        if found:
            names.append(found.group(1))
        elif names:  # the list has ended (a later one, "Modules:", is in another order)
            break
    return names


def imported_modules(source: str) -> set[str]:
    "The package's modules a module's source imports: `from .x import` or `from package.x import`."
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 1:
                imported.add(node.module.split(".")[0])
            elif node.module.startswith("annotated_transformer."):
                imported.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("annotated_transformer."):
                    imported.add(alias.name.split(".")[1])
    return imported


def test_the_layering_lists_every_module_once() -> None:
    order = layering()
    modules = {p.stem for p in PACKAGE.glob("*.py")} - EXEMPT
    assert sorted(order) == sorted(modules), "the docstring's list is not the package's modules"
    assert order[0] == "model" and order[-1] == "cli"


def test_no_module_imports_upward() -> None:
    "Each module imports only from the modules above it in the package docstring's list."
    order = layering()
    for rank, name in enumerate(order):
        imported = imported_modules((PACKAGE / f"{name}.py").read_text())
        above = imported & set(order[rank:])
        assert not above, f"{name} imports {sorted(above)}, which are not above it"


def test_the_layering_check_can_fail() -> None:
    "The order is the first list's; an import of a later module, written any way, is found."
    doc = (
        "Title.\n\n- `annotated_transformer.b` (B)\n- `annotated_transformer.a`: A\n\nModules:\n\n"
    )
    assert layering(doc + "- `annotated_transformer.a`: A\n- `annotated_transformer.b`: B") == [
        "b",
        "a",
    ]
    assert imported_modules("from .pipeline import train") == {"pipeline"}
    assert imported_modules("from annotated_transformer.cli import main") == {"cli"}
    assert imported_modules("import annotated_transformer.data as data") == {"data"}
    assert imported_modules("from . import runs\nimport torch") == {"runs"}
    assert imported_modules("from torch.nn import Module") == set()


# =========================================================================== 2. private parts
def private(name: str) -> bool:
    "An underscore name that is not a dunder (`__init__` is everyone's)."
    return name.startswith("_") and not name.endswith("__")


def defined_private_names(source: str) -> set[str]:
    "The underscore names a module defines: functions, classes, globals, attributes it assigns."
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {name for name in names if private(name)}


def trespasses(name: str, source: str, others_private: set[str]) -> list[str]:
    """What module `name` reads of others' private parts or, outside LAYOUT_READERS, of the model's
    layout: one line each, with its line number."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (
            node.level >= 1 or (node.module or "").startswith("annotated_transformer")
        ):
            found += [
                f"{name}:{line} imports {alias.name}"
                for alias in node.names
                if private(alias.name) and alias.name != "_modidx"
            ]
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if base not in ("self", "cls") and node.attr in others_private:
                found.append(f"{name}:{line} reads {ast.unparse(node)}")
            if name not in LAYOUT_READERS and node.attr in MODEL_INTERNALS:
                found.append(f"{name}:{line} reads the model's {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and name not in LAYOUT_READERS:
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "sublayer":
                found.append(f"{name}:{line} indexes {ast.unparse(node)}")
    return sorted(found, key=lambda text: int(text.split()[0].split(":")[1]))


def all_trespasses(sources: dict[str, str]) -> list[str]:
    "Every module's trespasses, each against the private names the other modules define."
    defined = {name: defined_private_names(source) for name, source in sources.items()}
    found = []
    for name, source in sources.items():
        own = defined[name]
        others = set().union(*(names for other, names in defined.items() if other != name)) - own
        found += trespasses(name, source, others)
    return found


def test_no_module_reads_another_s_private_parts_or_the_model_s_layout() -> None:
    found = all_trespasses(modules())
    assert found == [], "\n".join(found)


def test_the_private_parts_check_can_fail() -> None:
    "Each kind of trespass, planted in a small package of two modules, is found; fair use is not."
    sources = {
        "model": (
            "class MultiHeadedAttention:\n"
            "    def __init__(self):\n"
            "        self.w_q = 1\n"
            "        self._cache = {}\n"
            "        self.pe = self.w_q\n"
            "def _split(x):\n"
            "    return x\n"
            "def block(layer):\n"
            "    return layer.sublayer[0]\n"
        ),
        "decoding": (
            "from .model import _split, MultiHeadedAttention\n"
            "from annotated_transformer import _modidx\n"
            "def step(attn, layer, position, x):\n"
            "    q = attn.w_q(x)\n"
            "    attn._cache.clear()\n"
            "    x = layer.sublayer[1](x, layer.feed_forward)\n"
            "    self_made = x.__class__\n"
            "    return position.pe[:, :1] + q\n"
        ),
    }
    assert all_trespasses(sources) == [
        "decoding:1 imports _split",
        "decoding:4 reads the model's attn.w_q",
        "decoding:5 reads attn._cache",
        "decoding:6 indexes layer.sublayer[1]",
        "decoding:8 reads the model's position.pe",
    ]


# =========================================================================== 3. the front
def test_importing_the_package_loads_no_torch() -> None:
    code = (
        "import sys, annotated_transformer as a\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from annotated_transformer import make_model, Translator, train\n"
        "assert 'torch' in sys.modules and callable(make_model)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_front_name_is_its_module_s() -> None:
    "Each name of `__all__` resolves to the object of the module the front says it comes from."
    front = annotated_transformer
    assert {"make_model", "Translator", "train", "Search", "TrainConfig"} <= set(front.__all__)
    for name in front.__all__:
        module = __import__(f"annotated_transformer.{front._MODULE_OF[name]}", fromlist=[name])
        assert getattr(front, name) is getattr(module, name), name
        assert name in module.__all__, f"{name} is not public in {module.__name__}"
    assert set(front.__all__) <= set(dir(front))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        annotated_transformer.make_modle  # noqa: B018
    except AttributeError as error:
        assert "make_modle" in str(error)
    else:
        raise AssertionError("a misspelt name resolved")
