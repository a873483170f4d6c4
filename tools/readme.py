"""Write README.md from nbs/index.ipynb (what nbdev-readme does with Quarto, which we cannot assume).

Markdown cells are copied as they are; visible code cells become Python blocks followed by their text
output. tools/test.sh runs this and fails if README.md changed, so the two never drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
HEADER = "<!-- Generated from nbs/index.ipynb by tools/readme.py: edit the notebook, not this file. -->\n\n"


def cell_markdown(cell: nbformat.NotebookNode) -> str | None:
    "The README text of one cell, or None for a hidden or directive-only cell."
    if cell.cell_type == "markdown":
        text = "\n".join(
            line for line in cell.source.splitlines() if not line.startswith("#|")
        ).strip()
        return re.sub(r"\]\((\w+\.ipynb)\)", r"](nbs/\1)", text)  # links from the repository root
    if cell.cell_type != "code" or re.match(r"\s*#\|\s*(hide|default_exp)\b", cell.source):
        return None
    code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("#|")).strip()
    text = "".join(
        "".join(out.get("text", ""))
        if out.output_type == "stream"
        else "".join(out.get("data", {}).get("text/plain", ""))
        for out in cell.get("outputs", [])
    ).strip()
    return f"```python\n{code}\n```" + (f"\n\n```\n{text}\n```" if text else "")


def readme_text(nb_path: Path) -> str:
    "README.md's full text for the index notebook."
    nb = nbformat.read(nb_path, as_version=4)
    parts = [md for md in map(cell_markdown, nb.cells) if md]
    return HEADER + "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    (ROOT / "README.md").write_text(readme_text(ROOT / "nbs" / "index.ipynb"), encoding="utf-8")
