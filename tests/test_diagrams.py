"""The book's diagrams (tools/diagrams.py, drawn with matplotlib): the committed SVGs in nbs/images
are what the tool draws now, each is well-formed, accessible, one column wide with its text kept as
text at 12 px or more, and labelled from the configuration it depicts."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from synthetic import tool

from annotated_transformer.config import preset
from annotated_transformer.model import subsequent_mask

ROOT = Path(__file__).resolve().parent.parent
d = tool("diagrams")
NS = "{http://www.w3.org/2000/svg}"

# Every figure with its book arguments and with a few others.
CASES: dict[str, Callable[[], str]] = {
    "figure1": d.figure1,
    "figure1_prenorm": lambda: d.figure1(norm_first=True),
    "figure1_small": lambda: d.figure1(N=2, d_model=128),
    "figure2_sdp": d.figure2_scaled_dot_product,
    "figure2_mh": d.figure2_multi_head,
    "figure2_mh_dk": lambda: d.figure2_multi_head(h=4, d_model=512, d_k=32),
    "masks": d.masks,
    "masks_nopad": lambda: d.masks(length=5, pad_from=None),
    "padded_batch": d.padded_batch,
    "beam": d.beam,
}


def parse(svg: str) -> ET.Element:
    """The SVG's root element (fails the test if the XML is malformed)."""
    return ET.fromstring(svg)


def texts(svg: str) -> list[str]:
    """The content of every <text> element."""
    return ["".join(t.itertext()).strip() for t in parse(svg).iter(f"{NS}text")]


def all_text(svg: str) -> str:
    """All visible text of a figure, one label per line (non-breaking spaces as spaces)."""
    return "\n".join(texts(svg)).replace("\u00a0", " ")


def font_sizes(svg: str) -> list[float]:
    """The font size, in px, of every piece of text."""
    return [float(size) for size in re.findall(r"font-size: ([\d.]+)px", svg)]


def patches(svg: str, style: str) -> int:
    """How many drawn shapes (not lines) have `style` in their style, e.g. 'fill: #7aa7d9'."""
    root = parse(svg)
    groups = [g for g in root.iter(f"{NS}g") if re.match(r"patch_\d+$", g.get("id", ""))]
    return sum(style in (p.get("style") or "") for g in groups for p in g.iter(f"{NS}path"))


@pytest.fixture(params=sorted(CASES), scope="module")
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(name, svg) for each drawing."""
    return request.param, CASES[request.param]()


# --------------------------------------------------------------------------- the committed files


def test_the_committed_figures_are_what_the_tool_draws() -> None:
    assert d.stale() == [], "run python tools/diagrams.py and commit nbs/images"
    assert sorted(p.name for p in d.IMAGES.glob("*.svg")) == sorted(d.book_figures())


def test_a_stale_figure_is_named(tmp_path: Path) -> None:
    for name, svg in d.book_figures().items():
        (tmp_path / name).write_text(svg, encoding="utf-8")
    assert d.stale(tmp_path) == []
    (tmp_path / "masks.svg").write_text(d.masks(length=5), encoding="utf-8")
    (tmp_path / "beam.svg").unlink()
    assert d.stale(tmp_path) == ["masks.svg", "beam.svg"]


def test_the_book_shows_each_figure_from_its_file() -> None:
    "Every figure is shown by a chapter's `#| echo: false` cell, and nothing draws it in the book."
    shown = set()
    for nb in (ROOT / "nbs").glob("*.ipynb"):
        shown |= set(re.findall(r'SVG\(filename=\\"images/([\w.-]+\.svg)\\"\)', nb.read_text()))
        assert "_diagrams" not in nb.read_text(), f"{nb.name} still names _diagrams"
    assert shown <= set(d.book_figures()), shown - set(d.book_figures())


def test_the_figures_are_drawn_from_the_base_configuration() -> None:
    base = preset("base")
    text = all_text(d.book_figures()["figure1.svg"])
    assert f"×{base.N}" in text and f"d_model = {base.d_model}" in text
    assert f"h = {base.h}, d_k = {base.d_model // base.h}" in text
    assert f"Feed forward, d_ff = {base.d_ff}" in text


# --------------------------------------------------------------------------- every drawing


def test_well_formed_and_accessible(case: tuple[str, str]) -> None:
    """Parses as XML; root is an svg with role=img, an aria-label and a leading <title>."""
    root = parse(case[1])
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img"
    assert len(root.get("aria-label", "")) > 20
    assert root[0].tag == f"{NS}title" and root[0].text


def test_one_column_wide_in_px(case: tuple[str, str]) -> None:
    """Its size in px is its viewBox, one 820 px column wide: 12 px text shows at 12 px."""
    root = parse(case[1])
    x, y, w, h = (float(v) for v in root.get("viewBox").split())
    assert (x, y, w) == (0, 0, d.COLUMN)
    assert (float(root.get("width")), float(root.get("height"))) == (w, h)  # exact: same text
    assert 100 < h < 1000


def test_text_is_text_and_readable(case: tuple[str, str]) -> None:
    """Labels are <text> (not glyph outlines), at least 12 px at the column's width."""
    svg = case[1]
    assert len(texts(svg)) >= 5
    assert "glyph" not in svg and "<use " not in svg
    assert min(font_sizes(svg)) >= 12


