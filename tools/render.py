"""Execute every notebook in nbs/ top to bottom and render the tutorial as a book of HTML pages.

The pages go to _docs/ (one per notebook, index.html first), each with a sidebar listing the
chapters and the current chapter's sections, previous/next links and an "Open in Colab" badge.
Formulas are typeset by KaTeX, copied into _docs/katex/ from the npm package pinned below, so the
book reads offline: no page loads anything from the network. The attention chapter's "Try it"
panel runs a model in the reader's browser from _docs/live/: onnxruntime-web and
@huggingface/tokenizers (npm, pinned below, with their licences), the panel's worker, and the
chapters' subword run exported to ONNX (int8) by this script; a browser fetches them only when the
reader asks, and only from a page served over http. nbdev's directives and `#| hide` cells are
left out, prompts are hidden, each chapter's import cells are folded, and a print stylesheet drops
the navigation. Slow cells run too: that is the point of the main job. The committed notebooks are
not modified; the executed copies exist only in memory.

The chapters' CPU runs (the word-level model chapters 07 and 08 decode, and the panel's subword
model) are trained before the notebooks, outside any cell, so that no cell trains them:
`--prepare-run` does only that, for tools/test.sh to run before nbdev-test. `--timings FILE`
writes each cell's wall time (tab-separated, slowest first) and names the cells over the budget
of about two minutes.
"""

from __future__ import annotations

import argparse
import ast
import base64
import datetime
import hashlib
import html
import io
import os
import re
import shutil
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / "nbs"
BOOK = ROOT / "tools" / "book"  # the template, stylesheet, script and badge
# npm packages the book ships, each pinned by version and by the registry's sha512 of its tarball
NPM = {
    "katex": (
        "0.19.1",
        "jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRhKvr5614uRrEfA==",
    ),
    "onnxruntime-web": (  # the "Try it" panel's runtime (MIT)
        "1.30.0",
        "q0y+JrrtukXSzsBWEMccVfqX25LRmosXHF+CaRJmg8pZClzcV7svNc4rKY3jL02Vb7QmRMDs1SigqR4CXAfKYQ==",
    ),
    "@huggingface/tokenizers": (  # and its tokenizer (Apache-2.0)
        "0.2.0",
        "LidMHe1FpcSYH4vcSjXooda34pC0M8m1gmDOv7SQi6Iv+ib1zX7J3sHBCC9/3FPCkn2k1b55FneVqMRxrr99pg==",
    ),
}
# The README's badge; pages use a local copy
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


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


def colab_url(nb_path: Path) -> str:
    "The notebook opened in Colab from the repository named in nbs/nbdev.yml."
    site = yaml.safe_load((NBS / "nbdev.yml").read_text())["website"]
    repo = site["repo-url"].removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{site['repo-branch']}/nbs/{nb_path.name}"


# --- npm packages, bundled: KaTeX, and the "Try it" panel's runtime and tokenizer -------------


def npm_tarball(name: str) -> bytes:
    """The pinned npm package `name` (a key of NPM): the cached download, fetched once from npm's
    registry; $KATEX_TARBALL names a copy of KaTeX's instead."""
    version, sha512 = NPM[name]
    short = name.split("/")[-1]
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "annotated-transformer"
    )
    path = Path(
        (name == "katex" and os.environ.get("KATEX_TARBALL")) or cache / f"{short}-{version}.tgz"
    )
    if not path.is_file():
        url = f"https://registry.npmjs.org/{name}/-/{short}-{version}.tgz"
        print(f"      downloading {name} {version} from {url}", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
        path.write_bytes(data)
    data = path.read_bytes()
    if base64.b64encode(hashlib.sha512(data).digest()).decode() != sha512:
        raise SystemExit(
            f"{path}: not {name} {version} (its sha512 differs from npm's); "
            f"delete it to download again"
        )
    return data


def extract(name: str, wanted: dict[str, str], folder: Path) -> None:
    "Write the files `wanted` names (path in the tarball -> name) of npm's `name` into `folder`."
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(npm_tarball(name)), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.name in wanted and member.isfile():  # nothing else in the archive is written
                (folder / wanted[member.name]).write_bytes(tar.extractfile(member).read())


def install_katex(out: Path) -> None:
    "Copy KaTeX's script, auto-render, stylesheet, woff2 fonts and license into out/katex/."
    wanted = re.compile(
        r"package/(?:dist/(katex\.min\.js|katex\.min\.css|contrib/auto-render\.min\.js|fonts/[\w-]+\.woff2)|(LICENSE))$"
    )
    with tarfile.open(fileobj=io.BytesIO(npm_tarball("katex")), mode="r:gz") as tar:
        for member in tar.getmembers():
            match = wanted.match(member.name)
            if (
                match and member.isfile()
            ):  # named files only: nothing else in the archive is written
                target = out / "katex" / (match.group(1) or match.group(2))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())


