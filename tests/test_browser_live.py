"""The "Try it" panel of the rendered book (chapter 08, figures.TryIt): the chapters' subword model,
exported to ONNX, translating in headless Chromium, served from 127.0.0.1 with every other address
refused (the machine is offline).

What is checked, on the book tools/render.py rendered (its live/ folder and live/model/):
1. Nothing of the model is asked for before the reader presses Translate; then at most 30 MB
   (the runtime, the tokenizer, the model), and the model is ready within 5 s of the click.
2. The page's greedy search writes the tokens Python's onnxruntime writes from the same files for
   at least 99.5% of the test2016 sources, and the page's tokenizer gives Python's ids for every
   one of them and for 20 edge cases (numbers, punctuation runs, accents, characters the model
   never saw, empty input, a typed "▁" or "<s>", 200 words).
3. A sentence of up to 20 tokens is translated in a median of at most 500 ms and a 95th
   percentile of at most 1 s (one thread; from the request to the answer).
4. On a phone (420 px) the text box, the translation and an attention map are visible without
   sideways scrolling, and pointing at a token shows the weights Python's onnxruntime computes;
   screenshots at 1400 and 420 px go to test-artifacts/screenshots/try-it-<width>.png, and the
   measured figures to test-artifacts/try-it.json.
5. From a file (file://) the panel says in one line that it needs http, asks for nothing when
   pressed, and the precomputed view stays; in a browser without WebAssembly SIMD, or when a model
   file does not load, it says so in one line, naming the file.
"""

from __future__ import annotations

import functools
import http.server
import json
import statistics
import threading
import time
from pathlib import Path

import pytest

from test_browser import ARTIFACTS, NARROW, SCREENSHOTS, WIDE, browser, tutorial, unavailable

from annotated_transformer.data import load_multi30k

__all__ = ["browser", "tutorial"]  # fixtures of the book's browser test, used here too
PAGE = "08_attention.html"
EDGE_CASES = [
    "1234 5,6 und 7.000",
    "Wer? Was?!... Nein!!!",
    "Ça élève où Ärger über Öl",
    "Ein 🙂 und 漢字 und ☃",
    "",
    "   ",
    "zwei  Leerzeichen   hier ",
    "Tab\tund\nneue Zeile",
    "ein ▁ Zeichen▁mitten",
    "<s> Hallo </s> <unk> <blank>",
    "Straße, Fuß und Maß",
    "e\u0301 und \u00e9",
    "\ufb01nden und \u00a0geschützt",
    "null\u200bbreit",
    "3D-Drucker für 20€ (ca. 25 $)",
    "«Anführung» „Zeichen“",
    "EIN MANN IN ROT",
    "ein",
    " ".join(["Hund"] * 200),
    "Ein Mann, der – wie immer – lacht; sie: „Ja“.",
]


class Counting(http.server.SimpleHTTPRequestHandler):
    "Serves the book's folder, quietly, and records each file sent with its size."

    sent: list[tuple[str, int]]

    def log_message(self, *args) -> None:
        pass

    def copyfile(self, source, outputfile) -> None:
        start = source.tell()
        super().copyfile(source, outputfile)
        self.sent.append((self.path, source.tell() - start))


@pytest.fixture(scope="module")
def served(tutorial: Path):
    "The book over http on 127.0.0.1 (a free port): (its address, the files sent)."
    if not (tutorial / "live" / "model" / "encoder.onnx").is_file():
        unavailable(f"{tutorial}/live/model: no model for the panel (the subword run is missing)")
    sent: list[tuple[str, int]] = []
    handler = type("Handler", (Counting,), {"sent": sent})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(tutorial))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", sent
    server.shutdown()


@pytest.fixture(scope="module")
def onnx_model(tutorial: Path):
    from annotated_transformer.engines import OnnxModel

    return OnnxModel.from_dir(tutorial / "live" / "model")


def offline_page(browser, address: str, width: int, refused: list[str]):
    "A page that may reach the book's server and nothing else: every other request is refused."
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.context.route(
        lambda url: not url.startswith(address),
        lambda route: (refused.append(route.request.url), route.abort()),
    )
    return page


def open_panel(page, address: str) -> None:
    page.goto(address + PAGE + "#try-it")
    page.wait_for_load_state("load")
    page.wait_for_function("document.querySelector('.try-it').tryIt !== undefined")


@pytest.fixture(scope="module")
def measured(browser, served, onnx_model) -> dict:
    """The panel loaded by a click, then every test2016 source translated and tokenized in the
    page, and the edge cases tokenized: what the page and Python found, and what it cost."""
    address, sent = served
    refused: list[str] = []
    page = offline_page(browser, address, WIDE, refused)
    open_panel(page, address)
    before = list(sent)
    seconds = page.evaluate(
        """async () => {
            const panel = document.querySelector('.try-it'), started = performance.now();
            panel.querySelector('.ti-go').click();
            await panel.tryIt.load();
            return (performance.now() - started) / 1000;
        }"""
    )
    loaded = sent[len(before) :]
    sources = [de for de, _ in load_multi30k("test2016")]
    found = page.evaluate(
        """async sources => {
            const tryIt = document.querySelector('.try-it').tryIt, found = [];
            for (const s of sources) {
                const r = await tryIt.run(s);
                found.push({src: r.src, out: r.out, ms: r.roundTrip});
            }
            return found;
        }""",
        sources,
    )
    edge = page.evaluate(
        "texts => document.querySelector('.try-it').tryIt.tokenize(texts)", EDGE_CASES
    )
    page.close()
    assert refused == [], f"the page asked the network for {refused}"
    return dict(
        before=before, loaded=loaded, seconds=seconds, sources=sources, found=found, edge=edge
    )


