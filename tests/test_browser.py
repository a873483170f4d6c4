"""The rendered book, in a real browser: headless Chromium (Debian's) opens it from local files,
with the network cut.

What is checked, on the rendered pages:
1. Nothing is loaded from the network: every request that is not a local file is recorded and
   refused, and there are none.
2. Every chapter is reachable: the "next" links lead from index.html through every notebook in
   reading order; every page's sidebar links every page, and its table of contents links resolve to
   headings of the page.
3. Math is typeset: no `$...$` is left in the prose of any page, KaTeX reports no error, and Part 1
   shows one typeset formula for each formula in its notebook's Markdown.
4. The page reads as a book: no nbdev directive (`#|`) and no execution counter is visible, each
   chapter's import cells are folded, each chapter links itself in Colab, and the print stylesheet
   drops the navigation.
5. Every image (plots, heatmaps) is present and loaded, with alt text saying what it shows, each
   page has at least the images its committed notebook has, the attention chapter shows its
   heatmaps, and no output cell shows a Python error.
6. The interactive attention view responds: choosing a sentence, kind, layer and head and pointing
   at a token shows weights equal (to the two decimals shown) to the model's own, recomputed here:
   on the rendered attention chapter from the model it was rendered with, and on a view made here
   from a small random model. Screenshots of the index, of Part 1 at "3.2.2 Multi-Head Attention",
   of the heatmaps and of the interactive view go to test-artifacts/.
7. The diagrams are drawn: Part 1 shows Figures 1 and 2, and every page its diagrams, from the
   `#| echo: false` cells that show a committed SVG of nbs/images (drawn by tools/diagrams.py),
   each visible, at the column's width, under its own title, its smallest text at 11.4 px or
   more (12 px drawn), and none of those cells' code.
8. No code cell is wider than its box: at a 1400 px wide window no code or output block of any page
   (folded imports included) scrolls sideways; a failure names the page and the lines too long.
9. The heatmaps' labels are readable: on the attention chapter, every figure of
   annotated_transformer/figures.py (at most COLUMN inches wide at the dpi its PNG records)
   shows its LABEL_POINTS labels at 10 CSS px or more.
10. Citations resolve: every link of every page to the references page (25_references.html#...)
    leads to an element of that page with that id, and Part 1 has such links.
11. The interactive attention view works by keyboard and on a phone: its tokens are reached with Tab
    and the arrow keys, and a focused token shows the weights that pointing at it shows; at 420 px
    neither the view's menus nor its columns overflow the window, nor does the page.
12. Screenshots of every page, whole, at 1400 and 420 px wide go to
    test-artifacts/screenshots/<page>-1400.png and <page>-420.png; no page scrolls sideways at
    either width.
13. The page says what it means: Markdown tables render as tables (no row of raw `|` pipes), no
    `#| hide` cell is shown, and at 420 px every output, equation or table that scrolls sideways
    says so (a label from book.js) while nothing in one is blank (each image has a size); at
    1400 px none needs to.
14. The front door: the landing page's first screen (1400 x 900) shows what this is and its three
    doors, each with its first step: read (a link to the first chapter), run (the commands),
    use (the Python example).

The book comes from tools/render.py (the main job). tools/test.sh renders it into
test-artifacts/tutorial and names the folder in $TUTORIAL_DIR; without it, this module renders the
book itself, which runs every notebook (minutes). Where Chromium or Playwright is missing the tests
are skipped, unless $REQUIRE_BROWSER is set (.ci/run sets it).
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib
import nbformat
import pytest
import torch
from PIL import Image

from annotated_transformer import figures
from annotated_transformer.figures import AttentionMaps, AttentionView, attention_weights
from annotated_transformer.model import ModelConfig

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
WIDE, NARROW = 1400, 420  # window widths: a laptop's, a phone's
REFERENCES = "25_references.html"  # the page the citations link to (tools/render.py's REFERENCES)
# pages with no imports to fold and few sections; the command line's snippets keep their imports
# so that each can be copied whole
NOT_CHAPTERS = ("index.html", "23_command_line.html", REFERENCES)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]  # no sandbox: CI runs as root; no network: the machine has none


def notebooks() -> list[Path]:
    "The chapters in reading order, as tools/render.py orders them."
    return [ROOT / "nbs" / "index.ipynb", *sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))]


def committed_images(nb: Path) -> int:
    "How many images the committed notebook's outputs hold."
    cells = json.loads(nb.read_text())["cells"]
    return sum(
        "image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", [])
    )


def formulas(nb: Path) -> int:
    "How many formulas ($...$ or $$...$$) the notebook's Markdown holds, outside code."
    count = 0
    for cell in nbformat.read(nb, as_version=4).cells:
        if cell.cell_type == "markdown":
            text = re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", cell.source, flags=re.DOTALL))
            count += len(re.findall(r"\$\$.+?\$\$", text, re.DOTALL))
            count += len(
                re.findall(r"\$[^$]+\$", re.sub(r"\$\$.+?\$\$", "", text, flags=re.DOTALL))
            )
    return count


def unavailable(reason: str) -> None:
    if os.environ.get("REQUIRE_BROWSER"):
        pytest.fail(f"{reason} ($REQUIRE_BROWSER is set)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tutorial() -> Path:
    if os.environ.get("TUTORIAL_DIR"):
        return Path(os.environ["TUTORIAL_DIR"]).resolve()
    out = ARTIFACTS / "tutorial"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render.py"), "--out", str(out)], check=True
    )
    return out


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        unavailable("Chromium is not installed (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install playwright)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def remote_requests() -> list[str]:
    return []


@pytest.fixture
def page(browser, remote_requests: list[str]):
    """A page on which every request that is not for a local file is recorded and refused; the test
    fails if there was one."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.route(
        lambda url: not url.startswith(("file:", "data:", "about:")),
        lambda route: (remote_requests.append(route.request.url), route.abort()),
    )
    yield page
    page.close()
    assert remote_requests == [], f"pages asked the network for {remote_requests}"


