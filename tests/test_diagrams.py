"""The book's pictures (annotated_transformer._diagrams): well-formed, self-contained, labelled SVG
inside its viewBox."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from annotated_transformer import _diagrams as d

NS = "{http://www.w3.org/2000/svg}"

# Every public function with default arguments and with a few others.
CASES: dict[str, Callable[[], str]] = {
    "figure1": d.figure1,
    "figure1_prenorm": lambda: d.figure1(norm_first=True),
    "figure1_small": lambda: d.figure1(N=2, d_model=128),
    "figure1_big": lambda: d.figure1(N=12, d_model=1024, h=16, d_ff=4096),
    "figure2_sdp": d.figure2_scaled_dot_product,
    "figure2_mh": d.figure2_multi_head,
    "figure2_mh_dk": lambda: d.figure2_multi_head(h=4, d_model=512, d_k=32),
    "figure2_mh_h1": lambda: d.figure2_multi_head(h=1, d_model=64),
    "masks": d.masks,
    "masks_nopad": lambda: d.masks(length=5, pad_from=None),
    "masks_long": lambda: d.masks(length=16, pad_from=11),
    "padded_batch": d.padded_batch,
    "padded_batch_long": lambda: d.padded_batch((12, 1, 6, 2, 14)),
    "beam": d.beam,
}


def parse(svg: str) -> ET.Element:
    """The SVG's root element (fails the test if the XML is malformed)."""
    return ET.fromstring(svg)


def view_box(root: ET.Element) -> tuple[float, float, float, float]:
    """(x, y, width, height) of the root's viewBox."""
    x, y, w, h = (float(v) for v in root.attrib["viewBox"].split())
    return x, y, w, h


def texts(root: ET.Element) -> list[str]:
    """The content of every <text> element, superscripts included."""
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def all_text(svg: str) -> str:
    """All visible text of a figure, one label per line."""
    return "\n".join(texts(parse(svg)))


def _points(value: str) -> list[tuple[float, float]]:
    """Parse an SVG points attribute."""
    return [tuple(map(float, p.split(","))) for p in value.split()]  # type: ignore[misc]


def _text_box(el: ET.Element) -> tuple[float, float, float, float]:
    """Extent of a text element from its anchor, size and the module's width estimate."""
    x, y, size = float(el.get("x")), float(el.get("y")), float(el.get("font-size"))
    w = d.text_width("".join(el.itertext()), size, el.get("font-weight") == "600")
    start = {"start": 0.0, "middle": -w / 2, "end": -w}[el.get("text-anchor", "start")]
    if "rotate(-90" in el.get("transform", ""):
        return x - 0.8 * size, y - start - w, x + 0.25 * size, y - start
    return x + start, y - 0.8 * size, x + start + w, y + 0.25 * size


def extent(el: ET.Element) -> tuple[float, float, float, float] | None:
    """(x0, y0, x1, y1) an element covers, or None for elements that draw nothing themselves."""
    tag = el.tag.removeprefix(NS)
    sw = float(el.get("stroke-width", "0")) / 2
    if tag == "rect":
        x, y = float(el.get("x")), float(el.get("y"))
        w, h = float(el.get("width")), float(el.get("height"))
        return x - sw, y - sw, x + w + sw, y + h + sw
    if tag == "circle":
        cx, cy, r = float(el.get("cx")), float(el.get("cy")), float(el.get("r")) + sw
        return cx - r, cy - r, cx + r, cy + r
    if tag in ("polyline", "polygon"):
        pts = _points(el.get("points"))
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        return min(xs) - sw, min(ys) - sw, max(xs) + sw, max(ys) + sw
    if tag == "text":
        return _text_box(el)
    return None


