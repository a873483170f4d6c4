"""Write README.md from the landing page (nbs/index.ipynb): what nbdev-readme does with Quarto,
which we cannot assume. The command-line reference stays in its chapter, which the page links.

Markdown cells are copied (links made relative to the repository root); visible code cells become
Python blocks followed by their output; `#| echo: false` cells give their output alone; a cell
that shows a committed figure (`SVG(filename="images/NAME.svg")`) links that file, and any other
SVG output is written to nbs/images/ and linked. `#| hide` cells are left out. tools/test.sh runs
this and fails if README.md or an image changed, so they never drift from the notebooks.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
HEADER = (
    "<!-- Generated from nbs/index.ipynb by tools/readme.py: edit the notebook, not this file. "
    "-->\n\n"
)


def directive(cell: nbformat.NotebookNode, name: str) -> bool:
    "Whether the cell carries nbdev's `#| NAME` directive (`hide`, `echo: false`...)."
    return re.search(rf"^#\|\s*{name}\b", cell.source, re.M) is not None


def without_directives(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not line.startswith("#|")).strip()


def outputs_markdown(cell: nbformat.NotebookNode, image_stem: str) -> list[str]:
    "A code cell's outputs: Markdown as it is, SVG as an image file, text in a plain block."
    parts = []
    for number, out in enumerate(cell.get("outputs", [])):
        data = out.get("data", {})
        if "text/markdown" in data:
            parts.append("".join(data["text/markdown"]).strip())
        elif "image/svg+xml" in data:
            image = NBS / "images" / f"{image_stem}-{number}.svg"
            image.parent.mkdir(exist_ok=True)
            image.write_text("".join(data["image/svg+xml"]), encoding="utf-8")
            parts.append(f"![]({image.relative_to(ROOT).as_posix()})")
        else:
            text = "".join(out.get("text", "") or data.get("text/plain", "")).strip()
            parts.append(f"```\n{text}\n```" if text else "")
    return [p for p in parts if p]


def cell_markdown(cell: nbformat.NotebookNode, image_stem: str) -> str | None:
    "The README text of one cell, or None for a hidden or directive-only cell."
    if directive(cell, "hide") or directive(cell, "default_exp"):
        return None
    if cell.cell_type == "markdown":
        text = without_directives(cell.source)
        return re.sub(r"\]\((\w+\.ipynb)", r"](nbs/\1", text)  # links from the repository root
    if cell.cell_type != "code":
        return None
    figure = re.search(r'SVG\(filename="(images/[\w.-]+\.svg)"\)', cell.source)
    if figure:  # a figure tools/diagrams.py drew: linked where it is, not copied
        shown = [f"![](nbs/{figure.group(1)})"]
    else:
        shown = outputs_markdown(cell, image_stem)
    if not directive(cell, "echo: false"):
        shown.insert(0, f"```python\n{without_directives(cell.source)}\n```")
    return "\n\n".join(shown) or None


def notebook_markdown(nb_path: Path) -> str:
    "A notebook's README text."
    nb = nbformat.read(nb_path, as_version=4)
    parts = [cell_markdown(cell, f"{nb_path.stem}-{i}") for i, cell in enumerate(nb.cells)]
    return "\n\n".join(text for text in parts if text)


def readme_text() -> str:
    "README.md's full text: the landing page."
    return HEADER + notebook_markdown(NBS / "index.ipynb") + "\n"


if __name__ == "__main__":
    (ROOT / "README.md").write_text(readme_text(), encoding="utf-8")