def open_page(page, tutorial: Path, name: str, anchor: str = "") -> None:
    page.goto((tutorial / name).as_uri() + anchor)
    page.wait_for_load_state("load")
    page.wait_for_function(
        "document.documentElement.dataset.typeset === 'done'"
    )  # book.js has typeset the formulas


def test_every_chapter_is_reachable_and_every_toc_link_resolves(tutorial: Path, page) -> None:
    pages = [nb.with_suffix(".html").name for nb in notebooks()]
    assert len(pages) >= 8  # the index and seven chapters
    open_page(page, tutorial, "index.html")
    visited = [Path(page.url).name]
    while page.locator(".book-pager a.book-next").count():
        page.locator(".book-pager a.book-next").click()
        page.wait_for_load_state("load")
        visited.append(Path(page.url).name)
        assert page.locator("h1").count() >= 1, f"{visited[-1]} has no heading"
    assert visited == pages
    for name in pages:
        open_page(page, tutorial, name)
        chapters = page.eval_on_selector_all(
            ".book-chapters > li > a", "links => links.map(a => a.getAttribute('href'))"
        )
        assert chapters == pages, f"{name}: its sidebar lists {chapters}"
        sections = page.eval_on_selector_all(
            ".book-toc a", "links => links.map(a => a.getAttribute('href'))"
        )
        unresolved = page.evaluate(
            "ids => ids.filter(h => !document.getElementById(decodeURIComponent(h.slice(1))))",
            sections,
        )
        assert unresolved == [], f"{name}: table of contents links without a target: {unresolved}"
        if name not in NOT_CHAPTERS:
            assert len(sections) >= 3, f"{name}: its table of contents lists {sections}"
    open_page(page, tutorial, "01_model.html")
    page.locator(".book-toc a", has_text="3.2.2 Multi-Head Attention").click()
    assert (
        page.evaluate(
            "document.getElementById(decodeURIComponent(location.hash.slice(1))).getBoundingClientRect().top"
        )
        < 50
    )
    page.screenshot(path=ARTIFACTS / "book-multi-head-attention.png")


PROSE_TEXT = """() => {  // the text of the Markdown cells, outside code and typeset math
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  const parts = [];
  while (walker.nextNode()) {
    const parent = walker.currentNode.parentElement;
    if (parent.closest(".jp-MarkdownCell") && !parent.closest("code, pre, .katex"))
      parts.push(walker.currentNode.textContent);
  }
  return parts.join("");
}"""