# --- the notebook, prepared for reading -----------------------------------------------------

DIRECTIVE = re.compile(
    r"^\s*#\|.*(?:\n|$)", re.MULTILINE
)  # an nbdev directive line, e.g. `#| export`


def only_imports(source: str) -> bool:
    "Whether a code cell does nothing but import (a `try` or an `if` around imports counts)."
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and _imports(body)


def _imports(nodes: list[ast.stmt]) -> bool:
    "Whether these statements import and do nothing else."

    def one(node: ast.stmt) -> bool:
        if isinstance(node, ast.Try):
            return _imports(node.body) and all(_imports(h.body) for h in node.handlers)
        if isinstance(node, ast.If):
            return _imports(node.body) and _imports(node.orelse)
        return isinstance(node, (ast.Import, ast.ImportFrom))

    return all(one(node) for node in nodes)


REFERENCES = "25_references.html"  # the references page the citations link to
# The paper's "[5, 2, 35]", not a Markdown link
CITATION = re.compile(r"\[(\d+(?:,\s*\d+)*)\](?!\()")


def link_citations(markdown: str) -> str:
    "The paper's numeric citations as links to the references page: [5, 2] -> [[5](...), [2](...)]."

    def links(match: re.Match) -> str:
        numbers = [n.strip() for n in match.group(1).split(",")]
        return "[" + ", ".join(f'<a href="{REFERENCES}#ref-{n}">{n}</a>' for n in numbers) + "]"

    return CITATION.sub(links, markdown)


def summary_paragraph(markdown: str) -> str:
    """A chapter's first cell with its summary (nbdev's `> ` lines under the title) as a lead
    paragraph, right under the title and above the introduction: in the book a quote block is the
    paper's words, and the summary is ours."""
    lines = markdown.splitlines()
    quoted = [line[1:].strip() for line in lines if line.startswith(">")]
    if not quoted:
        return markdown
    rest = [line for line in lines if not line.startswith(">")]
    title = [line for line in rest[:1] if line.startswith("# ")]  # the lead comes right under it
    summary = html.escape(" ".join(quoted), quote=False)
    summary = re.sub(r"`([^`]+)`", r"<code>\1</code>", summary)
    intro = "\n".join(rest[len(title) :]).strip()
    return "\n\n".join([*title, f'<p class="book-summary">{summary}</p>', intro]).rstrip() + "\n"


def prepare(nb: nbformat.NotebookNode) -> None:
    """Drop the `#| hide` cells and every directive line, as nbdev's docs do; show only the output
    of `#| echo: false` cells; give a cell's images the alt text of its `#| fig-alt:`; fold the
    import cells (and a `#| code-fold: true` cell, under its `#| code-summary`) and label the
    exported ones with their module (in cell.metadata.book, which the template reads)."""
    module = next(
        (
            m.group(1)
            for cell in nb.cells
            if (m := re.search(r"^#\|\s*default_exp\s+(\S+)", cell.source, re.M))
        ),
        None,
    )
    kept = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cell.source = link_citations(summary_paragraph(cell.source) if i == 0 else cell.source)
        if re.search(r"^#\|\s*hide\b", cell.source, re.M):  # wherever among the directives
            continue
        exported = (
            cell.cell_type == "code"
            and re.search(r"^#\|\s*exports?\b", cell.source, re.M) is not None
        )
        if re.search(r"^#\|\s*echo:\s*false\b", cell.source, re.M):  # the output alone
            cell.metadata["transient"] = {"remove_source": True}
        if alt := re.search(r"^#\|\s*fig-alt:\s*(.+)$", cell.source, re.M):  # Quarto's too
            for output in cell.get("outputs", []):
                if "image/png" in output.get("data", {}):
                    output.setdefault("metadata", {})["alt"] = alt.group(1).strip()
        summary = re.search(r"^#\|\s*code-summary:\s*(.+)$", cell.source, re.M)
        folded = re.search(r"^#\|\s*code-fold:\s*true\b", cell.source, re.M) is not None
        cell.source = DIRECTIVE.sub("", cell.source).strip("\n")
        if cell.cell_type == "code" and folded:  # Quarto's directives: folded under a summary
            cell.metadata["book"] = {"imports": summary.group(1).strip() if summary else "Code"}
        elif cell.cell_type == "code" and only_imports(cell.source):
            where = f" of annotated_transformer/{module}.py" if exported and module else ""
            cell.metadata["book"] = {"imports": f"Imports{where}"}
        elif exported and module:
            cell.metadata["book"] = {"module": f"annotated_transformer/{module}.py"}
        if cell.source or cell.get("outputs"):  # a cell that held only `#| default_exp` goes
            kept.append(cell)
    nb.cells = kept


