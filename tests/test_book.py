"""The book's plumbing, without a browser: tools/render.py's helpers, the bundled KaTeX, and the
Colab route.

What is checked (tests/test_browser.py checks the rendered pages themselves):
1. Every notebook's first code cell is the same hidden Colab install cell; run here it does nothing,
   run with `google.colab` imported it pip-installs this repository (the one nbs/nbdev.yml names)
   with the `notebooks` extra, which exists and lists what the notebooks import beyond the library.
2. The chapter table (in the command-line chapter) names every chapter by its title, with an
   "Open in Colab" badge that opens its own notebook; the landing page (hence README.md) names
   every chapter by its title too, and its Python example runs.
3. The renderer: import-only cells are recognized, directives and `#| hide` cells go, exported cells
   are labelled with their module, the table of contents nests by heading level, KaTeX is
   checked against its pinned hash and unpacked file by file (a tampered download is refused), and
   each executed cell's seconds are recorded, slowest first (tools/test.sh prints the ten slowest).
4. nbs/_quarto.yml and its sidebar stay valid for Quarto users, listing every notebook in reading
   order.
5. The page tells the truth (tools/prose.py): every figure our prose cites is shown on its page (a
   quote, the code or an output), the attention chapter names only heads and layers its model has,
   Part I keeps to its budgets (words, code lines, no engine terms on its path: tools/prose.py
   --budgets), quoted outputs and minutes are on their page, floats are rounded, nothing tells how
   the book was made, no code line is wider than 100 columns, and README.md is the landing page,
   short.
"""

from __future__ import annotations

import ast
import gzip
import io
import re
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import nbformat
import pytest
import tomllib
import yaml
from synthetic import tool

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = [ROOT / "nbs" / "index.ipynb", *sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))]


@pytest.fixture(scope="module")
def render():
    "tools/render.py as a module."
    return tool("render")


def first_code_cell(nb_path: Path) -> str:
    return next(
        c.source for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code"
    )


def run_install_cell(source: str, monkeypatch: pytest.MonkeyPatch, on_colab: bool) -> list:
    "Execute the cell with subprocess.run recorded instead of run; return the calls."
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append((args, kwargs)))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(source, "install cell", "exec"), {})
    return calls


def test_every_notebook_starts_with_the_same_hidden_colab_install_cell() -> None:
    cells = {nb.name: first_code_cell(nb) for nb in NOTEBOOKS}
    assert len(set(cells.values())) == 1, "the install cells differ"
    assert next(iter(cells.values())).startswith("#| hide\n")