def test_math_is_typeset_everywhere_and_fully_in_part_1(tutorial: Path, page) -> None:
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        open_page(page, tutorial, name)
        raw = re.findall(r"\$[^$]+\$", page.evaluate(PROSE_TEXT))
        assert raw == [], f"{name}: formulas left as LaTeX: {raw[:3]}"
        assert page.locator(".katex-error").count() == 0, (
            f"{name}: KaTeX could not typeset {page.locator('.katex-error').first.inner_text()}"
        )
    [part1] = [nb for nb in notebooks() if nb.name.startswith("01")]
    open_page(page, tutorial, "01_model.html")
    typeset = page.locator(".jp-MarkdownCell .katex").count()
    assert typeset == formulas(part1) > 40, (typeset, formulas(part1))
    assert page.locator(".katex-display").count() >= 4  # the numbered equations (1) to (4)


def test_pages_read_as_a_book(tutorial: Path, page) -> None:
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        open_page(page, tutorial, name)
        text = page.locator("body").inner_text()
        assert not re.search(r"(?m)^\s*#\|", text), (
            f"{name} shows an nbdev directive"
        )  # prose may name them, mid-line
        assert not re.search(r"\b(In|Out)\s*\[\s*\d*\s*\]:", text), (
            f"{name} shows execution counters"
        )
        colab = page.locator(".book-header a.book-colab")
        assert colab.get_attribute("href").endswith(f"/blob/main/nbs/{nb.name}")
        assert colab.locator("img").evaluate("img => img.complete && img.naturalWidth > 0")
        if name not in NOT_CHAPTERS:
            imports = page.locator("details.book-imports")
            assert imports.count() >= 1 and not imports.first.evaluate("d => d.open"), (
                f"{name}: its imports are not folded"
            )
    page.emulate_media(media="print")
    assert page.locator(".book-sidebar").is_hidden() and page.locator(".book-pager").is_hidden()
    assert page.locator("main").evaluate("m => m.getBoundingClientRect().left") < 50


def test_images_are_loaded_and_no_output_shows_an_error(tutorial: Path, page) -> None:
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        open_page(page, tutorial, name)
        images = page.eval_on_selector_all(
            "main img",
            "imgs => imgs.map(i => "
            "({loaded: i.complete && i.naturalWidth > 0, src: i.src.slice(0, 40), alt: i.alt}))",
        )
        assert all(image["loaded"] for image in images), f"{name}: an image did not load: {images}"
        plots = [i for i in images if i["src"].startswith("data:image/png")]  # a cell's figures
        unsaid = [i["src"] for i in plots if len(i["alt"]) < 20 or "No description" in i["alt"]]
        assert unsaid == [], f"{name}: figures without alt text saying what they show"
        assert len(images) >= committed_images(nb), (
            f"{name}: {len(images)} images, the notebook has {committed_images(nb)}"
        )
        errors = page.eval_on_selector_all(
            ".jp-OutputArea-output",
            "outs => outs.filter(o => "
            "o.innerText.includes('Traceback (most recent call last)')).length",
        )
        assert errors == 0, f"{name}: {errors} output cells show a Python error"
    ARTIFACTS.mkdir(exist_ok=True)
    open_page(page, tutorial, "index.html")
    page.screenshot(path=ARTIFACTS / "book-index.png")


def test_the_attention_chapter_shows_its_heatmaps(tutorial: Path, page) -> None:
    [chapter] = [nb for nb in notebooks() if nb.name.startswith("08")]
    open_page(page, tutorial, chapter.with_suffix(".html").name)
    images = page.locator(".jp-OutputArea-output img")
    # the overview, the head measures, three single-head maps and one layer's three kinds
    assert images.count() >= 6
    sizes = images.evaluate_all("imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert all(w > 200 and h > 100 for w, h in sizes), sizes
    images.nth(3).scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "book-heatmaps.png")
    assert (ARTIFACTS / "book-heatmaps.png").stat().st_size > 10_000