def test_nothing_is_downloaded_until_asked_then_at_most_30_mb_ready_within_5_s(measured) -> None:
    assert not [path for path, _ in measured["before"] if "/live/" in path]
    paths = [path for path, _ in measured["loaded"]]
    assert any(p.endswith("encoder.onnx") for p in paths) and any(
        p.endswith(".wasm") for p in paths
    )
    downloaded = sum(size for _, size in measured["loaded"])
    assert downloaded <= 30 * 10**6, f"{downloaded:,} bytes"
    assert measured["seconds"] <= 5, f"ready {measured['seconds']:.1f} s after the click"


def test_the_page_translates_as_python_onnxruntime_does(measured, onnx_model) -> None:
    python_ids = [onnx_model.source_ids(s) for s in measured["sources"]]
    page_ids = [f["src"] for f in measured["found"]]
    assert page_ids == python_ids  # exact: token ids
    same = sum(f["out"] == onnx_model.greedy(i) for f, i in zip(measured["found"], python_ids))
    share = same / len(python_ids)
    short = [f["ms"] for f, i in zip(measured["found"], python_ids) if len(i) - 2 <= 20]
    median, p95 = statistics.median(short), statistics.quantiles(short, n=20)[-1]
    figures = dict(
        sentences=len(python_ids), same_tokens=same, short_sentences=len(short),
        median_ms=round(median, 1), p95_ms=round(p95, 1), ready_s=round(measured["seconds"], 2),
        downloaded_bytes=sum(size for _, size in measured["loaded"]),
    )  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "try-it.json").write_text(json.dumps(figures, indent=1))
    assert share >= 0.995, f"{same} of {len(python_ids)} translations as Python's"
    assert median <= 500 and p95 <= 1000, figures


def test_the_page_tokenizes_the_edge_cases_as_python_does(measured, onnx_model) -> None:
    for text, ids in zip(EDGE_CASES, measured["edge"]):
        assert ids == onnx_model.source_ids(text), repr(text)


def test_on_a_phone_the_panel_works_with_a_thumb(browser, served, onnx_model) -> None:
    address, _ = served
    refused: list[str] = []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width in (WIDE, NARROW):
        page = offline_page(browser, address, width, refused)
        open_panel(page, address)
        panel = page.locator(".try-it")
        page.fill(".try-it .ti-text", "Zwei Hunde spielen im Schnee.")
        page.click(".try-it .ti-go")
        page.wait_for_function("document.querySelector('.try-it .ti-out').textContent !== ''")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        for part in (".ti-text", ".ti-go", ".ti-out", ".av-columns"):
            box = page.locator(f".try-it {part}").bounding_box()
            assert (
                box and box["width"] > 0 and box["x"] >= 0 and box["x"] + box["width"] <= width
            ), part
        page.select_option(".try-it .av-kind", "decoder_src")
        page.locator(".try-it .av-queries .av-token").nth(1).hover()
        shown = page.locator(".try-it .av-keys .av-weight").all_inner_texts()
        src = onnx_model.source_ids("Zwei Hunde spielen im Schnee.")
        out = onnx_model.greedy(src)
        expected = onnx_model.attention(src, out[:-1])["decoder_src"][0, 0, 1]  # layer 0, head 0
        assert [float(w) for w in shown] == pytest.approx(expected.tolist(), abs=0.006)
        panel.scroll_into_view_if_needed()
        panel.screenshot(path=SCREENSHOTS / f"try-it-{width}.png")
        page.close()
    assert refused == []


def test_from_a_file_the_panel_says_why_and_the_precomputed_view_stays(tutorial, browser) -> None:
    page = browser.new_page(viewport={"width": WIDE, "height": 900})
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto((tutorial / PAGE).as_uri())
    page.wait_for_load_state("load")
    page.click(".try-it .ti-go")
    time.sleep(0.5)
    status = page.inner_text(".try-it .ti-status")
    assert "served over http" in status and "\n" not in status.strip()
    assert not [url for url in asked if "/live/" in url]
    assert page.locator(".attention-view .av-data").count() >= 1  # the precomputed view
    page.close()


def test_where_the_model_cannot_run_the_panel_says_why_in_one_line(browser, served) -> None:
    "A browser without WebAssembly SIMD, and a model file that does not load."
    address, _ = served
    refused: list[str] = []
    page = offline_page(browser, address, WIDE, refused)
    page.add_init_script("WebAssembly.validate = () => false")  # as a browser without SIMD
    open_panel(page, address)
    page.click(".try-it .ti-go")
    assert "lacks WebAssembly SIMD" in page.inner_text(".try-it .ti-status")
    page.close()
    page = offline_page(browser, address, WIDE, refused)
    page.route("**/model/decoder.onnx", lambda route: route.abort())
    open_panel(page, address)
    page.click(".try-it .ti-go")
    page.wait_for_function(
        "/did not load/.test(document.querySelector('.try-it .ti-status').textContent)"
    )
    status = page.inner_text(".try-it .ti-status")
    assert "decoder" in status and "\n" not in status.strip()
    page.close()
    assert [url for url in refused if "decoder.onnx" not in url] == []


def test_the_landing_page_links_the_panel(tutorial, browser) -> None:
    "The front page's link to the panel leads to it, as the chapters' links to BLEU do."
    page = browser.new_page(viewport={"width": WIDE, "height": 900})
    page.goto((tutorial / "index.html").as_uri())
    links = page.eval_on_selector_all("main a[href*='#']", "as => as.map(a => a.href)")
    for target in ("08_attention.html#try-it", "06_translation.html#bleu"):
        [href] = [h for h in links if h.endswith(target)]
        page.goto(href)
        assert page.locator(f"#{target.split('#')[1]}").count() == 1, target
    page.close()
