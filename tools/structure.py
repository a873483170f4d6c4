"""Print the package's structure as a new engineer meets it: module sizes, the notebooks that
write each module (and the modules each notebook writes, what Part I's modules import from
Part II's, the private names notebooks import), the methods attached outside their class, the
longest functions, the largest exported notebook cells, the functions with more than six
parameters, the functions a decoding search passes through, the widest code lines, what each
module imports from the package and the longest chain of such imports.

    python tools/structure.py            # the tables
    python tools/structure.py --check    # exit 1 if a function runs over 40 lines or an
                                         # exported cell over 30 (the limits the tests keep)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated_transformer"
MAX_FUNCTION_LINES = 40
MAX_EXPORTED_CELL_LINES = 30
MAX_PARAMETERS = 6  # more is a bundle taken apart: the report lists them
GENERATED = {"_modidx.py"}


def modules() -> list[Path]:
    "The package's modules, nbdev's index left out."
    return sorted(p for p in PACKAGE.glob("*.py") if p.name not in GENERATED)


def definitions(path: Path) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    "Every function and method of a module, with its qualified name (module.Class.method)."
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child, f"{path.stem}.{prefix}{child.name}"))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return found


def functions(path: Path) -> list[tuple[int, str]]:
    "(lines, qualified name) of every function and method in a module."
    return [(f.end_lineno - f.lineno + 1, name) for f, name in definitions(path)]


def parameters(path: Path) -> list[tuple[int, str]]:
    "(parameters, qualified name) of every function and method, `self` and `cls` not counted."
    found = []
    for f, name in definitions(path):
        a = f.args
        named = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        found.append((sum(p is not None and p.arg not in ("self", "cls") for p in named), name))
    return found


def package_imports(path: Path) -> list[str]:
    "The package modules a module imports."
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level == 1:
                names.add(node.module.split(".")[0])
            elif node.module.startswith("annotated_transformer."):
                names.add(node.module.split(".")[1])
    return sorted(names)


def writers(nbs: Path = ROOT / "nbs") -> dict[str, list[str]]:
    "module -> the notebooks nbdev-export writes it from (`default_exp`, `export NAME`)."
    found = defaultdict(set)
    for nb_path in sorted(nbs.glob("*.ipynb")):
        default = None
        for cell in json.loads(nb_path.read_text())["cells"]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            if match := re.search(r"^#\|\s*default_exp\s+(\w+)", source, re.MULTILINE):
                default = match.group(1)
            for match in re.finditer(r"^#\|\s*exports?\b[ \t]*(\w*)", source, re.MULTILINE):
                found[match.group(1) or default].add(nb_path.stem)
    return {module: sorted(nbs) for module, nbs in sorted(found.items()) if module}


def written_by_notebook(nbs: Path = ROOT / "nbs") -> dict[str, list[str]]:
    "notebook -> the modules it writes: the other side of `writers`."
    found = defaultdict(list)
    for module, notebooks in writers(nbs).items():
        for notebook in notebooks:
            found[notebook].append(module)
    return dict(sorted(found.items()))


PART_I = re.compile(r"^0[1-8]_")  # the learner's chapters (tools/prose.py's PART_I)


def runtime_imports(path: Path) -> set[str]:
    """The package modules a module imports at run time (an import under `if TYPE_CHECKING:` is a
    type hint's, not code the module runs)."""
    tree = ast.parse(path.read_text())
    hints = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    ]
    hinted = {id(x) for h in hints for x in ast.walk(h)}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and id(node) not in hinted:
            if node.level == 1 or node.module.startswith("annotated_transformer."):
                imported.add(node.module.split(".")[-1 if node.level == 0 else 0])
    return imported


def part_one_imports(nbs: Path = ROOT / "nbs", package: Path = PACKAGE) -> dict[str, list[str]]:
    "Part I module -> the Part II modules it imports at run time."
    written_by = writers(nbs)
    part_one = {m for m, notebooks in written_by.items() if all(PART_I.match(n) for n in notebooks)}
    found = {}
    for module in sorted(part_one):
        imported = runtime_imports(package / f"{module}.py")
        later = sorted(m for m in imported if m in written_by and m not in part_one)
        if later:
            found[module] = later
    return found