def shown(view, column: str) -> list[tuple[str, str]]:
    "The tokens of one column of the view, with the weight written beside each."
    return [
        tuple(pair)
        for pair in view.locator(f".av-{column} .av-token").evaluate_all(
            "tokens => tokens.map(t => [t.querySelector('.av-text').textContent, "
            "t.querySelector('.av-weight').textContent])"
        )
    ]


def check_view(view, expected) -> list[list[str]]:
    """Choose sentences, kinds, layers and heads; point at a query and at a key; compare what is
    shown with expected(sentence, kind, rows, cols) -> (N, h, Q, K) weights. Returns the weights
    shown, one list a choice."""
    sentences = view.locator(".av-sentence option").count()
    layers, heads = (
        view.locator(".av-layer option").count(),
        view.locator(".av-head option").count(),
    )
    seen = []
    for sentence, kind, layer, head in [
        (0, "encoder", 0, 0),
        (sentences - 1, "decoder_src", layers - 1, heads - 1),
        (sentences - 1, "decoder_src", layers - 1, 0),
        (0, "decoder_self", layers - 1, heads // 2),
    ]:
        for name, value in [
            ("sentence", sentence),
            ("kind", kind),
            ("layer", layer),
            ("head", head),
        ]:
            view.locator(f".av-{name}").select_option(str(value))
        rows, cols = (
            [token for token, _ in shown(view, "queries")],
            [token for token, _ in shown(view, "keys")],
        )
        weights = expected(sentence, kind, rows, cols)[layer, head]  # (Q, K)
        query, key = len(rows) // 2, len(cols) // 2
        view.locator(".av-queries .av-token").nth(query).hover()
        written = [w for _, w in shown(view, "keys")]
        assert all(re.fullmatch(r"\d\.\d\d", w) for w in written), written
        assert torch.allclose(
            torch.tensor([float(w) for w in written]), weights[query], atol=0.005 + 1e-6
        ), (kind, written, weights[query])
        view.locator(".av-keys .av-token").nth(key).hover()
        written = [w for _, w in shown(view, "queries")]
        assert torch.allclose(
            torch.tensor([float(w) for w in written]), weights[:, key], atol=0.005 + 1e-6
        ), (kind, written, weights[:, key])
        seen.append(written)
    assert seen[1] != seen[2], "choosing another head changed nothing"
    return seen


def test_the_interactive_view_of_a_random_model_shows_its_weights(page, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ModelConfig(N=2, d_model=32, d_ff=64, h=4).build(20, 20)
    sentences = [
        (torch.tensor([[1, 5, 6, 7, 8, 2]]), torch.tensor([[1, 9, 10, 11]])),
        (torch.tensor([[1, 12, 13, 2]]), torch.tensor([[1, 14, 15, 16, 17]])),
    ]
    maps = [
        AttentionMaps(
            [f"s{i}" for i in src[0].tolist()],
            [f"t{i}" for i in tgt[0].tolist()],
            attention_weights(model, src, tgt, pad=0),
        )
        for src, tgt in sentences
    ]
    (tmp_path / "view.html").write_text(
        f"<html><body>{AttentionView(maps[:1]).to_html()}<hr>{AttentionView(maps).to_html()}"
        "</body></html>"
    )
    page.goto((tmp_path / "view.html").as_uri())
    assert page.locator(".attention-view").count() == 2  # two views on one page work independently
    check_view(
        page.locator(".attention-view").nth(1), lambda s, kind, rows, cols: maps[s].weights[kind]
    )
    check_view(
        page.locator(".attention-view").nth(0), lambda s, kind, rows, cols: maps[0].weights[kind]
    )


def test_the_rendered_interactive_view_shows_the_trained_models_weights(
    tutorial: Path, page
) -> None:
    from annotated_transformer._chapters import chapter_run
    from annotated_transformer.checkpoint import load_checkpoint

    run_dir, _ = chapter_run()  # the run the attention chapter was rendered with
    ckpt = load_checkpoint(run_dir / "last.pt")
    model, src_vocab, tgt_vocab = ckpt.build_model(), ckpt.src_vocab, ckpt.tgt_vocab

    def expected(sentence: int, kind: str, rows: list[str], cols: list[str]) -> torch.Tensor:
        tokens = {
            "encoder": (rows, None),
            "decoder_self": (None, rows),
            "decoder_src": (cols, rows),
        }[kind]
        view.locator(".av-kind").select_option(
            "decoder_src"
        )  # its columns are the source, its rows the target
        src_tokens, tgt_tokens = (
            [t for t, _ in shown(view, "keys")],
            [t for t, _ in shown(view, "queries")],
        )
        view.locator(".av-kind").select_option(kind)
        assert tokens[0] in (None, src_tokens) and tokens[1] in (None, tgt_tokens)
        src = torch.tensor([[src_vocab.stoi[t] for t in src_tokens]])
        tgt = torch.tensor([[tgt_vocab.stoi[t] for t in tgt_tokens]])
        return attention_weights(model, src, tgt, src_vocab.pad)[kind]

    open_page(page, tutorial, "08_attention.html")
    view = page.locator(".attention-view:has(> .av-data)").last  # not the "Try it" panel's
    view.scroll_into_view_if_needed()
    assert view.locator(".av-sentence option").count() >= 3
    check_view(view, expected)
    page.screenshot(path=ARTIFACTS / "book-attention-view.png")


def resize(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})


def echo_false_cells(nb: Path) -> list[nbformat.NotebookNode]:
    "The code cells of the notebook that the book shows without their code (`#| echo: false`)."
    return [
        cell
        for cell in nbformat.read(nb, as_version=4).cells
        if cell.cell_type == "code" and re.search(r"^#\|\s*echo:\s*false\b", cell.source, re.M)
    ]


def svg_title(svg: str) -> str:
    return re.search(r"<title>(.*?)</title>", svg, re.DOTALL).group(1)


FIGURES = ["figure1.svg", "figure2-scaled-dot-product.svg", "figure2-multi-head.svg"]  # Part 1's
SHOWN_FIGURE = re.compile(r'SVG\(filename="images/([\w.-]+\.svg)"\)')  # a committed diagram
SHOWN_SVG = """cell => [...cell.querySelectorAll(".jp-OutputArea-output :is(svg, img)")]
  .map(el => {  // each SVG an output shows, inline or as an <img>, with its <title> and size
    let svg = el;
    if (el.tagName === "IMG") {
      const src = el.getAttribute("src"), comma = src.indexOf(",");
      const [head, data] = [src.slice(0, comma), src.slice(comma + 1)];
      if (!head.startsWith("data:image/svg+xml")) return null;
      const text = head.endsWith(";base64")
        ? new TextDecoder().decode(Uint8Array.from(atob(data), c => c.charCodeAt(0)))
        : decodeURIComponent(data);
      svg = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
      if (!(el.complete && el.naturalWidth > 0)) return {title: "(not loaded)", width: 0};
    }
    const box = el.getBoundingClientRect();
    return {title: svg.querySelector("title")?.textContent, width: box.width, height: box.height};
  }).filter(Boolean)"""


def diagram_cells(nb: Path) -> dict[str, nbformat.NotebookNode]:
    "The `#| echo: false` cells that show a committed diagram, by the diagram's file name."
    return {
        found.group(1): cell
        for cell in echo_false_cells(nb)
        if (found := SHOWN_FIGURE.search(cell.source))
    }


def smallest_text(svg: str) -> float:
    "The smallest font size, in px, in an SVG of nbs/images."
    return min(float(size) for size in re.findall(r"font-size: ([\d.]+)px", svg))


def check_diagrams(page, nb: Path, column: float) -> None:
    "Each diagram of the page: shown alone, under its title, column-wide, its text readable."
    for name, cell in diagram_cells(nb).items():
        svg = (ROOT / "nbs" / "images" / name).read_text(encoding="utf-8")
        drawn_width = float(re.search(r'<svg [^>]*width="([\d.]+)"', svg).group(1))
        element = page.locator(f'[id="cell-id={cell.id}"]')
        assert element.count() == 1, f"{nb.stem} has no cell {cell.id}"
        assert element.locator(".jp-InputArea").count() == 0, f"cell {cell.id} shows its code"
        shown = element.evaluate(SHOWN_SVG)
        assert [svg["title"] for svg in shown] == [svg_title(svg)], (nb.stem, name, shown)
        assert element.locator(".jp-OutputArea-output").first.is_visible()
        # drawn 1:1 for a column of its width in px, so that its 12 px text stays 12 px
        width = shown[0]["width"]
        assert width >= 0.95 * min(drawn_width, column), (name, shown, column)
        assert shown[0]["height"] > 100, (name, shown)
        assert smallest_text(svg) * width / drawn_width >= 11.4, (name, width)


def column_width(page) -> float:
    return page.locator("main").evaluate(
        "m => m.clientWidth - parseFloat(getComputedStyle(m).paddingLeft)"
        " - parseFloat(getComputedStyle(m).paddingRight)"
    )


def test_part_1_shows_figures_1_and_2_without_their_code(tutorial: Path, page) -> None:
    [part1] = [nb for nb in notebooks() if nb.name.startswith("01")]
    assert sorted(diagram_cells(part1)) == sorted(FIGURES), "Part 1 shows Figures 1 and 2"
    resize(page, WIDE)
    open_page(page, tutorial, "01_model.html")
    code = page.eval_on_selector_all(
        ".jp-CodeCell .jp-InputArea", "areas => areas.map(a => a.textContent).join('\\n')"
    )
    assert "images/figure" not in code, "Part 1 shows the code of a figure cell"
    check_diagrams(page, part1, column_width(page))
    cell = diagram_cells(part1)["figure1.svg"]
    page.locator(f'[id="cell-id={cell.id}"]').scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "book-figure-1.png")