# --- navigation -----------------------------------------------------------------------------

HEADING = re.compile(r'<h([2-4]) id="([^"]+)"[^>]*>(.*?)</h\1>', re.DOTALL)


def headings(body: str) -> list[tuple[int, str, str]]:
    "The page's section headings, (level, id, text), in order."
    found = []
    for level, anchor, inner in HEADING.findall(body):
        text = html.unescape(re.sub(r"<[^>]+>", "", inner)).replace("¶", "").strip()
        found.append((int(level), anchor, text))
    return found


def toc(sections: list[tuple[int, str, str]]) -> str:
    "Nested lists of links to the sections, by heading level."
    out, depth = [], 1
    for level, anchor, text in sections:
        level = level - 1  # h2 is the first level
        while depth < level:
            out.append("<ul>")
            depth += 1
        while depth > level:
            out.append("</ul>")
            depth -= 1
        out.append(f'<li><a href="#{html.escape(anchor)}">{html.escape(text)}</a></li>')
    out.extend("</ul>" for _ in range(depth - 1))
    return '<ul class="book-toc">' + "".join(out) + "</ul>"


# the sidebar's part headings, before the first chapter of each part (by its number)
PARTS = {"01": "Part I · the paper annotated", "09": "Part II · the engine and beyond the paper"}


def sidebar(
    pages: list[tuple[str, str]], current: int, sections: list[tuple[int, str, str]]
) -> str:
    "Every chapter, the current one opened to its sections."
    items = []
    for i, (href, name) in enumerate(pages):
        if part := PARTS.get(href[:2]):  # the first chapter of a part
            items.append(f'<li class="book-part">{part}</li>')
        label = f'<a href="{href}">{html.escape(name)}</a>'
        items.append(
            f'<li class="book-current">{label}{toc(sections)}</li>'
            if i == current
            else f"<li>{label}</li>"
        )
    return (
        '<aside class="book-sidebar"><div class="book-title">'
        '<a href="index.html">annotated-transformer</a></div>'
        f'<nav aria-label="chapters"><ol class="book-chapters">{"".join(items)}</ol></nav></aside>'
    )


def pager(pages: list[tuple[str, str]], current: int) -> str:
    "Previous and next chapter, with their titles."
    links = []
    if current > 0:
        href, name = pages[current - 1]
        links.append(
            f'<a class="book-prev" rel="prev" href="{href}">'
            f"<small>&larr; previous</small>{html.escape(name)}</a>"
        )
    if current + 1 < len(pages):
        href, name = pages[current + 1]
        links.append(
            f'<a class="book-next" rel="next" href="{href}">'
            f"<small>next &rarr;</small>{html.escape(name)}</a>"
        )
    return f'<nav class="book-pager" aria-label="previous and next">{"".join(links)}</nav>'


def header(pages: list[tuple[str, str]], current: int, nb_path: Path) -> str:
    "The line above the page: previous, next, and the notebook in Colab."
    prev_link = (
        f'<a rel="prev" href="{pages[current - 1][0]}">&larr; previous</a>' if current > 0 else ""
    )
    next_link = (
        f'<a rel="next" href="{pages[current + 1][0]}">next &rarr;</a>'
        if current + 1 < len(pages)
        else ""
    )
    badge = (
        f'<a class="book-colab" href="{colab_url(nb_path)}">'
        '<img src="colab-badge.svg" alt="Open in Colab"></a>'
    )
    spacer = '<span class="book-spacer"></span>'
    return f'<header class="book-header">{prev_link}{next_link}{spacer}{badge}</header>'


def page(body: str, pages: list[tuple[str, str]], current: int, nb_path: Path) -> str:
    "Fill the template's slots and point links at pages and local files."
    body = re.sub(r'href="([^":]+)\.ipynb', r'href="\1.html', body)  # chapter links point at pages
    body = body.replace(COLAB_BADGE, "colab-badge.svg")
    body = body.replace("<!--book:sidebar-->", sidebar(pages, current, headings(body)), 1)
    body = body.replace("<!--book:header-->", header(pages, current, nb_path), 1)
    return body.replace("<!--book:footer-->", pager(pages, current), 1)