def chapter(notebook: str) -> int:
    "A chapter's number, from its notebook's name: 09_recurrent -> 9."
    return int(notebook.split("_")[0])


def later_chapter_imports(nbs: Path = ROOT / "nbs", package: Path = PACKAGE) -> list[str]:
    """Every module that imports, at run time, a module a later chapter writes: 'a (09) imports b
    (12)'. The chapters read in order, so each chapter's code stands on what came before it."""
    written_by = {m: chapter(nbs[0]) for m, nbs in writers(nbs).items() if nbs[0][0].isdigit()}
    found = []
    for module, number in sorted(written_by.items(), key=lambda item: (item[1], item[0])):
        for imported in sorted(runtime_imports(package / f"{module}.py")):
            if written_by.get(imported, 0) > number:
                found.append(
                    f"{module} ({number:02d}) imports {imported} ({written_by[imported]:02d})"
                )
    return found


PRIVATE_IMPORT = re.compile(
    r"^\s*from annotated_transformer\.(\w+) import (?:\(([^)]*)\)|(.*))", re.M
)


def private_imports(nbs: Path = ROOT / "nbs") -> list[str]:
    "Every notebook cell that imports an underscore name from the package: 'notebook: name'."
    found = []
    for nb_path in sorted(nbs.glob("*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for match in PRIVATE_IMPORT.finditer("".join(cell["source"])):
                names = re.sub(r"#.*", "", match.group(2) or match.group(3))
                for name in re.split(r"[,\s]+", names):
                    if name.startswith("_") and not name.startswith("__"):
                        found.append(f"{nb_path.stem}: {match.group(1)}.{name}")
    return found


def attached_methods(path: Path) -> list[str]:
    """The methods a module attaches to a class outside its body: functions decorated with
    fastcore's `@patch`/`@patch_to`, and top-level assignments `Class.name = ...`."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("patch_to"):
                    cls = ast.unparse(d.args[0]) if d.args else "?"  # @patch_to(Class)
                elif ast.unparse(d).endswith("patch") and node.args.args:
                    cls = ast.unparse(node.args.args[0].annotation or ast.Name("?"))  # self: Class
                else:
                    continue
                found.append(f"{path.stem}.{cls}.{node.name} (@{ast.unparse(d).split('(')[0]})")
        elif isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in getattr(target, "elts", [target])]
            for target in targets:  # `A.f = g`, and each of `A.f, A.g = g, h`
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    found.append(f"{path.stem}.{ast.unparse(target)} (assigned)")
    return found


def longest_import_chain() -> list[str]:
    "The longest chain of modules each importing the next from the package."
    graph = {p.stem: [m for m in package_imports(p) if m != p.stem] for p in modules()}

    @cache
    def chain(module: str) -> tuple[str, ...]:
        below = [chain(m) for m in graph.get(module, [])]
        return (module, *max(below, key=len, default=()))

    return list(max((chain(m) for m in graph), key=len))


SEARCH_PARAMETER = re.compile(r"\b(search|beam_size|beam)\b")


def search_carriers() -> list[str]:
    """The functions a decoding search passes through: those with a parameter named search,
    beam_size or beam, or annotated with `Search` (what the `--beam` flag builds)."""
    found = []
    for path in [*modules(), PACKAGE / "cli.py"]:
        for f, name in definitions(path):
            a = f.args
            for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                annotation = ast.unparse(p.annotation) if p.annotation else ""
                if SEARCH_PARAMETER.fullmatch(p.arg) or re.search(r"\bSearch\b", annotation):
                    found.append(name)
                    break
    return sorted(set(found))


def exported_cells() -> list[tuple[int, str]]:
    "(lines, notebook and cell id) of every exported cell."
    cells = []
    for nb_path in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(nb_path.read_text())["cells"]:
            source = "".join(cell["source"])
            first = source.lstrip().splitlines()[:3]
            if cell["cell_type"] == "code" and any(line.startswith("#| export") for line in first):
                cells.append((len(source.splitlines()), f"{nb_path.name} #{cell.get('id', '?')}"))
    return cells


def widest_lines(limit: int = 100) -> tuple[int, int]:
    "The widest code line in the package and notebooks, and how many lines run past `limit`."
    widths = [len(line) for p in modules() for line in p.read_text().splitlines()]
    for nb_path in (ROOT / "nbs").glob("*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                widths += [len(line) for line in "".join(cell["source"]).splitlines()]
    return max(widths), sum(w > limit for w in widths)


def report() -> None:
    "Print the tables."
    print("module                         lines  imports from the package")
    for path in modules():
        lines = len(path.read_text().splitlines())
        print(f"{path.stem:<30} {lines:>5}  {', '.join(package_imports(path)) or '-'}")
    written = writers()
    shared = {m: nbs for m, nbs in written.items() if len(nbs) > 1}
    print(f"\nmodules written by more than one notebook: {len(shared)} of {len(written)}")
    for module, nbs in shared.items():
        print(f"  {module:<28} {', '.join(nbs)}")
    several = {nb: mods for nb, mods in written_by_notebook().items() if len(mods) > 1}
    print(f"notebooks writing more than one module: {len(several)}")
    for nb, mods in several.items():
        print(f"  {nb:<28} {', '.join(mods)}")
    later = part_one_imports()
    print(f"Part I modules importing Part II modules: {len(later)}")
    for module, imported in later.items():
        print(f"  {module:<28} {', '.join(imported)}")
    backwards = later_chapter_imports()
    print(f"modules importing a later chapter's module: {len(backwards)}")
    for line in backwards:
        print(f"  {line}")
    private = private_imports()
    print(f"private names the notebooks import from the package: {len(private)}")
    for name in private:
        print(f"  {name}")
    attached = [m for p in modules() for m in attached_methods(p)]
    print(f"\nmethods attached outside their class: {len(attached)}")
    for name in attached:
        print(f"  {name}")
    chain = longest_import_chain()
    print(f"\nlongest import chain ({len(chain)} modules): {' -> '.join(chain)}")
    carriers = search_carriers()
    files = sorted({name.split(".")[0] for name in carriers})
    print(f"\nfunctions a search passes through: {len(carriers)} in {len(files)} files")
    for name in carriers:
        print(f"  {name}")
    print("\nlongest functions")
    for lines, name in sorted((f for p in modules() for f in functions(p)), reverse=True)[:10]:
        print(f"  {lines:>4}  {name}")
    cells = exported_cells()
    at_cap = sum(lines >= MAX_EXPORTED_CELL_LINES for lines, _ in cells)
    print(f"\nlargest exported cells ({len(cells)} in all; {at_cap} at the cap of 30 lines)")
    for lines, where in sorted(cells, reverse=True)[:10]:
        print(f"  {lines:>4}  {where}")
    many = sorted(
        (f for p in modules() for f in parameters(p) if f[0] > MAX_PARAMETERS), reverse=True
    )
    print(f"\nfunctions with more than {MAX_PARAMETERS} parameters: {len(many)}")
    for count, name in many:
        print(f"  {count:>4}  {name}")
    widest, over = widest_lines()
    print(f"\nwidest code line: {widest} columns; lines over 100 columns: {over}")


def check() -> int:
    "1 if a function or an exported cell is over its limit, naming it; else 0."
    long_functions = [f for p in modules() for f in functions(p) if f[0] > MAX_FUNCTION_LINES]
    long_cells = [c for c in exported_cells() if c[0] > MAX_EXPORTED_CELL_LINES]
    for lines, name in long_functions:
        print(f"function {name}: {lines} lines (at most {MAX_FUNCTION_LINES})")
    for lines, where in long_cells:
        print(f"exported cell {where}: {lines} lines (at most {MAX_EXPORTED_CELL_LINES})")
    return 1 if long_functions or long_cells else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the limits instead of printing")
    sys.exit(check() if parser.parse_args().check else report())
