"""The book's prose, measured and checked against its page.

    python tools/prose.py                  # per chapter: words of our prose on the reading path,
                                           # in folded notes, and code lines shown; Part I's
                                           # totals against its budgets
    python tools/prose.py --budgets        # the same, exit 1 if Part I or the landing page is
                                           # over budget or names engine terms on its path
    python tools/prose.py --check [NB...]  # what our prose cites that its page does not show
    python tools/prose.py --nbs DIR [--budgets]  # the same measures of another copy of nbs/

How it counts. Our prose is the Markdown cells without the paper's quotes (lines starting with
`>`), code blocks, display math, HTML tags and link targets; a folded note (`<details>`) counts
towards the budget but not towards the reading path. Code lines are the non-blank lines of the
code cells a reader sees: cells marked `#| hide` or `#| echo: false` are not shown, `#|`
directives are not counted, folded import cells are.

What the check finds (tests/test_book.py runs it on every notebook):
- a figure, a number with a decimal point ("36.41", "0.6", "12.5%"), in our prose that no quote of
  the paper, code cell or output of the page shows; headings, inline code and math, section
  numbers ("§3.2.1", "Part 5.3") and versions ("2.13.0") aside;
- in Part I, a quoted sentence ("A man is riding a bike.", three words or more from a capital
  letter), the way the prose quotes a model's output, that the page's outputs, code and quotes
  do not show; and a duration in minutes ("about 18 minutes") that no output prints as "N min";
- an output that prints a float with seven or more decimals: rounded to what it means, please;
- a sentence about how the book was made (who asked for a chapter, commits, worktrees).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PART_I = ("01", "02", "03", "04", "05", "06", "07", "08")
# Part I in one sitting: our words (folded notes included), code lines shown, a folded note's
# words, and the landing page's words
BUDGETS = {"part_one_words": 4_500, "part_one_code": 1_300, "note_words": 120, "landing": 600}
# the engine's words: in Part I only inside a folded note
ENGINE_TERMS = (
    "all-reduce",
    "all_reduce",
    "torchrun",
    "rank",
    "fsync",
    "file lock",
    "filelock",
    "graph break",
    "graph breaks",
    "torch.compile",
    "bfloat16",
    "float16",
    "GradScaler",
    "no_sync",
    "version 0.1",
    "the earlier notebook",
    "is_compiling",
    "meta device",
    'torch.device("meta")',
    "mixed precision",
    "fused=True",
    "FusedLabelSmoothing",
    "slow cell",
    "Translating",
    "ChoiceError",
    "RunCheckpoint",
    "ClassVar",
    "MULTI30K_RUN",
    "_chapters",
    "threads sum",
)
EARLIER_NOTEBOOK_ONCE = "01"  # the chapter whose introduction says what the earlier notebook was

FIGURE = re.compile(r"(?<![\w.§$\\-])\d+\.\d+(?![\w.]*\d)")  # 36.41, 0.6, not 2.13.0 or v1.2
SECTION = re.compile(
    r"(?:§|Part |Parts |Section |Sections |Table |Figure |eq\. \(|Python |torch |PyTorch |KaTeX )"
    r"\s*[\d.]+"
)  # section numbers and versions: "Part 5.3", "Python 3.10"
HEADS = re.compile(r"\bheads? (\d+(?:(?:, | and | or |-|–)\d+)*)")
LAYERS = re.compile(r"\blayers? (\d+(?:(?:, | and | or |-|–)\d+)*)(?! (?:of|layers|encoder))")
QUOTED = re.compile(r'"([A-Z][^"\n]*)"|“([A-Z][^”\n]*)”')  # "A man is riding a bike."
TOKEN = re.compile(r'"([^"\n]{1,40})"|“([^”\n]{1,40})”')  # a quoted word of a sentence: "trägt"
# a gain or loss told in words ("adds half a point"): the page prints numbers, the prose cites them
WORDED_GAIN = re.compile(
    r"\b(?:adds?|gains?|loses|costs?)\s+(?:(?:about|roughly|half|a|an|one|two|three|up to|to)\s+)+"
    r"(?:points?|a point)\b",
    re.IGNORECASE,
)
BOTH = re.compile(r"\bwith and without\b", re.IGNORECASE)  # promises two results, printed
MINUTES = re.compile(r"(\d+(?:\.\d+)?)(?:\s|-)?(?:minutes?|min)\b")
LONG_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{7,}(?!\d)")
MAKING = re.compile(
    r"\bthe issue (?:that|which)\b|\bissue #?\d+\b|\bcommit [0-9a-f]{7,}\b|\bworktree\b"
    r"|\bthis session\b|\bwhoever (?:filed|asked)\b",
    re.IGNORECASE,
)


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
    counts = [
        prose_words(source(c))
        for c in cells(nb_path)
        if c["cell_type"] == "markdown" and shown(c)  # a hidden cell is nobody's reading
    ]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def shown(cell: dict) -> bool:
    "Whether a reader sees this code cell's source."
    directives = {line.strip() for line in source(cell).splitlines() if line.startswith("#|")}
    return not directives & {"#| hide", "#| echo: false"}


def code_lines(nb_path: Path) -> int:
    "The non-blank code lines a reader sees, directives aside."
    return sum(
        1
        for cell in cells(nb_path)
        if cell["cell_type"] == "code" and shown(cell)
        for line in source(cell).splitlines()
        if line.strip() and not line.startswith("#|")
    )


def folded_notes(nb_path: Path) -> list[int]:
    "The words of each folded note."
    notes = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            for note in re.findall(r"<details[^>]*>(.*?)</details>", source(cell), flags=re.S):
                notes.append(len(our_prose(note).split()))
    return notes


def engine_terms(nb_path: Path) -> list[str]:
    "The engine's words on the reading path: prose outside folded notes and the code shown."
    text = [
        our_prose(source(c), folded=False) for c in cells(nb_path) if c["cell_type"] == "markdown"
    ]
    text += [source(c) for c in cells(nb_path) if c["cell_type"] == "code" and shown(c)]
    found = []
    for term in ENGINE_TERMS:
        count = len(re.findall(rf"(?<![\w-]){re.escape(term)}(?![\w-])", "\n".join(text), re.I))
        if term == "the earlier notebook" and nb_path.name[:2] == EARLIER_NOTEBOOK_ONCE:
            count -= 1  # the introduction says once what the earlier notebook was
        found += [term] * max(count, 0)
    return found


def page_text(nb_path: Path) -> str:
    "What the page shows besides our prose: the paper's quotes, the code and its outputs."
    shown_text = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            shown_text += [line for line in source(cell).splitlines() if line.startswith(">")]
            continue
        shown_text.append(source(cell))
        shown_text += output_texts(cell)
    return "\n".join(shown_text)


def output_texts(cell: dict) -> list[str]:
    "The text a code cell's outputs show."
    texts = []
    for output in cell.get("outputs", []):
        texts.append("".join(output.get("text", "")))
        for kind, value in output.get("data", {}).items():
            if kind.startswith("text/") or kind == "image/svg+xml":
                texts.append("".join(value))
    return texts


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
    page = page_text(nb_path)
    return [
        f
        for f in dict.fromkeys(prose_figures(nb_path))
        if not re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", page)
    ]


def _flat(text: str) -> str:
    "Text without emphasis marks, HTML entities for quotes, and runs of white space."
    text = text.replace("&quot;", '"').replace("&#39;", "'").replace("*", "")
    return re.sub(r"\s+", " ", text)


def _quoted(nb_path: Path, pattern: re.Pattern) -> list[str]:
    "What our prose puts in quotes (`pattern`'s first or second group), flattened, outside code."
    found = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            text = re.sub(r"`[^`]*`", " ", our_prose(source(cell)))
            found += [_flat(m[1] or m[2]).strip(" .,;:") for m in pattern.finditer(text)]
    return found


def missing_quotes(nb_path: Path) -> list[str]:
    "The sentences our prose quotes (as a model's output is quoted) that the page does not show."
    page = _flat(page_text(nb_path))
    return [q for q in _quoted(nb_path, QUOTED) if len(q.split()) >= 3 and q not in page]


def missing_tokens(nb_path: Path) -> list[str]:
    """The words our prose quotes from the page (a token of a translation, a sentence's word) that
    the page does not show: quoted, each word must be among the outputs, code or quotes."""
    tokens = lambda text: set(re.findall(r"[^\W_]+|[^\w\s]", text))  # noqa: E731
    words = tokens(_flat(page_text(nb_path)))
    return [q for q in _quoted(nb_path, TOKEN) if q and not tokens(q) <= words]


def prose_matches(nb_path: Path, pattern: re.Pattern) -> list[str]:
    "What `pattern` finds in our prose, in order."
    return [
        m[0]
        for cell in cells(nb_path)
        if cell["cell_type"] == "markdown"
        for m in pattern.finditer(our_prose(source(cell)))
    ]


def worded_gains(nb_path: Path) -> list[str]:
    "Gains and losses our prose tells in words, where the page prints the numbers to cite."
    return prose_matches(nb_path, WORDED_GAIN)


def one_sided(nb_path: Path) -> list[str]:
    """Prose that promises a result "with and without" something, above a code cell that prints
    fewer than two lines: one of the two is missing."""
    found, promised = [], None
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            promised = m[0] if (m := BOTH.search(our_prose(source(cell)))) else None
        elif promised and shown(cell):
            lines = [line for text in output_texts(cell) for line in text.splitlines() if line]
            if len(lines) < 2:
                found.append(f"{promised!r}, above {len(lines)} printed line(s)")
            promised = None
    return found


def missing_minutes(nb_path: Path) -> list[str]:
    "The durations in minutes our prose gives that no output prints."
    printed = []
    for cell in cells(nb_path):
        for text in output_texts(cell) if cell["cell_type"] == "code" else []:
            printed += [float(m[1]) for m in MINUTES.finditer(text)]
    missing = []
    for cell in cells(nb_path):
        if cell["cell_type"] == "markdown":
            for m in MINUTES.finditer(our_prose(source(cell), for_figures=True)):
                if not any(round(value) == round(float(m[1])) for value in printed):
                    missing.append(m[0])
    return missing


def long_floats(nb_path: Path) -> list[str]:
    "Floats printed with seven or more decimals."
    return [
        m[0]
        for cell in cells(nb_path)
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
        for text in [
            "".join(output.get("text", "")),
            "".join(output.get("data", {}).get("text/plain", "")),
        ]
        for m in LONG_FLOAT.finditer(text)
    ]


def making_of(nb_path: Path) -> list[str]:
    "Sentences about how the book was made."
    return prose_matches(nb_path, MAKING)


def problems(nb_path: Path) -> list[str]:
    "Everything --check finds on one page, one line each."
    found = [f"not on the page: {', '.join(f)}" for f in [missing_figures(nb_path)] if f]
    if nb_path.name[:2] in PART_I:  # Part II cites titles, labels and recorded runs' budgets
        found += [f'quoted but not shown: "{q}"' for q in missing_quotes(nb_path)]
        found += [f"no output prints: {m}" for m in missing_minutes(nb_path)]
        found += [f'a quoted word the page does not show: "{t}"' for t in missing_tokens(nb_path)]
        found += [f"a result told in words, not cited: {g}" for g in worded_gains(nb_path)]
        found += [f"promised both, printed one: {b}" for b in one_sided(nb_path)]
    found += [f"printed unrounded: {f}" for f in long_floats(nb_path)[:3]]
    found += [f"about how the book was made: {m}" for m in making_of(nb_path)]
    return found


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


def part_one(nbs: Path) -> list[Path]:
    return sorted(p for p in nbs.glob("*.ipynb") if p.name[:2] in PART_I)


def part_one_totals(nbs: Path) -> tuple[int, int]:
    "Part I's words (folded notes included) and code lines shown."
    chapters = part_one(nbs)
    return sum(sum(chapter_words(nb)) for nb in chapters), sum(code_lines(nb) for nb in chapters)


def over_budget(nbs: Path) -> list[str]:
    "What breaks Part I's budgets and the landing page's, one line each."
    words, code = part_one_totals(nbs)
    found = [f"Part I: {words:,} words > {BUDGETS['part_one_words']:,}"] * (
        words > BUDGETS["part_one_words"]
    )
    found += [f"Part I: {code:,} code lines > {BUDGETS['part_one_code']:,}"] * (
        code > BUDGETS["part_one_code"]
    )
    landing = chapter_words(nbs / "index.ipynb")[0]
    found += [f"landing page: {landing} words > {BUDGETS['landing']}"] * (
        landing > BUDGETS["landing"]
    )
    for nb in part_one(nbs):
        terms = engine_terms(nb)
        found += [
            f"{nb.stem}: '{t}' x{terms.count(t)} outside a folded note"
            for t in dict.fromkeys(terms)
        ]
        long = [n for n in folded_notes(nb) if n > BUDGETS["note_words"]]
        found += [f"{nb.stem}: a folded note of {n} words" for n in long]
    return found


def report(nbs: Path) -> None:
    "Words, folded words and code lines per chapter; Part I's totals against its budgets."
    print(f"{'chapter':<22} {'words':>7} {'folded':>7} {'code':>6} {'engine':>7}")
    for nb in sorted(nbs.glob("*.ipynb")):
        words, folded = chapter_words(nb)
        engine = len(engine_terms(nb)) if nb.name[:2] in PART_I else 0
        print(f"{nb.stem:<22} {words:>7,} {folded:>7,} {code_lines(nb):>6,} {engine:>7}")
    words, code = part_one_totals(nbs)
    print(
        f"Part I (01-08): {words:,} words (budget {BUDGETS['part_one_words']:,}), "
        f"{code:,} code lines (budget {BUDGETS['part_one_code']:,})"
    )
    print(
        f"landing page: {chapter_words(nbs / 'index.ipynb')[0]} words (budget {BUDGETS['landing']})"
    )


def main(argv: list[str]) -> int:
    nbs = ROOT / "nbs"
    if argv[:1] == ["--check"]:
        failed = False
        for nb_path in [Path(p) for p in argv[1:]] or sorted(nbs.glob("*.ipynb")):
            for problem in problems(nb_path):
                failed = True
                print(f"{nb_path}: {problem}")
        return 1 if failed else 0
    if argv[:1] == ["--nbs"]:  # measure another copy of the book, e.g. an older commit's
        nbs, argv = Path(argv[1]), argv[2:]
    report(nbs)
    if argv[:1] == ["--budgets"]:
        over = over_budget(nbs)
        for line in over:
            print(f"over budget: {line}")
        return 1 if over else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