def install_assets(out: Path) -> None:
    "The stylesheet, script, badge, KaTeX and the book's figures (nbs/images) beside the pages."
    for name in ("book.css", "book.js", "colab-badge.svg"):
        shutil.copyfile(BOOK / name, out / name)
    shutil.copytree(NBS / "images", out / "images", dirs_exist_ok=True)
    install_katex(out)


def execute(nb_path: Path, timeout: int) -> nbformat.NotebookNode:
    "Run the notebook in its own folder and return it with fresh outputs."
    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(nb_path.parent)}},
        # the kernel's own log, errors only: ipykernel warns at every start that its local TCP
        # ports are not encrypted, which no reader of the log can act on
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    client.execute()
    return nb


# --- timing -----------------------------------------------------------------------------------

CELL_BUDGET = 120  # seconds: the most a notebook cell should take on the 2-core CPU CI runs on


def cell_seconds(cell: nbformat.NotebookNode) -> float | None:
    "A code cell's wall time, from the timestamps nbclient records in its metadata; None if unrun."
    stamps = cell.metadata.get("execution", {})
    start, end = stamps.get("iopub.status.busy"), stamps.get("shell.execute_reply")
    if not (start and end):
        return None
    started, ended = (datetime.datetime.fromisoformat(t) for t in (start, end))
    return (ended - started).total_seconds()


def timings(nb: nbformat.NotebookNode, name: str) -> list[tuple[float, str, str, str]]:
    "(seconds, notebook, cell id, first line) for each code cell of an executed notebook."
    rows = []
    for cell in nb.cells:
        seconds = cell_seconds(cell) if cell.cell_type == "code" else None
        if seconds is not None:
            code = DIRECTIVE.sub("", cell.source).strip()  # e.g. not "#| slow"
            first = code.splitlines()[0] if code else ""
            rows.append((seconds, name, cell.get("id", ""), first[:60]))
    return rows