def test_self_contained_and_reproducible(case: tuple[str, str]) -> None:
    """No scripts, images or links outside the SVG; no date or version in it; drawn the same
    twice (so rebuilt figures do not churn)."""
    name, svg = case
    for bad in ("<script", "<image", "<foreignObject", "@import", "<dc:date", "Matplotlib v"):
        assert bad not in svg, bad
    assert CASES[name]() == svg


# --------------------------------------------------------------------------- labels


def test_figure1_defaults_show_the_paper_base_model() -> None:
    """×6, d_ff = 2048, h = 8, d_k = 64, d_model = 512 and every sublayer name."""
    text = all_text(d.figure1())
    for label in (
        "×6",
        "h = 8",
        "d_k = 64",
        "d_model = 512",
        "Multi-head self-attention",
        "Masked multi-head self-attention",
        "Encoder–decoder attention",
        "Feed forward, d_ff = 2048",
        "Positional encoding",
        "Outputs (shifted right)",
        "Output probabilities",
        "K, V",
        "Post-norm",
    ):
        assert label in text, label
    assert text.count("Add & norm") == 5  # 2 encoder + 3 decoder sublayers
    assert "Layer norm" not in text and "Final layer norm" not in text


def test_figure1_follows_its_arguments() -> None:
    """×2 and 128 for N=2, d_model=128 (d_k = 128 / 8 = 16); pre-norm moves the norms."""
    text = all_text(d.figure1(N=2, d_model=128))
    assert "×2" in text and "d_model = 128" in text and "d_k = 16" in text
    assert "×6" not in text
    text = all_text(d.figure1(norm_first=True))
    assert "Pre-norm" in text and "Add & norm" not in text
    assert text.count("Layer norm") == 5 and text.count("Final layer norm") == 2


def test_figure2() -> None:
    """Scaled dot-product: MatMul, 1/√d_k, mask, softmax; multi-head: d_k = d_model / h."""
    text = all_text(d.figure2_scaled_dot_product())
    for label in ("MatMul", "1/√d_k", "(optional)", "Softmax", "Q K", "T", "/ √d_k) V"):
        assert label in text, label
    text = all_text(d.figure2_multi_head())
    assert "d_k = d_v = d_model / h = 512 / 8 = 64" in text
    assert text.count("512 → 64") == 3 and "8 × 64 = 512" in text
    text = all_text(d.figure2_multi_head(h=4, d_model=512, d_k=32))
    assert "4 × 32 = 128" in text and "128 → 512" in text


def test_the_masks_are_the_library_s() -> None:
    """The filled cells are those `subsequent_mask` and the padding allow (+1: the legend)."""
    allowed = "fill: " + d.PALETTE["allowed"][0]
    causal = int(subsequent_mask(6).sum())
    assert patches(d.masks(length=6, pad_from=4), allowed) == 6 * 4 + causal + (10 + 4 + 4) + 1
    assert patches(d.masks(length=5, pad_from=None), allowed) == 25 + 15 + 15 + 1
    text = all_text(d.masks(length=6, pad_from=4))
    for label in ("query position", "key position", "may attend", "keys 4–5 are padding"):
        assert label in text, label


def test_the_masks_figure_calls_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    "A change to `subsequent_mask` shows in the figure: it is drawn from the function."
    monkeypatch.setattr(d, "subsequent_mask", lambda n: torch.ones(1, n, n, dtype=torch.bool))
    allowed = "fill: " + d.PALETTE["allowed"][0]
    assert patches(d.masks(length=6, pad_from=None), allowed) == 36 + 36 + 21 + 1


def test_padded_batch() -> None:
    """Rows right-padded to the longest with the pad token, and the (B, T) shape written."""
    lines = all_text(d.padded_batch((7, 5, 9, 3), pad="<blank>")).split("\n")
    assert "Shape (B, T) = (4, 9)." in " ".join(lines)
    assert lines.count("<blank>") == 2 + 4 + 0 + 6
    assert lines.count("<s>") == 4 and lines.count("</s>") == 4


def test_beam() -> None:
    """Beam size 3 over 4 steps: pruned nodes dashed, the best path read off."""
    svg = d.beam()
    text = all_text(svg)
    assert "beam size 3" in parse(svg).get("aria-label")
    assert all(f"step {k}" in text for k in range(1, 5))
    assert "Best so far: A dog runs in … (−1.2)" in text
    pruned = sum(not n[3] for step in d.DEFAULT_BEAM_STEPS for n in step)
    assert patches(svg, "stroke-dasharray") == pruned + 1  # + the legend's sample


@pytest.mark.parametrize(
    "steps, size",
    [
        ([[("a", -1, -1.0, True), ("b", -1, -2.0, True)]], 1),  # keeps more than the beam
        ([[("a", -1, -1.0, True), ("b", -1, -2.0, False)], [("c", 1, -3.0, True)]], 2),  # pruned
        ([[("a", -1, -1.0, True)], [("c", 5, -3.0, True)]], 2),  # no such parent
        ([[("a", 0, -1.0, True)]], 2),  # the first step hangs off the start symbol
    ],
)
def test_beam_rejects_impossible_trees(steps: list, size: int) -> None:
    with pytest.raises(ValueError, match="step"):
        d.beam(steps, beam_size=size)
