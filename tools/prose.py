"""The book's prose, measured and checked against its page.

    python tools/prose.py                  # words per chapter (the paper's quotes, code and
                                           # folded engineering notes apart); Part I's total
    python tools/prose.py --check [NB...]  # figures the prose cites that its page does not show;
                                           # heads and layers it names that the model lacks

A figure is a number with a decimal point ("36.41", "0.6", "12.5%") in our prose: the paper's
quotes (lines starting with `>`), headings, inline code and math, section numbers ("§3.2.1",
"Part 5.3") and versions ("2.13.0") aside. It is on the page when a quote of the paper, a code
cell's source or its output shows it: a value the code sets, a result the code prints, or a table
a cell reads from `results/` and prints. tests/test_book.py
runs the check on every notebook.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PART_I = ("01", "02", "03", "04", "05", "06", "07", "08")

FIGURE = re.compile(r"(?<![\w.§$\\-])\d+\.\d+(?![\w.]*\d)")  # 36.41, 0.6, not 2.13.0 or v1.2
SECTION = re.compile(
    r"(?:§|Part |Parts |Section |Sections |Table |Figure |eq\. \(|Python |torch |PyTorch |KaTeX )"
    r"\s*[\d.]+"
)  # section numbers and versions: "Part 5.3", "Python 3.10"
HEADS = re.compile(r"\bheads? (\d+(?:(?:, | and | or |-|–)\d+)*)")
LAYERS = re.compile(r"\blayers? (\d+(?:(?:, | and | or |-|–)\d+)*)(?! (?:of|layers|encoder))")


def cells(nb_path: Path) -> list[dict]:
    return json.loads(nb_path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def our_prose(markdown: str, folded: bool = True, for_figures: bool = False) -> str:
    """A Markdown cell without the paper's quotes, code blocks, display math, link targets and
    tags; for the figure check, without headings, inline code and inline math too."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    if not folded:
        text = re.sub(r"<details[^>]*>.*?</details>", " ", text, flags=re.S)
    skipped = (">", "#") if for_figures else (">",)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(skipped))
    if for_figures:
        text = re.sub(r"`[^`]*`", " ", text)  # flags, file names, calls
        text = re.sub(r"\$[^$]+\$", " ", text)  # derivations, not measurements
        text = re.sub(r"arXiv:\S+|abs/\S+", " ", text)
        text = re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", " ", text)  # a cited work's identifier
    text = re.sub(r"\]\([^)]*\)", "]", text)  # a link's target
    return re.sub(r"<[^>]+>", " ", text)


def prose_words(markdown: str) -> tuple[int, int]:
    "(words on the reading path, words in folded notes) of one Markdown cell."
    everything = len(our_prose(markdown).split())
    path = len(our_prose(markdown, folded=False).split())
    return path, everything - path


def chapter_words(nb_path: Path) -> tuple[int, int]:
    "(reading path, folded) words of a notebook."
    counts = [prose_words(source(c)) for c in cells(nb_path) if c["cell_type"] == "markdown"]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def page_text(nb_path: Path) -> str:
    "What the page shows besides our prose: the paper's quotes, the code and its outputs."
    shown = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            shown += [line for line in source(cell).splitlines() if line.startswith(">")]
            continue
        shown.append(source(cell))
        for output in cell.get("outputs", []):
            shown.append("".join(output.get("text", "")))
            for kind, value in output.get("data", {}).items():
                if kind.startswith("text/") or kind == "image/svg+xml":
                    shown.append("".join(value))
    return "\n".join(shown)


def prose_figures(nb_path: Path) -> list[str]:
    "The figures our prose cites, in order."
    found = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            text = SECTION.sub(" ", our_prose(source(cell), for_figures=True))
            found += FIGURE.findall(text)
    return found


def missing_figures(nb_path: Path) -> list[str]:
    "The figures our prose cites that no code cell of the page shows."
    shown = page_text(nb_path)
    return [
        f
        for f in dict.fromkeys(prose_figures(nb_path))
        if not re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", shown)
    ]


def numbers(listed: str) -> list[int]:
    "The numbers in '0, 2 and 3' or '1-3'."
    if m := re.fullmatch(r"(\d+)[-–](\d+)", listed):
        return list(range(int(m.group(1)), int(m.group(2)) + 1))
    return [int(n) for n in re.findall(r"\d+", listed)]


def named(nb_path: Path, pattern: re.Pattern) -> list[int]:
    "The head (or layer) numbers our prose names."
    found = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            text = our_prose(source(cell), for_figures=True)
            found += [n for m in pattern.finditer(text) for n in numbers(m[1])]
    return found


def main(argv: list[str]) -> int:
    if argv[:1] != ["--check"]:
        total = 0
        print(f"{'chapter':<22} {'words':>7} {'folded':>7}")
        for nb_path in sorted((ROOT / "nbs").glob("*.ipynb")):
            words, folded = chapter_words(nb_path)
            print(f"{nb_path.stem:<22} {words:>7,} {folded:>7,}")
            total += words if nb_path.name[:2] in PART_I else 0
        print(f"Part I (01-08), on the reading path: {total:,} words")
        return 0
    paths = [Path(p) for p in argv[1:]] or sorted((ROOT / "nbs").glob("*.ipynb"))
    failed = False
    for nb_path in paths:
        missing = missing_figures(nb_path)
        if missing:
            failed = True
            print(f"{nb_path}: not on the page: {', '.join(missing)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