def test_every_diagram_is_shown_readable(tutorial: Path, page) -> None:
    resize(page, WIDE)
    shown = set()
    for nb in notebooks():
        if diagram_cells(nb):
            open_page(page, tutorial, nb.with_suffix(".html").name)
            check_diagrams(page, nb, column_width(page))
            shown |= set(diagram_cells(nb))
    committed = {p.name for p in (ROOT / "nbs" / "images").glob("*.svg")}
    assert shown == committed, f"diagrams no page shows: {sorted(committed - shown)}"


OVERFLOWING = """() => {  // the lines of code and output blocks wider than their box
  document.querySelectorAll("main details").forEach(d => { d.open = true; });  // folded imports
  const ruler = document.createElement("canvas").getContext("2d");
  const found = [];
  for (const pre of document.querySelectorAll(
      "main .jp-InputArea-editor pre, main .jp-OutputArea-output pre")) {
    if (pre.scrollWidth <= pre.clientWidth + 1) continue;
    const style = getComputedStyle(pre);
    ruler.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const lines = pre.textContent.split("\\n");
    const long = lines.filter(line => ruler.measureText(line).width > room);
    found.push(...(long.length ? long : [lines.reduce((a, b) => (b.length > a.length ? b : a))]));
  }
  document.querySelectorAll("main details").forEach(d => { d.open = false; });
  return found;
}"""


