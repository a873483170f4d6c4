"""Execute every notebook in nbs/ top to bottom and render the tutorial to HTML.

The pages go to _docs/ (one per notebook, index.html first), each with a navigation bar linking the
chapters in order. Slow cells run too: that is the point of the main job. The committed notebooks
are not modified; the executed copies exist only in memory.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"


def chapters(nbs: Path) -> list[Path]:
    "The notebooks in reading order: index first, then the numbered chapters."
    numbered = sorted(p for p in nbs.glob("[0-9]*.ipynb"))
    return [nbs / "index.ipynb", *numbered]


def page_name(nb_path: Path) -> str:
    "The HTML file a notebook renders to."
    return nb_path.with_suffix(".html").name


def title(nb: nbformat.NotebookNode, fallback: str) -> str:
    "The notebook's first Markdown heading."
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+)$", cell.source, re.MULTILINE)
            if match:
                return match.group(1).strip()
    return fallback


DIRECTIVE = re.compile(r"^\s*#\|.*(?:\n|$)", re.MULTILINE)  # an nbdev directive line, e.g. `#| export`


def strip_directives(nb: nbformat.NotebookNode) -> None:
    "Remove the cells marked `#| hide` (setup and export plumbing), as nbdev's docs do, and the directive lines of the rest."
    kept = []
    for cell in nb.cells:
        if re.match(r"\s*#\|\s*hide\b", cell.source):
            continue
        cell.source = DIRECTIVE.sub("", cell.source).strip("\n")
        if cell.source or cell.get("outputs"):  # a cell that held only `#| default_exp` goes
            kept.append(cell)
    nb.cells = kept


def nav_bar(pages: list[tuple[str, str]], current: int) -> str:
    "Links to every chapter, plus previous and next."
    items = []
    for i, (href, name) in enumerate(pages):
        label = html.escape(name)
        items.append(f"<strong>{label}</strong>" if i == current else f'<a href="{href}">{label}</a>')
    prev_link = f'<a href="{pages[current - 1][0]}">&larr; previous</a>' if current > 0 else ""
    next_link = f'<a href="{pages[current + 1][0]}">next &rarr;</a>' if current + 1 < len(pages) else ""
    return (
        '<nav class="tutorial-nav" style="padding:0.6em 1em;border-bottom:1px solid #ccc;font-family:sans-serif">'
        + " | ".join(items)
        + f'<span style="float:right">{prev_link} {next_link}</span></nav>'
    )


def execute(nb_path: Path, timeout: int) -> nbformat.NotebookNode:
    "Run the notebook in its own folder and return it with fresh outputs."
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}})
    client.execute()
    return nb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "_docs", help="output folder (default: _docs)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per cell (default: 3600)")
    parser.add_argument("--only", nargs="*", default=None, help="render only these notebooks (file names), still linking all")
    args = parser.parse_args()

    paths = chapters(NBS)
    notebooks = {p: nbformat.read(p, as_version=4) for p in paths}
    pages = [(page_name(p), title(notebooks[p], p.stem)) for p in paths]
    args.out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")

    start = time.time()
    for i, path in enumerate(paths):
        if args.only is not None and path.name not in args.only:
            continue
        t0 = time.time()
        print(f"[{i + 1}/{len(paths)}] executing {path.name} ...", flush=True)
        try:
            nb = execute(path, args.timeout)
        except CellExecutionError as error:
            print(f"FAILED: {path.name} raised an error; no page written for it.\n{error}", file=sys.stderr)
            return 1
        strip_directives(nb)
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": pages[i][1]}})
        body = re.sub(r'href="([^":]+)\.ipynb', r'href="\1.html', body)  # chapter links point at pages
        body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav_bar(pages, i), body, count=1)
        (args.out / pages[i][0]).write_text(body, encoding="utf-8")
        print(f"      wrote {args.out / pages[i][0]} in {time.time() - t0:.0f} s", flush=True)
    print(f"Done in {time.time() - start:.0f} s. Open {args.out / 'index.html'} in a browser.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