@pytest.fixture(params=sorted(CASES), scope="module")
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(name, svg) for each drawing."""
    return request.param, CASES[request.param]()


def test_well_formed_and_accessible(case: tuple[str, str]) -> None:
    """Parses as XML; root is an svg with role=img, an aria-label and a leading <title>."""
    _, svg = case
    root = parse(svg)
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img"
    assert len(root.get("aria-label", "")) > 20
    assert root[0].tag == f"{NS}title" and root[0].text


def test_scales_with_its_column(case: tuple[str, str]) -> None:
    """A viewBox and no fixed width/height, so it shrinks to a narrow column."""
    root = parse(case[1])
    assert len(view_box(root)) == 4
    assert root.get("width") is None and root.get("height") is None
    assert "width:100%" in root.get("style", "") and "height:auto" in root.get("style", "")


def test_nothing_outside_the_view_box(case: tuple[str, str]) -> None:
    """Every drawn element lies within the viewBox (text by the module's width estimate)."""
    root = parse(case[1])
    x, y, w, h = view_box(root)
    for el in root.iter():
        box = extent(el)
        if box is None:
            continue
        x0, y0, x1, y1 = box
        assert x <= x0 and y <= y0 and x1 <= x + w and y1 <= y + h, (
            f"{ET.tostring(el, encoding='unicode')[:120]} extends past viewBox {x, y, w, h}"
        )


def test_text_is_readable(case: tuple[str, str]) -> None:
    """Text is at least 12 px at the column width the figure is drawn for."""
    root = parse(case[1])
    for el in [*root.iter(f"{NS}text"), *root.iter(f"{NS}tspan")]:
        if el.get("font-size"):
            assert float(el.get("font-size")) >= 12


def test_self_contained(case: tuple[str, str]) -> None:
    """No external references, scripts, styles or ids (ids would clash when inlined twice)."""
    svg = case[1].replace('xmlns="http://www.w3.org/2000/svg"', "", 1)
    assert "http" not in svg
    for bad in ("href", "url(", "<script", "<style", "@import", "<image", "<foreignObject", " id="):
        assert bad not in svg


def test_defaults_fit_the_column() -> None:
    """Default drawings are exactly one 820 px column wide, so their text shows at full size."""
    for make in (
        d.figure1,
        d.figure2_scaled_dot_product,
        d.figure2_multi_head,
        d.masks,
        d.padded_batch,
        d.beam,
    ):
        x, _, w, _ = view_box(parse(make()))
        assert (x, w) == (0, d.COLUMN)


def test_deterministic() -> None:
    """The same arguments give byte-identical SVG (so rebuilt pages do not churn)."""
    assert d.figure1() == d.figure1() and d.beam() == d.beam()


# --------------------------------------------------------------------------- labels


def test_figure1_defaults_show_the_paper_base_model() -> None:
    """×6, d_ff = 2048, h = 8, d_k = 64, d_model = 512 and every sublayer name."""
    text = all_text(d.figure1())
    for label in (
        "×6",
        "2048",
        "h = 8",
        "d_k = 64",
        "d_model = 512",
        "Multi-head self-attention",
        "Masked multi-head self-attention",
        "Encoder–decoder attention",
        "Add & norm",
        "Feed forward, d_ff = 2048",
        "Positional encoding",
        "Outputs (shifted right)",
        "Softmax",
        "Output probabilities",
        "K, V",
        "Post-norm",
    ):
        assert label in text, label
    assert text.count("Add & norm") == 5  # 2 encoder + 3 decoder sublayers
    assert "Layer norm" not in text and "Final layer norm" not in text


def test_figure1_follows_its_arguments() -> None:
    """×2 and 128 for N=2, d_model=128 (d_k = 128 / 8 = 16)."""
    text = all_text(d.figure1(N=2, d_model=128))
    assert "×2" in text and "d_model = 128" in text and "d_k = 16" in text
    assert "×6" not in text


def test_figure1_pre_norm() -> None:
    """Norm before each sublayer (5), a final norm per stack (2), and a caption that says so."""
    text = all_text(d.figure1(norm_first=True))
    assert "Pre-norm" in text and "Add & norm" not in text
    assert text.count("Layer norm") == 5 and text.count("Final layer norm") == 2


def test_figure2_scaled_dot_product() -> None:
    """MatMul, scale by 1/√d_k, optional mask, softmax, MatMul with V."""
    text = all_text(d.figure2_scaled_dot_product())
    for label in ("MatMul", "1/√d_k", "Mask", "(optional)", "Softmax", "Q", "K", "V", "KT"):
        assert label in text, label


def test_figure2_multi_head() -> None:
    """d_k = d_model / h shown, h projections of each input, concat of h × d_k values."""
    text = all_text(d.figure2_multi_head())
    assert "d_k = d_v = d_model / h = 512 / 8 = 64" in text
    assert text.count("512 → 64") == 3 and "8 × 64 = 512" in text and "Concat" in text
    text = all_text(d.figure2_multi_head(h=4, d_model=512, d_k=32))
    assert "4 × 32 = 128" in text and "128 → 512" in text


def test_figure2_multi_head_draws_stacked_heads() -> None:
    """More heads, more fanned copies (capped), one head, none."""

    def rects(svg: str) -> int:
        return len(list(parse(svg).iter(f"{NS}rect")))

    assert rects(d.figure2_multi_head(h=8)) > rects(d.figure2_multi_head(h=2))
    assert rects(d.figure2_multi_head(h=8)) == rects(d.figure2_multi_head(h=32))


def _allowed_cells(svg: str) -> int:
    """How many cells are filled (may attend), the legend's sample included."""
    fill = d.PALETTE["allowed"][0]
    return sum(1 for r in parse(svg).iter(f"{NS}rect") if r.get("fill") == fill)


def test_masks() -> None:
    """Padding 6×4, causal 1+…+6 and both 1+2+3+4+4+4 filled cells, axis labels, legend."""
    svg = d.masks(length=6, pad_from=4)
    assert _allowed_cells(svg) == 24 + 21 + 18 + 1
    text = all_text(svg)
    for label in (
        "query position",
        "key position",
        "may attend",
        "Padding mask",
        "Subsequent mask",
        "keys 4–5 are padding",
    ):
        assert label in text, label
    assert _allowed_cells(d.masks(length=5, pad_from=None)) == 25 + 15 + 15 + 1


def test_padded_batch() -> None:
    """Rows right-padded to the longest with the pad token, and the (B, T) shape written."""
    text = all_text(d.padded_batch((7, 5, 9, 3), pad="<blank>"))
    assert "(B, T) = (4, 9)" in text and "T = 9" in text and "B = 4" in text
    assert text.split("\n").count("<blank>") == 2 + 4 + 0 + 6
    assert text.split("\n").count("<s>") == 4 and text.split("\n").count("</s>") == 4
    assert text.split("\n").count("<pad>") == 0
    assert all_text(d.padded_batch((2, 4), pad="<pad>")).split("\n").count("<pad>") == 2


def test_beam_default() -> None:
    """Beam size 3 over 4 steps: kept solid, pruned dashed, the best path picked out."""
    svg = d.beam()
    text = all_text(svg)
    assert "beam size 3" in parse(svg).get("aria-label")
    assert all(f"step {k}" in text for k in range(1, 5))
    assert "Best so far: A dog runs in … (−1.2)" in text
    nodes = [n for step in d.DEFAULT_BEAM_STEPS for n in step]
    pruned = sum(1 for n in nodes if not n[3])
    dashed_rects = sum(1 for r in parse(svg).iter(f"{NS}rect") if r.get("stroke-dasharray"))
    assert dashed_rects == pruned + 1  # + the legend's sample
    assert all(sum(n[3] for n in step) <= 3 for step in d.DEFAULT_BEAM_STEPS)


def test_beam_custom_structure() -> None:
    """A two-step example draws its own tokens; source is optional."""
    steps = [[("Hallo", -1, -0.1, True), ("Hi", -1, -2.0, False)], [("Welt", 0, -0.3, True)]]
    text = all_text(d.beam(steps, beam_size=1, source="hello world"))
    assert "Hallo" in text and "Welt" in text and "Source: hello world" in text


@pytest.mark.parametrize(
    "steps, size",
    [
        ([[("a", -1, -1.0, True), ("b", -1, -2.0, True)]], 1),  # keeps more than the beam
        (
            [[("a", -1, -1.0, True), ("b", -1, -2.0, False)], [("c", 1, -3.0, True)]],
            2,
        ),  # pruned parent
        ([[("a", -1, -1.0, True)], [("c", 5, -3.0, True)]], 2),  # no such parent
        ([[("a", 0, -1.0, True)]], 2),  # first step must hang off the start symbol
    ],
)
def test_beam_rejects_impossible_trees(steps: list, size: int) -> None:
    """Structures that no beam search produces raise ValueError."""
    with pytest.raises(ValueError):
        d.beam(steps, beam_size=size)


def test_source_style() -> None:
    """diagrams.py keeps lines within 100 columns and imports only the standard library."""
    lines = Path(d.__file__).read_text(encoding="utf-8").splitlines()
    too_long = [i + 1 for i, line in enumerate(lines) if len(line) > 100]
    assert not too_long, f"lines over 100 columns: {too_long}"
    modules = {
        line.split()[1].split(".")[0] for line in lines if line.startswith(("import ", "from "))
    }
    assert modules <= {"__future__", "collections", "math", "dataclasses", "xml"}  # stdlib only