def test_no_code_cell_is_wider_than_its_box(tutorial: Path, page) -> None:
    resize(page, WIDE)
    too_wide = []
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        open_page(page, tutorial, name)
        too_wide += [f"{name}: {line[:60]!r}" for line in page.evaluate(OVERFLOWING)]
    assert too_wide == [], (
        f"{len(too_wide)} lines do not fit their box at {WIDE} px:\n" + "\n".join(too_wide)
    )


def png_dpi(src: str) -> float:
    """The dots per inch an image's PNG (a data: URI) records, as matplotlib writes them; else
    matplotlib's default, which a notebook's figures keep unless it sets another."""
    png = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
    return float(png.info.get("dpi", (matplotlib.rcParamsDefault["figure.dpi"],))[0])


def test_the_heatmaps_labels_are_readable(tutorial: Path, page) -> None:
    resize(page, WIDE)
    open_page(page, tutorial, "08_attention.html")
    images = page.locator(".jp-OutputArea-output img[src^='data:image/png']")
    labels = []  # (image, dpi, natural width, shown width, label height in CSS px)
    for i in range(images.count()):
        dpi = png_dpi(images.nth(i).get_attribute("src"))
        natural, width = images.nth(i).evaluate("img => [img.naturalWidth, img.clientWidth]")
        if natural <= figures.COLUMN * dpi + 2:  # never wider than the column: not shrunk
            labels.append(
                (i, dpi, natural, width, figures.LABEL_POINTS * dpi / 72 * width / natural)
            )
    assert len(labels) >= 4, f"{len(labels)} heatmap figures on the attention chapter: {labels}"
    small = [label for label in labels if label[-1] < 10]
    assert small == [], f"labels under 10 px (image, dpi, natural, shown, px): {small}"