def test_the_install_cell_does_nothing_here_and_installs_the_repository_on_colab(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = first_code_cell(NOTEBOOKS[1])
    assert run_install_cell(source, monkeypatch, on_colab=False) == []
    [(args, kwargs)] = run_install_cell(source, monkeypatch, on_colab=True)
    command = args[0]
    assert command[:4] == [sys.executable, "-m", "pip", "install"] and kwargs == {"check": True}
    repo = yaml.safe_load((ROOT / "nbs" / "nbdev.yml").read_text())["website"]["repo-url"]
    assert command[-1] == f"annotated-transformer[notebooks] @ git+{repo}"


def test_the_notebooks_extra_has_what_the_notebooks_import_beyond_the_library() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = {
        req.split(">")[0].split("=")[0].split(";")[0].strip().replace("-", "_")
        for req in project["dependencies"] + project["optional-dependencies"]["notebooks"]
    }
    provides = {
        "sentencepiece": "sentencepiece",
        "nbdev": "nbdev",
        "fastcore": "nbdev",
        "IPython": "ipython",
        "tokenizers": "transformers",
        "huggingface_hub": "transformers",
        "safetensors": "transformers",  # a dependency of transformers
    }  # import name -> distribution
    imported = set()
    for nb in NOTEBOOKS:
        for cell in nbformat.read(nb, as_version=4).cells:
            if cell.cell_type == "code":
                tree = ast.parse(
                    "\n".join(
                        line for line in cell.source.splitlines() if not line.startswith("#|")
                    )
                )
                imported |= {
                    alias.name.split(".")[0]
                    for node in ast.walk(tree)
                    if isinstance(node, ast.Import)
                    for alias in node.names
                }
                imported |= {
                    node.module.split(".")[0]
                    for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level
                }
    third_party = imported - set(sys.stdlib_module_names) - {"annotated_transformer", "google"}
    missing = {name for name in third_party if provides.get(name, name) not in installed}
    assert not missing, (
        f"the notebooks import {missing}, which `pip install .[notebooks]` does not install"
    )


def test_the_chapter_table_has_a_colab_badge_for_every_chapter(render) -> None:
    table = next(
        c.source
        for nb in NOTEBOOKS
        for c in nbformat.read(nb, as_version=4).cells
        if "| notebook | module |" in c.source
    )
    for nb in NOTEBOOKS[1:]:
        [row] = [
            line
            for line in table.splitlines()
            if line.startswith("| [") and f"]({nb.name})" in line
        ]
        badge = f"[![Open in Colab]({render.COLAB_BADGE})]({render.colab_url(nb)})"
        assert badge in row, f"{nb.name}: no Colab badge in its row of the chapter table"
        name = render.title(nbformat.read(nb, as_version=4), nb.stem)
        assert row.startswith(f"| [{name}]({nb.name})"), f"{nb.name}: the table names it otherwise"
    assert render.colab_url(NOTEBOOKS[1]) == (
        "https://colab.research.google.com/github/annotated-transformer/annotated-transformer/blob/main/nbs/01_model.ipynb"
    )


@pytest.mark.parametrize(
    "source, imports",
    [
        (
            "from __future__ import annotations\n\nimport torch\n"
            "from torch import (\n    nn,\n    Tensor,\n)",
            True,
        ),
        ("try:\n    import tomllib\nexcept ImportError:\n    import tomli as tomllib", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ctranslate2", True),
        ("try:\n    import tomllib\nexcept ImportError:\n    tomllib = None", False),
        ("import torch\ntorch.manual_seed(0)", False),
        ("# only a comment", False),
        ("def f(:", False),
    ],
)
def test_import_cells_are_recognized(render, source: str, imports: bool) -> None:
    assert render.only_imports(source) is imports


def test_prepare_drops_hidden_cells_and_directives_and_labels_exported_ones(render) -> None:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Title"),
            nbformat.v4.new_code_cell("#| default_exp model"),
            nbformat.v4.new_code_cell("#| hide\nimport secret"),
            nbformat.v4.new_markdown_cell("#| export\n#| hide\nThe package map, hidden."),
            nbformat.v4.new_code_cell("#| export\nimport torch"),
            nbformat.v4.new_code_cell("#| export\ndef f():\n    return 1"),
            nbformat.v4.new_code_cell("f()"),
        ]
    )
    render.prepare(nb)
    assert [c.source for c in nb.cells] == [
        "# Title",
        "import torch",
        "def f():\n    return 1",
        "f()",
    ]
    assert nb.cells[1].metadata["book"] == {"imports": "Imports of annotated_transformer/model.py"}
    assert nb.cells[2].metadata["book"] == {"module": "annotated_transformer/model.py"}
    assert "book" not in nb.cells[3].metadata


def test_the_table_of_contents_nests_by_heading_level(render) -> None:
    body = (
        '<h1 id="t">Title</h1><h2 id="a">A<a class="anchor-link" href="#a">¶</a></h2>'
        '<h3 id="a.1">A &amp; 1</h3>'
        '<h4 id="x">x</h4><h2 id="b">B</h2>'
    )
    sections = render.headings(body)
    assert sections == [(2, "a", "A"), (3, "a.1", "A & 1"), (4, "x", "x"), (2, "b", "B")]
    assert render.toc(sections) == (
        '<ul class="book-toc"><li><a href="#a">A</a></li><ul><li><a href="#a.1">A &amp; 1</a></li>'
        '<ul><li><a href="#x">x</a></li></ul></ul><li><a href="#b">B</a></li></ul>'
    )


