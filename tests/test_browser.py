"""The rendered tutorial, in a real browser: headless Chromium (Debian's) opens it from local files.

What is checked, from the rendered pages:
1. Every chapter is reachable: from index.html, the "next" links lead through every notebook in reading order, and
   every page's navigation bar links every other page.
2. Every image (plots, heatmaps) is present and loaded (decoded, with a width), each page has at least the images its
   committed notebook has, and the attention chapter shows its heatmaps.
3. No output cell shows a Python error.
Screenshots of the index and of the attention chapter go to test-artifacts/.

The tutorial comes from tools/render.py (the main job). tools/test.sh renders it into test-artifacts/tutorial and names
the folder in $TUTORIAL_DIR; without it, this module renders the tutorial itself, which runs every notebook (minutes).
Where Chromium or Playwright is missing the tests are skipped, unless $REQUIRE_BROWSER is set (.ci/run sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]  # no sandbox: CI runs as root; no network: the machine has none


def notebooks() -> list[Path]:
    "The chapters in reading order, as tools/render.py orders them."
    return [ROOT / "nbs" / "index.ipynb", *sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))]


def committed_images(nb: Path) -> int:
    "How many images the committed notebook's outputs hold."
    cells = json.loads(nb.read_text())["cells"]
    return sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))


def unavailable(reason: str) -> None:
    if os.environ.get("REQUIRE_BROWSER"):
        pytest.fail(f"{reason} ($REQUIRE_BROWSER is set)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def tutorial() -> Path:
    if os.environ.get("TUTORIAL_DIR"):
        return Path(os.environ["TUTORIAL_DIR"]).resolve()
    out = ARTIFACTS / "tutorial"
    subprocess.run([sys.executable, str(ROOT / "tools" / "render.py"), "--out", str(out)], check=True)
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
def page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    yield page
    page.close()


def test_every_chapter_is_reachable_in_reading_order(tutorial: Path, page) -> None:
    pages = [nb.with_suffix(".html").name for nb in notebooks()]
    assert len(pages) >= 8  # the index and seven chapters
    page.goto((tutorial / "index.html").as_uri())
    visited = [Path(page.url).name]
    while page.locator("nav.tutorial-nav a", has_text="next").count():
        page.locator("nav.tutorial-nav a", has_text="next").click()
        page.wait_for_load_state("load")
        visited.append(Path(page.url).name)
        assert page.locator("h1").count() >= 1, f"{visited[-1]} has no heading"
    assert visited == pages
    for name in pages:
        page.goto((tutorial / name).as_uri())
        links = page.eval_on_selector_all("nav.tutorial-nav a", "links => links.map(a => a.getAttribute('href'))")
        assert set(pages) - {name} <= set(links), f"{name} does not link every other chapter"


def test_images_are_loaded_and_no_output_shows_an_error(tutorial: Path, page) -> None:
    for nb in notebooks():
        name = nb.with_suffix(".html").name
        page.goto((tutorial / name).as_uri())
        page.wait_for_load_state("load")
        images = page.eval_on_selector_all("img", "imgs => imgs.map(i => ({loaded: i.complete && i.naturalWidth > 0, src: i.src.slice(0, 40)}))")
        assert all(image["loaded"] for image in images), f"{name}: an image did not load: {images}"
        assert len(images) >= committed_images(nb), f"{name}: {len(images)} images, the notebook has {committed_images(nb)}"
        errors = page.eval_on_selector_all(".jp-OutputArea-output", "outs => outs.filter(o => o.innerText.includes('Traceback (most recent call last)')).length")
        assert errors == 0, f"{name}: {errors} output cells show a Python error"
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto((tutorial / "index.html").as_uri())
    page.screenshot(path=ARTIFACTS / "tutorial-index.png")


def test_the_attention_chapter_shows_its_heatmaps(tutorial: Path, page) -> None:
    [chapter] = [nb for nb in notebooks() if nb.name.startswith("07")]
    page.goto((tutorial / chapter.with_suffix(".html").name).as_uri())
    images = page.locator(".jp-OutputArea-output img")
    assert images.count() >= 7  # the checks' figure, the overview, the head measurements and four heatmap figures
    sizes = images.evaluate_all("imgs => imgs.map(i => [i.naturalWidth, i.naturalHeight])")
    assert all(w > 200 and h > 100 for w, h in sizes), sizes
    images.nth(3).scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "tutorial-attention.png")
    assert (ARTIFACTS / "tutorial-attention.png").stat().st_size > 10_000