def test_citations_lead_to_their_reference(tutorial: Path, page) -> None:
    links = {}  # page -> the hrefs of its links to the references page
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        open_page(page, tutorial, name)
        links[name] = page.eval_on_selector_all(
            f'main a[href*="{REFERENCES}#"]', "links => links.map(a => a.getAttribute('href'))"
        )
    assert links["01_model.html"], "Part 1 links no citation to the references page"
    assert (tutorial / REFERENCES).is_file(), (
        f"{sum(map(len, links.values()))} citations link to {REFERENCES}, which was not rendered"
    )
    targets = sorted({href.split("#", 1)[1] for hrefs in links.values() for href in hrefs})
    open_page(page, tutorial, REFERENCES)
    missing = page.evaluate(
        "ids => ids.filter(id => !document.getElementById(decodeURIComponent(id)))", targets
    )
    cited_by = {
        t: [n for n, hrefs in links.items() if any(h.endswith("#" + t) for h in hrefs)]
        for t in missing
    }
    assert missing == [], f"citations without a reference: {cited_by}"
    open_page(page, tutorial, "01_model.html")  # and following one lands on it
    page.locator(f'main a[href*="{REFERENCES}#"]').first.click()
    page.wait_for_load_state("load")
    assert Path(page.url.split("#")[0]).name == REFERENCES
    assert page.evaluate(
        "document.getElementById(decodeURIComponent(location.hash.slice(1))) !== null"
    )


FOCUSED = """() => {  // which token has the keyboard's focus: [column, index], or null
  const t = document.activeElement;
  return t.matches(".av-token") ? [t.closest(".av-queries") ? "queries" : "keys",
                                   Number(t.dataset.index)] : null;
}"""


def test_the_interactive_view_works_by_keyboard_and_on_a_phone(tutorial: Path, page) -> None:
    open_page(page, tutorial, "08_attention.html")
    view = page.locator(".attention-view:has(> .av-data)").last  # not the "Try it" panel's
    view.scroll_into_view_if_needed()
    view.locator(".av-kind").select_option("decoder_src")
    assert view.locator(".av-token").evaluate_all(
        "tokens => tokens.length > 0 && tokens.every(t => t.tabIndex >= 0)"
    ), "the view's tokens cannot be reached with Tab"
    view.locator(".av-head").focus()  # the last menu; the tokens come next
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == ["queries", 0]
    by_keyboard = [shown(view, "keys")]
    page.keyboard.press("ArrowDown")
    assert page.evaluate(FOCUSED) == ["queries", 1]
    by_keyboard.append(shown(view, "keys"))
    assert all(re.fullmatch(r"\d\.\d\d", w) for _, w in by_keyboard[0]), by_keyboard[0]
    assert by_keyboard[0] != by_keyboard[1], "moving to another token changed nothing"
    page.evaluate("document.activeElement.blur()")
    assert all(w == "" for _, w in shown(view, "keys")), "the weights stay after the focus left"
    for i, weights in enumerate(by_keyboard):
        view.locator(".av-queries .av-token").nth(i).hover()
        assert shown(view, "keys") == weights, (
            f"query {i}: focus and pointer show different weights"
        )
    page.mouse.move(0, 0)

    resize(page, NARROW)
    open_page(page, tutorial, "08_attention.html")
    view.scroll_into_view_if_needed()
    boxes = view.locator(".av-controls label, .av-controls select, .av-column").evaluate_all(
        "els => els.map(e => [e.className || e.textContent.trim().split(/\\s/)[0],"
        " e.getBoundingClientRect().left, e.getBoundingClientRect().right])"
    )
    outside = [box for box in boxes if box[1] < -1 or box[2] > NARROW + 1]
    page.screenshot(path=ARTIFACTS / f"book-attention-view-{NARROW}.png")
    assert outside == [], f"at {NARROW} px these parts of the view leave the window: {outside}"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= NARROW + 1, f"at {NARROW} px the attention chapter is {width} px wide"