def test_cell_timings_come_from_a_real_execution_slowest_first_and_name_the_slow_cells(
    render, tmp_path: Path
) -> None:
    "tools/test.sh prints the head of this table: the ten slowest cells of the main job."
    cells = ["#| slow\nimport time\ntime.sleep(1.0)", "x = 1", "#| hide\ntime.sleep(0.5)"]
    nb_path = tmp_path / "01_t.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), nb_path
    )
    rows = render.timings(render.execute(nb_path, timeout=60), nb_path.name)
    assert [first for _, _, _, first in rows] == ["import time", "x = 1", "time.sleep(0.5)"]
    assert rows[0][0] >= 1.0 and rows[2][0] >= 0.5
    render.write_timings(tmp_path / "t.tsv", rows)
    table = [line.split("\t") for line in (tmp_path / "t.tsv").read_text().splitlines()]
    assert table[0] == ["seconds", "notebook", "cell", "first line"]
    assert [row[3] for row in table[1:]] == ["import time", "time.sleep(0.5)", "x = 1"]
    slow = render.over_budget(rows, budget=0.9)  # one line per cell over the budget
    assert len(slow) == 1 and slow[0].startswith(f"01_t.ipynb cell {rows[0][2]}: ")
    assert slow[0].endswith(" s (import time)")
    assert render.cell_seconds(nbformat.v4.new_code_cell("never run")) is None


def test_the_test_command_trains_the_chapters_run_first_and_prints_the_slowest() -> None:
    "nbdev-test only reads the chapters' run (issue 36); the slowest cells and tests are shown."
    script = (ROOT / "tools" / "test.sh").read_text()
    assert script.index("render.py --prepare-run") < script.index("nbdev-test --n-workers")
    assert "--timings" in script and "--durations=10" in script


def fake_katex(extra: dict[str, bytes]) -> bytes:
    "A gzipped tarball laid out like npm's katex package."
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {
            "package/dist/katex.min.js": b"js",
            "package/dist/fonts/KaTeX_Main-Regular.woff2": b"font",
            "package/dist/fonts/KaTeX_Main-Regular.ttf": b"ttf",
            "package/LICENSE": b"MIT",
            **extra,
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue())


def test_katex_is_unpacked_file_by_file_and_a_tampered_download_is_refused(
    render, tmp_path: Path, monkeypatch
) -> None:
    tarball = tmp_path / "katex.tgz"
    tarball.write_bytes(
        fake_katex({"package/../../escape.js": b"x", "package/dist/README.md": b"readme"})
    )
    monkeypatch.setenv("KATEX_TARBALL", str(tarball))
    with pytest.raises(SystemExit, match="not katex 0.19.1 .its sha512 differs from npm's"):
        render.npm_tarball("katex")
    monkeypatch.setattr(render, "npm_tarball", lambda name: tarball.read_bytes())
    render.install_katex(tmp_path / "site")
    files = sorted(
        p.relative_to(tmp_path / "site").as_posix()
        for p in (tmp_path / "site").rglob("*")
        if p.is_file()
    )
    assert files == ["katex/LICENSE", "katex/fonts/KaTeX_Main-Regular.woff2", "katex/katex.min.js"]
    assert not (tmp_path.parent / "escape.js").exists()


def test_the_quarto_configuration_lists_every_chapter() -> None:
    """For readers who render with Quarto (nbdev-preview, nbdev-docs): the files parse and the
    sidebar has every notebook, in order."""
    quarto = yaml.safe_load((ROOT / "nbs" / "_quarto.yml").read_text())
    assert quarto["project"]["type"] == "website" and set(quarto["metadata-files"]) == {
        "nbdev.yml",
        "sidebar.yml",
    }
    sidebar = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"][
        "contents"
    ]
    assert sidebar == [nb.name for nb in NOTEBOOKS]


@pytest.fixture(scope="module")
def prose():
    "tools/prose.py as a module."
    return tool("prose")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_page_shows_what_its_prose_cites(prose, nb_path: Path) -> None:
    "Figures, quoted outputs and minutes on the page; floats rounded; nothing about its making."
    assert prose.problems(nb_path) == [], f"{nb_path.name}: tools/prose.py --check {nb_path}"


def page_of(tmp_path: Path, markdown: str, output: str, name: str = "05_page.ipynb") -> Path:
    "A one-chapter notebook: a Markdown cell, then a code cell that printed `output`."
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(markdown), nbformat.v4.new_code_cell("print(x)")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_the_check_finds_quotes_minutes_floats_and_notes_on_the_making(
    prose, tmp_path: Path
) -> None:
    prose_text = (
        'It translates "A man rides a bike." well, and "A woman carrying a bag" badly, '
        "in about 5 minutes. The issue that asked for this chapter was filed in commit 6c19bc3."
    )
    printed = "A man rides a bike.\nA woman wearing a bag\ntook 18.2 min; loss 2.747514843940735\n"
    page = page_of(tmp_path, prose_text, printed)
    assert prose.missing_quotes(page) == ["A woman carrying a bag"]
    assert prose.missing_minutes(page) == ["5 minutes"]
    assert prose.long_floats(page) == ["2.747514843940735"]
    assert prose.making_of(page) == ["The issue that", "commit 6c19bc3"]
    fixed = "It translates *A woman wearing a bag*, in about 18 minutes; loss 2.75."
    assert (
        prose.problems(page_of(tmp_path, fixed, "A woman wearing a bag\n18.2 min\nloss 2.75\n"))
        == []
    )