def write_timings(path: Path, rows: list[tuple[float, str, str, str]]) -> None:
    "The cells' times, slowest first, as a tab-separated table with a header."
    lines = ["seconds\tnotebook\tcell\tfirst line"]
    lines += [f"{s:.1f}\t{nb}\t{cell}\t{first}" for s, nb, cell, first in sorted(rows)[::-1]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def over_budget(rows: list[tuple[float, str, str, str]], budget: float = CELL_BUDGET) -> list[str]:
    "One line per cell slower than the budget."
    return [f"{nb} cell {cell}: {s:.0f} s ({first})" for s, nb, cell, first in rows if s > budget]


def prepare_run() -> None:
    """Train the chapters' CPU runs if they are unfinished ($MULTI30K_RUN and $MULTI30K_SUBWORD_RUN
    name full runs instead), here rather than inside a cell: a cell or nbdev-test then only reads
    them. The word-level run is the one chapters 07 and 08 decode; the subword run, the model of
    the "Try it" panel (chapters 08 and 22)."""
    from annotated_transformer._chapters import chapter_run, subword_run  # imports torch

    for what, prepared in (("the chapters' run", chapter_run), ("the subword run", subword_run)):
        t0 = time.time()
        print(f"      {what}: trained if unfinished ...", flush=True)
        run_dir, _ = prepared()
        print(f"      {what}: {run_dir} ready in {time.time() - t0:.0f} s", flush=True)


def decodes_chapter_run(nb: nbformat.NotebookNode) -> bool:
    "Whether a notebook decodes the chapters' runs (calls `chapter_run()` or `subword_run()`)."
    code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return any("chapter_run(" in source or "subword_run(" in source for source in code)


# --- the "Try it" panel's folder ------------------------------------------------------------------

LIVE = "live"  # beside the pages: what the panel's script asks for (figures.TryIt's `base`)
RUNTIME_FILES = {  # npm package -> {its file: the name in live/}
    "onnxruntime-web": {  # WebAssembly only, the loader built in: two files
        "package/dist/ort.wasm.bundle.min.mjs": "ort.wasm.bundle.min.mjs",
        "package/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    },
    "@huggingface/tokenizers": {
        "package/dist/tokenizers.min.mjs": "tokenizers.min.mjs",
        "package/LICENSE": "LICENSE-huggingface-tokenizers.txt",
    },
}


def install_live(out: Path) -> None:
    """live/: onnxruntime-web and the tokenizer with their licences, the panel's worker, and the
    subword run exported to ONNX (int8) into live/model/ if the run is finished."""
    import onnxruntime  # the dev extra's: its licence files are onnxruntime-web's too

    from annotated_transformer._chapters import subword_run
    from annotated_transformer.engines import Export, export_checkpoint

    folder = out / LIVE
    for name, wanted in RUNTIME_FILES.items():
        extract(name, wanted, folder)
    # onnxruntime-web's tarball carries no licence file; the project's Python package has its MIT
    # licence and the notices of the code compiled into the WebAssembly
    ort = Path(onnxruntime.__file__).parent
    for name in ("LICENSE", "ThirdPartyNotices.txt"):
        shutil.copyfile(ort / name, folder / f"{Path(name).stem}-onnxruntime-web.txt")
    shutil.copyfile(
        ROOT / "annotated_transformer" / "assets" / "try_it_worker.mjs", folder / "worker.mjs"
    )
    last = subword_run(prepare=False)[0] / "last.pt"
    if not last.is_file():
        print(f"      no {last}: the panel will say that its model did not load", flush=True)
        return
    how = Export(format="onnx", quantization="int8", overwrite=True)
    export_checkpoint(last, folder / "model", how)
    print(f"      the panel's model: {last} exported to {folder / 'model'}", flush=True)


def book_exporter() -> HTMLExporter:
    "nbconvert's HTML exporter with the book's template, prompts hidden."
    return HTMLExporter(
        template_name="book",
        extra_template_basedirs=[str(BOOK / "templates")],
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


def arguments() -> argparse.Namespace:
    "The command line's options."
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "_docs", help="output folder (default: _docs)"
    )
    parser.add_argument(
        "--timeout", type=int, default=3600, help="seconds allowed per cell (default: 3600)"
    )
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="render only these notebooks (file names), still linking all",
    )
    parser.add_argument(
        "--no-execute",
        action="store_true",
        help="render the committed outputs instead of running the notebooks",
    )
    parser.add_argument(
        "--save-outputs",
        action="store_true",
        help="also write each executed notebook back to nbs/ (then run nbdev-clean): the outputs "
        "committed are those of this run",
    )
    parser.add_argument(
        "--timings",
        type=Path,
        default=None,
        help="write each executed cell's seconds to this file (tab-separated, slowest first)",
    )
    parser.add_argument(
        "--prepare-run",
        action="store_true",
        help="only train the chapters' CPU runs if unfinished (what tools/test.sh runs before "
        "nbdev-test), then stop",
    )
    args = parser.parse_args()
    if args.save_outputs and args.no_execute:
        parser.error("--save-outputs keeps the outputs of a run: leave out --no-execute")
    return args


def main() -> int:
    args = arguments()
    if args.prepare_run:
        prepare_run()
        return 0

    paths = chapters(NBS)
    notebooks = {p: nbformat.read(p, as_version=4) for p in paths}
    pages = [(page_name(p), title(notebooks[p], p.stem)) for p in paths]
    args.out.mkdir(parents=True, exist_ok=True)
    install_assets(args.out)
    exporter = book_exporter()
    start, cells = time.time(), []
    chosen = [p for p in paths if args.only is None or p.name in args.only]
    if not args.no_execute and any(decodes_chapter_run(notebooks[p]) for p in chosen):
        prepare_run()
    install_live(args.out)
    for i, path in enumerate(paths):
        if path not in chosen:
            continue
        t0 = time.time()
        print(
            f"[{i + 1}/{len(paths)}] {'rendering' if args.no_execute else 'executing'} "
            f"{path.name} ...",
            flush=True,
        )
        try:
            nb = notebooks[path] if args.no_execute else execute(path, args.timeout)
            if args.save_outputs:
                nbformat.write(nb, path)
        except CellExecutionError as error:
            print(
                f"FAILED: {path.name} raised an error; no page written for it.\n{error}",
                file=sys.stderr,
            )
            return 1
        cells += [] if args.no_execute else timings(nb, path.name)
        if args.timings:
            write_timings(args.timings, cells)  # after each notebook: kept if a later one fails
        prepare(nb)
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": pages[i][1]}})
        (args.out / pages[i][0]).write_text(page(body, pages, i, path), encoding="utf-8")
        print(f"      wrote {args.out / pages[i][0]} in {time.time() - t0:.0f} s", flush=True)
    for line in over_budget(cells):
        print(f"      over {CELL_BUDGET} s: {line}", flush=True)
    print(f"Done in {time.time() - start:.0f} s. Open {args.out / 'index.html'} in a browser.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