def test_screenshots_of_every_page_at_two_widths(tutorial: Path, page) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    sideways = []
    for width in (WIDE, NARROW):
        resize(page, width)
        for nb in notebooks():
            open_page(page, tutorial, nb.with_suffix(".html").name)
            path = SCREENSHOTS / f"{nb.stem}-{width}.png"
            page.screenshot(path=path, full_page=True)
            assert path.stat().st_size > 10_000, path
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            if scroll_width > width + 1:
                sideways.append(f"{nb.stem} at {width} px: {scroll_width} px wide")
    assert sideways == [], f"pages that scroll sideways: {sideways}"


def test_tables_render_and_hidden_cells_stay_hidden(tutorial: Path, page) -> None:
    hidden = [  # the first sentence of each hidden Markdown cell of the landing page
        " ".join(line for line in cell.source.splitlines() if not line.startswith("#|"))
        .replace("`", "")
        .split(". ")[0]
        for cell in nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4).cells
        if cell.cell_type == "markdown" and re.search(r"^#\|\s*hide\b", cell.source, re.M)
    ]
    assert hidden, "the landing page has its hidden package map"
    for nb in notebooks():
        open_page(page, tutorial, nb.with_suffix(".html").name)
        text = page.locator("main").inner_text()
        pipes = re.findall(r"(?m)^\s*\|.*\|\s*$", text)
        assert pipes == [], f"{nb.stem} shows a table as raw pipes: {pipes[0][:80]}"
        if nb.name == "index.ipynb":
            assert not any(sentence in text for sentence in hidden), "a hidden cell is shown"


SCROLLING = ", ".join(  # what may scroll sideways on a phone, each in its own box (book.js)
    f"body.book {box}"
    for box in (".jp-OutputArea-output", ".katex-display", ".jp-RenderedMarkdown table")
)


def scrolling_boxes(page) -> list[dict]:
    "Each output, equation or table box that scrolls sideways: whether it says so, its images."
    page.wait_for_function("document.documentElement.dataset.scrollHints === 'done'")
    return page.locator(SCROLLING).evaluate_all(
        """boxes => boxes.filter(b => b.scrollWidth > b.clientWidth + 1).map(b => ({
            labelled: b.classList.contains("book-scrolls")
                && getComputedStyle(b, "::before").content.includes("scroll"),
            images: b.matches(".jp-OutputArea-output")  // a table's badges are not figures
                ? [...b.querySelectorAll("img")].map(i => [i.naturalWidth, i.clientHeight]) : [],
        }))"""
    )


def test_figures_that_scroll_on_a_phone_say_so_and_none_is_blank(tutorial: Path, page) -> None:
    for width in (WIDE, NARROW):
        resize(page, width)
        for nb in notebooks():
            open_page(page, tutorial, nb.with_suffix(".html").name)
            boxes = scrolling_boxes(page)
            if width == WIDE:
                assert boxes == [], f"{nb.stem}: an output scrolls at {WIDE} px"
            assert all(box["labelled"] for box in boxes), f"{nb.stem}: a box scrolls unlabelled"
            sizes = [size for box in boxes for size in box["images"]]
            assert all(w > 0 and h > 20 for w, h in sizes), f"{nb.stem}: a blank figure {sizes}"


def test_the_landing_page_opens_with_three_doors(tutorial: Path, page) -> None:
    resize(page, WIDE)
    open_page(page, tutorial, "index.html")
    first_screen = 900
    doors = {
        "read": page.locator("main a[href='01_model.html']").first,
        "run": page.locator("main pre", has_text="annotated-transformer train").first,
        "use": page.locator("main pre", has_text="Translator.from_checkpoint").first,
    }
    for door, element in doors.items():
        box = element.bounding_box()
        assert box is not None and box["y"] + box["height"] <= first_screen, (
            f"the {door} door is not on the first screen: {box}"
        )
    page.screenshot(path=ARTIFACTS / "book-index-first-screen.png")