def test_the_check_finds_tokens_gains_in_words_and_a_promise_of_both(prose, tmp_path: Path) -> None:
    "The three ways a page contradicted itself: a quoted token, a gain in words, one of two."
    text = (
        'The row of "woman" looks at "trägt". Beam search adds half a point over greedy. '
        "The loss with and without smoothing:"
    )
    page = page_of(tmp_path, text, "A woman walking down a street .\neps=0.1: 601.7\n")
    assert prose.missing_tokens(page) == ["trägt"]
    assert prose.worded_gains(page) == ["adds half a point"]
    assert prose.one_sided(page) == []  # two lines printed below the promise
    single = page_of(tmp_path, "The loss with and without smoothing:", "eps=0.1: 601.7\n")
    assert prose.one_sided(single) == ["'with and without', above 1 printed line(s)"]
    both = page_of(tmp_path, "The loss with and without smoothing:", "eps=0.0: 661\neps=0.1: 601\n")
    assert prose.one_sided(both) == []
    fixed = 'The row of "woman" looks at "street"; beam search adds 0.21 over greedy.'
    assert prose.problems(page_of(tmp_path, fixed, "woman street 0.21\n")) == []


def test_the_figure_check_finds_a_figure_the_page_does_not_show(prose, tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("The model scores 36.41, ahead of 29.7 (§3.2.1).\n> 1.5"),
        nbformat.v4.new_code_cell("print(score)", outputs=[]),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="36.41\n")]
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    assert prose.missing_figures(path) == ["29.7"]


def test_the_attention_chapter_names_only_heads_and_layers_its_model_has(prose) -> None:
    from annotated_transformer._chapters import CPU_CONFIG

    chapter = ROOT / "nbs" / "08_attention.ipynb"
    model = CPU_CONFIG.model
    assert all(head < model.h for head in prose.named(chapter, prose.HEADS))
    assert all(layer < model.N for layer in prose.named(chapter, prose.LAYERS))


def test_part_one_and_the_landing_page_keep_to_their_budgets(prose) -> None:
    """Part I: 6,000 words of ours, 1,600 code lines shown, no engine term outside a folded note
    of at most 120 words; the landing page: 600 words (python tools/prose.py --budgets)."""
    assert len(prose.part_one(ROOT / "nbs")) == 8
    assert prose.over_budget(ROOT / "nbs") == []


def test_the_budgets_count_what_a_reader_reads(prose, tmp_path: Path) -> None:
    note = "<details><summary>Why</summary>" + "word " * 130 + "torch.compile</details>"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "# Title\n\nSix words of ours, then rank.\n> The paper's words are not ours.\n" + note
        ),
        nbformat.v4.new_markdown_cell("#| hide\nHidden words are nobody's reading."),
        nbformat.v4.new_code_cell("#| hide\nimport os\nimport sys"),
        nbformat.v4.new_code_cell("#| echo: false\nfigure()"),
        nbformat.v4.new_code_cell("#| export\nimport torch\n\n\ndef f():\n    return 1"),
    ]
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    nbformat.write(nb, nbs / "03_chapter.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), nbs / "index.ipynb")
    chapter = nbs / "03_chapter.ipynb"
    assert prose.chapter_words(chapter) == (
        8,
        132,
    )  # the heading and the sentence; the note: 1 + 130 + 1
    assert prose.code_lines(chapter) == 3  # the exported cell's three non-blank lines
    assert prose.folded_notes(chapter) == [132]
    assert prose.engine_terms(chapter) == ["rank"]  # the note's torch.compile is allowed
    assert prose.over_budget(nbs) == [
        "03_chapter: 'rank' x1 outside a folded note",
        "03_chapter: a folded note of 132 words",
    ]


def test_the_landing_page_names_every_chapter_by_its_title(render) -> None:
    "The reading path's link texts are the chapters' titles, as the sidebar shows them."
    index = nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4)
    markdown = "\n".join(c.source for c in index.cells if c.cell_type == "markdown")
    links = dict(
        (target, text)
        for text, target in re.findall(r"\[([^\]]+)\]\((\d\d_\w+\.ipynb)\)", markdown)
    )
    numbered = [nb for nb in NOTEBOOKS if nb.name != "index.ipynb"]
    titles = {nb.name: render.title(nbformat.read(nb, as_version=4), nb.stem) for nb in numbered}
    assert set(links) == set(titles), "the landing page links every chapter"
    assert {name: links[name] for name in titles} == titles


def test_the_landing_page_python_example_runs(tiny_checkpoint: Path, capsys) -> None:
    "The five lines of its third door, on a checkpoint trained here."
    index = nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4)
    markdown = "\n".join(c.source for c in index.cells if c.cell_type == "markdown")
    [example] = re.findall(r"```python\n(.*?)```", markdown, flags=re.S)
    assert len(example.strip().splitlines()) <= 5
    assert "runs/quick/last.pt" in example  # the file the commands above it write
    exec(example.replace("runs/quick/last.pt", str(tiny_checkpoint)), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].strip()


def test_the_readme_is_short_and_says_each_thing_once() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    headings = [line for line in lines if line.startswith("#")]
    assert len(lines) <= 200
    assert len(headings) == len(set(headings))
    assert "bash tools/test.sh" in "\n".join(lines)  # the test command CI runs


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_code_line_is_wider_than_100_columns(nb_path: Path) -> None:
    wide = [
        line
        for cell in nbformat.read(nb_path, as_version=4).cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if len(line) > 100
    ]
    assert wide == [], f"{nb_path.name}: {len(wide)} code lines over 100 columns"


def test_the_readme_is_the_landing_page() -> None:
    readme = tool("readme")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text == readme.readme_text(), "README.md is stale: run python tools/readme.py"
    assert text.index("# annotated-transformer") < text.index("## The reading path")


def fake_package(files: dict[str, bytes]) -> bytes:
    "A gzipped tarball holding `files`, as npm's registry serves a package."
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue())


def test_the_panel_s_runtime_is_unpacked_file_by_file(render, tmp_path: Path, monkeypatch) -> None:
    "Only the files RUNTIME_FILES names reach live/, under the names it gives them."
    wanted = {name: files for name, files in render.RUNTIME_FILES.items()}
    packages = {
        name: fake_package({**{path: b"x" for path in files}, "package/../../escape.js": b"x"})
        for name, files in wanted.items()
    }
    monkeypatch.setattr(render, "npm_tarball", lambda name: packages[name])
    for name, files in wanted.items():
        render.extract(name, files, tmp_path / "live")
    found = sorted(p.name for p in (tmp_path / "live").iterdir())
    assert found == sorted(n for files in wanted.values() for n in files.values())
    assert "ort-wasm-simd-threaded.wasm" in found and "LICENSE-huggingface-tokenizers.txt" in found
    assert not (tmp_path.parent / "escape.js").exists()


def test_every_figure_says_what_it_shows() -> None:
    "Each cell that draws a figure has a `#| fig-alt:` line, the alt text tools/render.py gives it."
    missing = []
    for nb in NOTEBOOKS:
        for cell in nbformat.read(nb, as_version=4).cells:
            images = any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
            alt = re.search(r"^#\|\s*fig-alt:\s*(\S.{20,})$", cell.source, re.M)
            if cell.cell_type == "code" and images and not alt:
                missing.append(f"{nb.name} cell {cell.get('id')}")
    assert missing == [], f"no `#| fig-alt:` of at least 20 characters: {missing}"


def test_every_chapter_opens_with_its_title_then_its_lead(render) -> None:
    "One layout: the title, the grey lead (nbdev's summary), then the introduction, if any."
    for nb in NOTEBOOKS[1:]:
        first = nbformat.read(nb, as_version=4).cells[0].source
        blocks = [b for b in render.summary_paragraph(first).split("\n\n") if b.strip()]
        assert blocks[0].startswith("# "), nb.name
        assert blocks[1].startswith('<p class="book-summary">'), f"{nb.name}: {blocks[1][:60]}"
