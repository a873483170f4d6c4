"""Draw the book's diagrams with matplotlib and write them as SVG into nbs/images/.

The chapters show the committed files (an `#| echo: false` cell displays each); this tool is how
they are made, from the configuration they depict: Figure 1 and Figure 2 from the base preset's
N, d_model, h, d_ff, the masks from the library's own `subsequent_mask` and `Batch`.

    python tools/diagrams.py           # write nbs/images/*.svg
    python tools/diagrams.py --check   # exit 1, naming them, if a committed file differs

Every figure is laid out in px for an 820 px book column (1 unit = 1 pt = 1 px at that width; text
of 12 px or more), with light fills that print well. The SVG keeps its text as text (searchable,
crisp at any zoom) and is byte-for-byte reproducible (no date, a fixed hash salt), with a <title>,
role="img" and an aria-label for screen readers.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Circle, FancyBboxPatch, Polygon
from matplotlib.textpath import TextToPath
from matplotlib.transforms import Bbox

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the library, run from a checkout
import torch  # noqa: E402

from annotated_transformer.batching import Batch  # noqa: E402
from annotated_transformer.config import preset  # noqa: E402
from annotated_transformer.model import subsequent_mask  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "nbs" / "images"
COLUMN = 820  # book column width in px: figures are laid out 1:1 at this width
PAD = 0  # the padding id of the masks figure's decoder input
MARGIN = 10  # white space kept around the drawing
SCRATCH = 2000  # height of the page a figure is drawn on before it is cut to its drawing
STYLE = {
    "svg.fonttype": "none",  # text stays text: the browser sets it, crisp and searchable
    "svg.hashsalt": "annotated-transformer",  # ids the same on every run
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # the layout's metrics: the widest common sans-serif
    "lines.scale_dashes": False,  # dash lengths in px, whatever the line width
    "text.parse_math": False,  # a "$" is a dollar
}
TEXT = "#1f2937"
MUTED = "#4b5563"
LINE = "#374151"
FAINT = "#9ca3af"
ACCENT = "#1d4ed8"

# Light fills that survive greyscale printing, each with a darker stroke of the same hue.
PALETTE: dict[str, tuple[str, str]] = {
    "attention": ("#fde8cc", "#c2803a"),
    "norm": ("#fbf3b9", "#a8962c"),
    "ffn": ("#d4e9fb", "#3f7fb8"),
    "embed": ("#f9dde0", "#bb5a66"),
    "linear": ("#e6e0f6", "#7462ad"),
    "softmax": ("#d9f0dc", "#4a9355"),
    "stack": ("#f5f6f8", "#9ca3af"),
    "plain": ("#ffffff", "#6b7280"),
    "token": ("#eaf3fd", "#6b8fb5"),
    "pad": ("#e5e7eb", "#9ca3af"),
    "allowed": ("#7aa7d9", "#ffffff"),
    "blocked": ("#ffffff", "#cbd5e1"),
    "outline": ("none", "#94a3b8"),
}

Point = tuple[float, float]
BeamStep = Sequence[tuple[str, int, float, bool]]


# --------------------------------------------------------------------------- the canvas


@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle in px, with the anchor points arrows attach to."""

    x: float
    y: float
    w: float
    h: float

    left = property(lambda self: self.x)
    right = property(lambda self: self.x + self.w)
    top = property(lambda self: self.y)
    bottom = property(lambda self: self.y + self.h)
    cx = property(lambda self: self.x + self.w / 2)
    cy = property(lambda self: self.y + self.h / 2)


def text_width(s: str, size: float, bold: bool = False) -> float:
    """Width in px of s set at `size` px in the layout's font (matplotlib's own measure)."""
    font = FontProperties(family=STYLE["font.sans-serif"], size=size)
    font.set_weight("bold" if bold else "normal")
    return TextToPath().get_text_width_height_descent(s, font, ismath=False)[0]


class Canvas:
    """A figure one column wide in px, y pointing down; the SVG is cut to what was drawn."""

    def __init__(self, title: str, label: str, width: float = COLUMN) -> None:
        self.title, self.label, self.width = title, label, float(width)
        with matplotlib.rc_context(STYLE):
            self.fig = Figure(figsize=(width / 72, SCRATCH / 72), dpi=72, facecolor="white")
        FigureCanvasAgg(self.fig)  # a renderer to measure text with
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_axis_off()
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(SCRATCH, 0)

    def _add(self, artist, back: bool = False):
        """Add a patch, drawn in the order added (frames, `back`, behind everything)."""
        artist.set(zorder=0 if back else 1, clip_on=False)
        self.ax.add_artist(artist)
        return artist

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        kind: str = "plain",
        dashed: bool = False,
        rx: float = 6,
        stroke_width: float = 1.2,
        back: bool = False,
        stroke: str | None = None,
    ) -> Box:
        """A filled rounded rectangle in the palette colours of `kind` (stroke overridable)."""
        fill, edge = PALETTE[kind][0], stroke or PALETTE[kind][1]
        style = f"round,pad=0,rounding_size={rx}" if rx else "square,pad=0"
        patch = FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=fill, edgecolor=edge)
        patch.set(linewidth=stroke_width, linestyle=(0, (5, 4)) if dashed else "-")
        self._add(patch, back)
        return Box(x, y, w, h)

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: float = 13,
        anchor: str = "middle",
        bold: bool = False,
        fill: str = TEXT,
        italic: bool = False,
        vertical: bool = False,
    ) -> None:
        """Text with its baseline at y; `^{...}` marks a superscript; vertical reads upwards."""
        if "^{" in s:  # set piece by piece from the left, superscripts raised, 12 px or more
            pieces = re.split(r"\^\{([^}]*)\}", s)  # text, superscript, text, ...
            pieces = [re.sub(r"^ | $", "\u00a0", p) for p in pieces]  # SVG drops edge spaces
            sizes = [size if i % 2 == 0 else max(12.0, size * 0.8) for i in range(len(pieces))]
            widths = [text_width(p, z, bold) for p, z in zip(pieces, sizes, strict=True)]
            x -= {"start": 0.0, "middle": sum(widths) / 2, "end": sum(widths)}[anchor]
            for i, (piece, piece_size, w) in enumerate(zip(pieces, sizes, widths, strict=True)):
                rise = 0.35 * size if i % 2 else 0.0
                self.text(x, y - rise, piece, piece_size, "start", bold, fill, italic)
                x += w
            return
        with matplotlib.rc_context(STYLE):
            self.ax.text(
                x,
                y,
                s,
                fontsize=size,
                color=fill,
                ha={"start": "left", "middle": "center", "end": "right"}[anchor],
                va="baseline",
                fontweight="bold" if bold else "normal",
                fontstyle="italic" if italic else "normal",
                rotation=90 if vertical else 0,
                rotation_mode="anchor",
                zorder=1,
                clip_on=False,
            )

    def lines(
        self, cx: float, cy: float, rows: Sequence[str], size: float = 13, fill: str = TEXT
    ) -> None:
        """Centre a label of several rows on (cx, cy): the first row bold, the rest smaller."""
        sizes = [size] + [12.0] * (len(rows) - 1)
        heights = [s * 1.3 for s in sizes]
        top = cy - sum(heights) / 2
        for i, (row, s) in enumerate(zip(rows, sizes, strict=True)):
            baseline = top + sum(heights[:i]) + heights[i] / 2 + 0.35 * s
            self.text(
                cx, baseline, row, s, bold=i == 0 and len(rows) > 1, fill=fill if i == 0 else MUTED
            )

    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        rows: Sequence[str],
        kind: str = "plain",
        dashed: bool = False,
        fill: str = TEXT,
    ) -> Box:
        """A labelled box: rectangle plus centred rows of text."""
        b = self.rect(x, y, w, h, kind, dashed)
        self.lines(b.cx, b.cy, rows, fill=fill)
        return b

    def line(
        self,
        points: Sequence[Point],
        color: str = LINE,
        width: float = 1.4,
        dashed: bool = False,
        back: bool = False,
    ) -> None:
        """An open polyline through `points`."""
        with matplotlib.rc_context(STYLE):
            (drawn,) = self.ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                color=color,
                linewidth=width,
                linestyle=(0, (5, 4)) if dashed else "-",
                solid_joinstyle="round",
                dash_joinstyle="round",
            )
        drawn.set(zorder=0 if back else 1, clip_on=False)

    def arrow(
        self,
        points: Sequence[Point],
        color: str = LINE,
        width: float = 1.4,
        dashed: bool = False,
        both: bool = False,
    ) -> None:
        """A polyline ending in an arrowhead (both ends if `both`)."""
        pts = list(points)
        pts[-1] = self._head(pts[-2], pts[-1], color, width)
        if both:
            pts[0] = self._head(pts[1], pts[0], color, width)
        self.line(pts, color, width, dashed)

    def _head(self, frm: Point, tip: Point, color: str, width: float) -> Point:
        """Draw an arrowhead at `tip`, pointing away from `frm`; return where the shaft ends."""
        (x0, y0), (x1, y1) = frm, tip
        d = math.hypot(x1 - x0, y1 - y0) or 1.0
        ux, uy = (x1 - x0) / d, (y1 - y0) / d
        length, half = 7 + width, 3.5 + width / 2
        bx, by = x1 - ux * length, y1 - uy * length
        corners = [(x1, y1), (bx - uy * half, by + ux * half), (bx + uy * half, by - ux * half)]
        self._add(Polygon(corners, closed=True, facecolor=color, edgecolor="none"))
        # Stop the shaft inside the head so a thick line never pokes past the tip.
        return (x1 - ux * length * 0.6, y1 - uy * length * 0.6)

    def circle(
        self, cx: float, cy: float, r: float, kind: str = "plain", width: float = 1.2
    ) -> Box:
        """A filled circle; returns its bounding box."""
        fill, stroke = PALETTE[kind]
        self._add(Circle((cx, cy), r, facecolor=fill, edgecolor=stroke, linewidth=width))
        return Box(cx - r, cy - r, 2 * r, 2 * r)

    def add_node(self, cx: float, cy: float, r: float = 10) -> Box:
        """The ⊕ where two paths are summed (a circle with a plus drawn in lines)."""
        b = self.circle(cx, cy, r, width=1.4)
        arm = r * 0.55
        self.line([(cx - arm, cy), (cx + arm, cy)], width=1.6)
        self.line([(cx, cy - arm), (cx, cy + arm)], width=1.6)
        return b

    def dot(self, x: float, y: float) -> None:
        """A junction dot where a line branches."""
        self._add(Circle((x, y), 3, facecolor=LINE, edgecolor="none"))

    def to_svg(self) -> str:
        """The finished SVG: as wide as the column (or the drawing), as tall as the drawing."""
        renderer = self.fig.canvas.get_renderer()
        drawn = [*self.ax.patches, *self.ax.lines, *self.ax.texts, *self.ax.artists]
        extent = Bbox.union([a.get_window_extent(renderer) for a in drawn])
        corners = extent.get_points()  # display px, y up
        (x0, y1), (x1, y0) = self.ax.transData.inverted().transform(corners)
        x0, x1 = min(0.0, x0 - MARGIN), max(self.width, x1 + MARGIN)
        y0, y1 = y0 - MARGIN, y1 + MARGIN
        self.ax.set_xlim(x0, x1)
        self.ax.set_ylim(y1, y0)
        self.fig.set_size_inches((x1 - x0) / 72, (y1 - y0) / 72)
        out = io.StringIO()
        with matplotlib.rc_context(STYLE):
            self.fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
        return accessible(out.getvalue(), self.title, self.label)


def accessible(svg: str, title: str, label: str) -> str:
    """matplotlib's SVG sized in px (one unit a px), with a role, an aria-label and a <title>."""
    root = re.search(r"<svg [^>]*>", svg).group(0)
    sized = re.sub(r'(width|height)="([\d.]+)pt"', r'\1="\2"', root)
    sized = sized[:-1] + f' role="img" aria-label="{escape(label, {chr(34): "&quot;"})}">'
    return svg.replace(root, f"{sized}\n <title>{escape(title)}</title>", 1)


def _fmt(v: float) -> str:
    """A dimension as an integer when it is one (64.0 -> '64', 42.67 -> '42.67')."""
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}".rstrip("0").rstrip(".")


# --------------------------------------------------------------------------- figure 1

SUB_W = 262  # width of a sublayer box in figure 1
SUB_H = 44  # a two-row sublayer box
NORM_H = 28  # a one-row box: add & norm, layer norm
NORM_W = 150  # pre-norm's "Layer norm" boxes are narrower, to read as a step, not a sublayer
GAP = 12  # vertical space an arrow spans between two boxes
BLOCK_GAP = 18  # space between one residual block and the next
HEAD_H = 30  # room at the top of a layer frame for its heading
ENC_CX, DEC_CX = 212, 602  # centre lines of the encoder and decoder columns
ENC_LANE, DEC_LANE = 64, 752  # where residual paths run: outside the columns, away from the middle
MEMORY_LANE = 407  # the gap between the columns, where the encoder output travels


def _post_norm_block(
    c: Canvas, cx: float, y: float, lane: float, rows: list[str], kind: str
) -> tuple[float, Box]:
    """Sublayer then Add & norm (the paper's order), the residual path branching at y."""
    c.dot(cx, y)
    sub = c.box(cx - SUB_W / 2, y + GAP, SUB_W, SUB_H, rows, kind)
    c.arrow([(cx, y), (cx, sub.top)])
    add = c.box(cx - SUB_W / 2, sub.bottom + GAP, SUB_W, NORM_H, ["Add & norm"], "norm")
    c.arrow([(cx, sub.bottom), (cx, add.top)])
    side = add.left if lane < cx else add.right
    c.arrow([(cx, y), (lane, y), (lane, add.cy), (side, add.cy)])
    return add.bottom, sub


def _pre_norm_block(
    c: Canvas, cx: float, y: float, lane: float, rows: list[str], kind: str
) -> tuple[float, Box]:
    """Layer norm, sublayer, then ⊕ with the untouched input (pre-norm), branching at y."""
    c.dot(cx, y)
    norm = c.box(cx - NORM_W / 2, y + GAP, NORM_W, NORM_H, ["Layer norm"], "norm")
    c.arrow([(cx, y), (cx, norm.top)])
    sub = c.box(cx - SUB_W / 2, norm.bottom + GAP, SUB_W, SUB_H, rows, kind)
    c.arrow([(cx, norm.bottom), (cx, sub.top)])
    add = c.add_node(cx, sub.bottom + GAP + 10)
    c.arrow([(cx, sub.bottom), (cx, add.top)])
    side = add.left if lane < cx else add.right
    c.arrow([(cx, y), (lane, y), (lane, add.cy), (side, add.cy)])
    return add.bottom, sub


def _layer(
    c: Canvas,
    cx: float,
    top: float,
    entry: float,
    lane: float,
    blocks: list[tuple[list[str], str]],
    norm_first: bool,
    heading: str,
) -> tuple[Box, list[Box]]:
    """One encoder or decoder layer in a frame; returns the frame and its sublayer boxes."""
    block = _pre_norm_block if norm_first else _post_norm_block
    y, bottom, subs = top + HEAD_H, entry, []
    for rows, kind in blocks:
        c.line([(cx, bottom), (cx, y)])  # the main path runs on to the next branch point
        bottom, sub = block(c, cx, y, lane, rows, kind)
        subs.append(sub)
        y = bottom + BLOCK_GAP
    left = min(lane, cx - SUB_W / 2) - 14
    right = max(lane, cx + SUB_W / 2) + 14
    frame = c.rect(left, top, right - left, bottom + 14 - top, "stack", rx=10, back=True)
    # The heading sits on the side away from the residual lane, so the two never meet.
    if lane < cx:
        c.text(right - 10, top + 19, heading, 13, anchor="end", bold=True, fill=MUTED)
    else:
        c.text(left + 10, top + 19, heading, 13, anchor="start", bold=True, fill=MUTED)
    return frame, subs


def _embedding(c: Canvas, cx: float, y: float, title: str, rows: list[str]) -> float:
    """Title, embedding box and the ⊕ adding the positional encoding; returns the ⊕'s bottom."""
    c.text(cx, y + 14, title, 13, bold=True)
    emb = c.box(cx - SUB_W / 2, y + 36, SUB_W, SUB_H, rows, "embed")
    c.arrow([(cx, y + 21), (cx, emb.top)])
    add = c.add_node(cx, emb.bottom + GAP + 10)
    c.arrow([(cx, emb.bottom), (cx, add.top)])
    c.text(add.right + 34, add.cy + 4, "Positional encoding", 12, anchor="start", fill=MUTED)
    c.arrow([(add.right + 30, add.cy), (add.right, add.cy)])
    return add.bottom


def _final_norm(c: Canvas, cx: float, y: float) -> float:
    """Pre-norm's extra LayerNorm after a whole stack; returns its bottom."""
    norm = c.box(cx - NORM_W / 2, y + GAP + 6, NORM_W, NORM_H, ["Final layer norm"], "norm")
    c.arrow([(cx, y), (cx, norm.top)])
    return norm.bottom


def _decoder(
    c: Canvas, y0: float, N: int, d_model: int, attn: str, ff: str, norm_first: bool
) -> tuple[Box, Box, float]:
    """The decoder column from its inputs to the output probabilities.

    Returns the layer frame, the encoder-decoder attention box and the bottom of the column.
    """
    cx = DEC_CX
    pe = _embedding(
        c,
        cx,
        y0,
        "Outputs (shifted right)",
        ["Output embedding × √d_model", f"d_model = {d_model}"],
    )
    blocks = [
        (["Masked multi-head self-attention", attn + ", causal mask"], "attention"),
        (["Encoder–decoder attention", "multi-head, " + attn], "attention"),
        ([ff], "ffn"),
    ]
    frame, subs = _layer(c, cx, pe + 18, pe, DEC_LANE, blocks, norm_first, "Decoder layer")
    c.text(frame.right + 4, frame.cy + 7, f"×{N}", 20, anchor="start", bold=True)
    y = _final_norm(c, cx, frame.bottom) if norm_first else frame.bottom
    linear = c.box(
        cx - SUB_W / 2, y + GAP + 6, SUB_W, 32, ["Linear, d_model → vocabulary"], "linear"
    )
    c.arrow([(cx, y), (cx, linear.top)])
    soft = c.box(cx - SUB_W / 2, linear.bottom + GAP, SUB_W, 32, ["Softmax"], "softmax")
    c.arrow([(cx, linear.bottom), (cx, soft.top)])
    c.arrow([(cx, soft.bottom), (cx, soft.bottom + 20)])
    c.text(cx, soft.bottom + 38, "Output probabilities", 13, bold=True)
    return frame, subs[1], soft.bottom + 42


def _caption(c: Canvas, x: float, y: float, rows: Sequence[str]) -> None:
    """Left-aligned caption rows, the first one bold."""
    for i, row in enumerate(rows):
        c.text(
            x,
            y + 19 * i,
            row,
            13 if i == 0 else 12,
            anchor="start",
            bold=i == 0,
            fill=TEXT if i == 0 else MUTED,
        )


def figure1(
    N: int = 6, d_model: int = 512, h: int = 8, d_ff: int = 2048, norm_first: bool = False
) -> str:
    """The Transformer: encoder and decoder stacks of N layers, with their dimensions."""
    d_k = _fmt(d_model / h)
    attn = f"h = {h}, d_k = {d_k}"
    ff = f"Feed forward, d_ff = {d_ff}"
    variant = "pre-norm" if norm_first else "post-norm"
    c = Canvas(
        "The Transformer",
        f"The Transformer, {variant}: an encoder of N = {N} layers (multi-head self-attention "
        f"and a feed-forward network of width d_ff = {d_ff}) feeds every decoder layer's "
        f"encoder-decoder attention; the decoder of N = {N} layers ends in a linear layer and "
        f"softmax over the vocabulary. d_model = {d_model}, h = {h} heads, d_k = {d_k}.",
    )
    pe = _embedding(c, ENC_CX, 8, "Inputs", ["Input embedding × √d_model", f"d_model = {d_model}"])
    blocks = [(["Multi-head self-attention", attn], "attention"), ([ff], "ffn")]
    frame, _ = _layer(c, ENC_CX, pe + 18, pe, ENC_LANE, blocks, norm_first, "Encoder layer")
    c.text(frame.left - 4, frame.cy + 7, f"×{N}", 20, anchor="end", bold=True)
    out = _final_norm(c, ENC_CX, frame.bottom) if norm_first else frame.bottom
    memory_y = out + 24  # where the encoder output turns towards the decoder

    # Place the decoder so its encoder-decoder attention sits below the encoder output, so every
    # arrow in the figure points down or sideways: measure it on a scratch canvas first.
    scratch = Canvas("", "")
    _, cross0, _ = _decoder(scratch, 0, N, d_model, attn, ff, norm_first)
    dec_y0 = max(8.0, memory_y + 44 - cross0.cy)
    _, cross, bottom = _decoder(c, dec_y0, N, d_model, attn, ff, norm_first)

    c.line([(ENC_CX, out), (ENC_CX, memory_y), (MEMORY_LANE, memory_y)])
    c.arrow([(MEMORY_LANE, memory_y), (MEMORY_LANE, cross.cy), (cross.left, cross.cy)])
    c.text((ENC_CX + MEMORY_LANE) / 2, memory_y + 18, "Encoder output (memory)", 12, fill=MUTED)
    c.text((MEMORY_LANE + cross.left) / 2 - 4, cross.cy - 7, "K, V", 12, bold=True)
    # Q comes from above; its label goes left of that arrow, where no residual line runs.
    c.text(cross.cx - 6, cross.top - 1, "Q", 12, anchor="end", bold=True)

    if norm_first:
        rows = [
            "Pre-norm variant (norm_first=True):",
            "each sublayer computes x + Sublayer(LayerNorm(x)),",
            "and a final layer norm follows each stack.",
        ]
    else:
        rows = ["Post-norm, as in the paper:", "each sublayer computes LayerNorm(x + Sublayer(x))."]
    rows += [
        f"N = {N} layers per stack, d_model = {d_model},",
        f"h = {h} heads of d_k = d_v = {d_k}, d_ff = {d_ff}.",
        "Dropout on each sublayer's output is not drawn.",
    ]
    _caption(c, 20, max(cross.bottom + 40, bottom - 19 * len(rows) + 10), rows)
    return c.to_svg()


# --------------------------------------------------------------------------- figure 2


def figure2_scaled_dot_product() -> str:
    """Scaled dot-product attention: MatMul, scale, optional mask, softmax, MatMul with V."""
    c = Canvas(
        "Scaled dot-product attention",
        "Scaled dot-product attention: Q and K are multiplied, scaled by 1/√d_k, optionally "
        "masked, passed through a softmax over the keys, and the weights multiply V.",
    )
    steps = [
        (["MatMul", "Q K^{T}"], "linear", False),
        (["Scale", "× 1/√d_k"], "norm", False),
        (["Mask", "(optional)"], "plain", True),
        (["Softmax", "over keys"], "softmax", False),
        (["MatMul", "weights · V"], "linear", False),
    ]
    boxes = [
        c.box(74 + 128 * i, 66, 104, 56, rows, kind, dashed)
        for i, (rows, kind, dashed) in enumerate(steps)
    ]
    for a, b in zip(boxes[:-1], boxes[1:], strict=True):
        c.arrow([(a.right, a.cy), (b.left, b.cy)])
    first, last = boxes[0], boxes[-1]
    for name, y in (("Q", first.top + 16), ("K", first.bottom - 16)):
        c.text(30, y + 5, name, 14, bold=True)
        c.arrow([(42, y), (first.left, y)])
    c.text(30, 175, "V", 14, bold=True)
    c.arrow([(42, 170), (last.cx, 170), (last.cx, last.bottom)])
    c.arrow([(last.right, last.cy), (last.right + 34, last.cy)])
    c.text(last.right + 38, last.cy + 5, "Output", 13, anchor="start", bold=True)
    c.text(410, 214, "Attention(Q, K, V) = softmax(Q K^{T} / √d_k) V", 14, bold=True)
    c.text(
        410,
        236,
        "Masked scores are set to the lowest float before the softmax, so they get zero weight.",
        12,
        fill=MUTED,
    )
    return c.to_svg()


FAN_STEP, FAN_MAX = 5, 6  # offset between stacked copies, and at most this many drawn


def _fan(copies: int, drop: float) -> float:
    """How far right of a stacked box an arrow leaving it `drop` px below its top must start.

    Copies behind the box are shifted up, so only those still covering that height count.
    """
    return FAN_STEP * min(max(1, min(copies, FAN_MAX)) - 1, int(drop // FAN_STEP))


def _stacked(
    c: Canvas, x: float, y: float, w: float, h: float, copies: int, rows: list[str], kind: str
) -> Box:
    """A box with copies fanned out behind it (up to FAN_MAX), for h parallel heads."""
    for i in range(max(1, min(copies, FAN_MAX)) - 1, 0, -1):  # back to front, up and right
        c.rect(x + FAN_STEP * i, y - FAN_STEP * i, w, h, kind)
    return c.box(x, y, w, h, rows, kind)


def figure2_multi_head(h: int = 8, d_model: int = 512, d_k: int | None = None) -> str:
    """Multi-head attention: h projections of V, K, Q, h attentions, Concat, Linear."""
    dk = _fmt(d_model / h) if d_k is None else _fmt(d_k)
    concat = _fmt(h * float(dk))
    c = Canvas(
        "Multi-head attention",
        f"Multi-head attention with h = {h} heads: V, K and Q each go through h linear "
        f"projections from d_model = {d_model} to d_k = {dk}, h scaled dot-product attentions "
        f"run in parallel, their outputs are concatenated ({concat} values) and a final linear "
        f"layer maps them back to d_model = {d_model}.",
    )
    ys = {"V": 96, "K": 166, "Q": 236}  # centre lines of the three input rows
    c.text(116, 32, f"h = {h} projections each", 12, fill=MUTED)
    for name, y in ys.items():
        c.text(22, y + 5, name, 14, bold=True)
        lin = _stacked(c, 56, y - 22, 110, 44, h, ["Linear", f"{d_model} → {dk}"], "linear")
        c.arrow([(34, y), (lin.left, y)])
        c.arrow([(lin.right + _fan(h, y - lin.top), y), (232, y)])  # start past the copies
    att = _stacked(
        c, 232, 66, 170, 200, h, ["Scaled dot-product", "attention", f"h = {h} heads"], "attention"
    )
    c.text(att.cx + 12, 32, f"h = {h} heads in parallel", 12, fill=MUTED)
    cat = c.box(456, ys["K"] - 32, 104, 64, ["Concat", f"{h} × {dk} = {concat}"], "norm")
    c.arrow([(att.right + _fan(h, cat.cy - att.top), cat.cy), (cat.left, cat.cy)])
    out = c.box(594, ys["K"] - 32, 104, 64, ["Linear", f"{concat} → {d_model}"], "linear")
    c.arrow([(cat.right, cat.cy), (out.left, out.cy)])
    c.arrow([(out.right, out.cy), (out.right + 30, out.cy)])
    c.text(out.right + 34, out.cy + 5, "Output", 13, anchor="start", bold=True)
    if d_k is None:
        dims = f"d_k = d_v = d_model / h = {d_model} / {h} = {dk}"
    else:
        dims = f"d_k = d_v = {dk} (set directly; d_model = {d_model})"
    c.text(410, 304, dims, 14, bold=True)
    c.text(
        410,
        326,
        "Each head has its own projections, so each can attend to different positions.",
        12,
        fill=MUTED,
    )
    return c.to_svg()


# --------------------------------------------------------------------------- masks


def _mask_panel(
    c: Canvas,
    x: float,
    y: float,
    cell: float,
    allowed: list[list[bool]],
    title: str,
    note: str,
    pad_from: int | None,
) -> Box:
    """One labelled mask grid with its top-left label corner at (x, y); returns the grid box."""
    n = len(allowed)
    gx, gy = x + 44, y + 52
    c.text(gx + n * cell / 2, y + 13, title, 13, bold=True)
    c.text(gx + n * cell / 2, y + 32, "key position →", 12, fill=MUTED)
    step = max(1, math.ceil(16 / cell))  # index labels every `step` cells when cells are small
    for j in range(0, n, step):
        is_pad = pad_from is not None and j >= pad_from
        c.text(
            gx + (j + 0.5) * cell,
            gy - 6,
            str(j),
            12,
            fill=FAINT if is_pad else MUTED,
            italic=is_pad,
        )
        c.text(gx - 6, gy + (j + 0.5) * cell + 4, str(j), 12, anchor="end", fill=MUTED)
    c.text(x + 12, gy + n * cell / 2, "← query position", 12, fill=MUTED, vertical=True)
    for i, row in enumerate(allowed):
        for j, ok in enumerate(row):
            c.rect(
                gx + j * cell,
                gy + i * cell,
                cell,
                cell,
                "allowed" if ok else "blocked",
                rx=0,
                stroke_width=1,
            )
    grid = c.rect(gx, gy, n * cell, n * cell, "outline", rx=0)
    c.text(grid.cx, grid.bottom + 20, note, 12, fill=MUTED)
    return grid


def masks(length: int = 6, pad_from: int | None = 4) -> str:
    """Padding mask, subsequent (causal) mask and their combination, as the library makes them."""
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    n = length
    pad = n if pad_from is None else max(0, min(pad_from, n))
    tgt = torch.tensor([[1] * pad + [PAD] * (n - pad)])  # (1, n): a decoder input, padded
    padding = (tgt != PAD).unsqueeze(-2).expand(1, n, n)[0].tolist()  # (n, n) as in Batch
    causal = subsequent_mask(n)[0].tolist()
    both = Batch.make_tgt_mask(tgt, PAD)[0].tolist()
    if pad >= n:
        pad_note = "no padding: every key allowed"
    elif pad == n - 1:
        pad_note = f"key {pad} is padding"
    else:
        pad_note = f"keys {pad}–{n - 1} are padding"
    c = Canvas(
        "Attention masks",
        f"Three {n} by {n} masks, rows are query positions and columns key positions, filled "
        f"cells may attend: the padding mask ({pad_note}), the subsequent mask (query i may "
        "attend to keys j ≤ i) and their combination, which the decoder uses.",
    )
    cell = max(10.0, min(28.0, 168.0 / n))
    panel_w, op_w = 44 + n * cell, 40
    x = (COLUMN - 3 * panel_w - 2 * op_w) / 2
    panels = [
        (padding, "Padding mask", pad_note),
        (causal, "Subsequent mask", "query i sees keys j ≤ i"),
        (both, "Decoder mask", "both at once"),
    ]
    grid = Box(0, 0, 0, 0)
    for k, (allowed, title, note) in enumerate(panels):
        grid = _mask_panel(c, x, 8, cell, allowed, title, note, pad if pad < n else None)
        if k < 2:
            c.text(grid.right + op_w / 2, grid.cy + 8, "&" if k == 0 else "=", 22, bold=True)
        x = grid.right + op_w
    _legend_masks(c, grid.bottom + 44)
    return c.to_svg()


def _legend_masks(c: Canvas, y: float) -> None:
    """Legend: a filled cell may attend, an empty one is masked."""
    c.rect(150, y - 13, 16, 16, "allowed", rx=0)
    c.text(174, y, "filled = may attend (mask True)", 12, anchor="start")
    c.rect(420, y - 13, 16, 16, "blocked", rx=0)
    c.text(444, y, "empty = masked: weight 0 after the softmax", 12, anchor="start")


# --------------------------------------------------------------------------- padded batch

# German sentences from the Multi30k world, by number of words, so rows look like real data.
_SENTENCES = {
    1: "Hallo",
    2: "Kinder lachen",
    3: "Ein Mann läuft",
    4: "Zwei Hunde spielen .",
    5: "Zwei Hunde spielen im Schnee",
    6: "Ein Mann fährt ein Fahrrad .",
    7: "Eine Frau sitzt auf einer Bank .",
    8: "Ein Junge springt mit dem Rad über Steine",
    9: "Ein Mädchen in einem roten Kleid läuft am Strand",
}
_FILLER = "Eine Gruppe von Menschen steht vor einem großen Gebäude und wartet auf den Bus".split()


def _tokens(length: int) -> list[str]:
    """A plausible token sequence of exactly `length` tokens, with <s> and </s> when it fits."""
    if length <= 0:
        return []
    if length == 1:
        return ["<s>"]
    inner = length - 2
    words = (
        _SENTENCES[inner].split()
        if inner in _SENTENCES
        else [_FILLER[i % len(_FILLER)] for i in range(inner)]
    )
    return ["<s>", *words, "</s>"]


def _fit(token: str, width: float) -> str:
    """The token, shortened with an ellipsis if it does not fit `width` px at 12 px."""
    if text_width(token, 12) <= width:
        return token
    while token and text_width(token + "…", 12) > width:
        token = token[:-1]
    return token + "…" if len(token) >= 2 else ""


def padded_batch(lengths: Sequence[int] = (7, 5, 9, 3), pad: str = "<blank>") -> str:
    """A batch of sentences as rows of token cells, right-padded to the longest: shape (B, T)."""
    B, T = len(lengths), max(lengths, default=0)
    c = Canvas(
        "A padded batch",
        f"A batch of B = {B} sentences of lengths {', '.join(map(str, lengths))}, each "
        f"right-padded with {pad} to the longest, T = {T}: a tensor of shape (B, T) = ({B}, {T}).",
    )
    gx, gy, row_h = 150.0, 64.0, 34.0
    cell = max(14.0, min(72.0, (COLUMN - 20 - gx) / max(T, 1)))
    c.text(gx + T * cell / 2, 26, f"T = {T} positions (the longest sentence)", 13, bold=True)
    c.arrow([(gx + 2, 40), (gx + T * cell - 2, 40)], both=True, width=1.2)  # cells' outer edges
    for b, n in enumerate(lengths):
        y = gy + b * (row_h + 8)
        c.text(84, y + row_h / 2 + 4, f"length {n}", 12, anchor="start", fill=MUTED)
        toks = _tokens(n) + [pad] * (T - n)
        for t, tok in enumerate(toks):
            is_pad = t >= n
            c.rect(
                gx + t * cell + 2,
                y,
                cell - 4,
                row_h,
                "pad" if is_pad else "token",
                dashed=is_pad,
                rx=4,
            )
            c.text(
                gx + (t + 0.5) * cell,
                y + row_h / 2 + 4,
                _fit(tok, cell - 8),
                12,
                fill=MUTED if is_pad else TEXT,
                italic=is_pad,
            )
    bottom = gy + B * (row_h + 8) - 8
    c.arrow([(60, gy), (60, bottom)], both=True, width=1.2)
    c.text(40, (gy + bottom) / 2, f"B = {B} sentences", 13, bold=True, vertical=True)
    c.text(
        gx,
        bottom + 32,
        f"Shape (B, T) = ({B}, {T}). Pad cells hold the {pad} index and are "
        "masked out of attention and the loss.",
        12,
        anchor="start",
        fill=MUTED,
    )
    return c.to_svg()


# --------------------------------------------------------------------------- beam search

# Beam size 3 over 4 steps for "Ein Hund läuft im Park .": (token, parent index in the previous
# step, cumulative log-probability, kept in the beam). Index -1 is the start symbol.
DEFAULT_BEAM_STEPS: list[list[tuple[str, int, float, bool]]] = [
    [
        ("A", -1, -0.4, True),
        ("The", -1, -1.2, True),
        ("One", -1, -2.3, True),
        ("Dog", -1, -3.9, False),
    ],
    [
        ("dog", 0, -0.7, True),
        ("hound", 0, -2.6, False),
        ("dog", 1, -1.5, True),
        ("hound", 1, -3.1, False),
        ("dog", 2, -2.5, True),
        ("runs", 2, -4.8, False),
    ],
    [
        ("runs", 0, -1.0, True),
        ("is", 0, -2.0, True),
        ("runs", 2, -1.8, True),
        ("is", 2, -2.9, False),
        ("runs", 4, -2.8, False),
        ("walks", 4, -4.1, False),
    ],
    [
        ("in", 0, -1.2, True),
        ("through", 0, -2.4, False),
        ("running", 1, -2.3, True),
        ("in", 1, -3.3, False),
        ("in", 2, -2.1, True),
        ("through", 2, -3.0, False),
    ],
]

DEFAULT_BEAM_SOURCE = "Ein Hund läuft im Park ."
NODE_W, NODE_H, NODE_GAP = 112, 40, 10


def _check_beam(steps: Sequence[BeamStep], beam_size: int) -> None:
    """Reject structures that are not a beam search: bad parents or too many kept."""
    for k, step in enumerate(steps):
        kept = sum(1 for *_, ok in step if ok)
        if kept > beam_size:
            raise ValueError(f"step {k + 1} keeps {kept} hypotheses, more than {beam_size}")
        for token, parent, _, _ in step:
            if k == 0 and parent != -1:
                raise ValueError(f"step 1 token {token!r} must have parent -1 (the start)")
            if k > 0 and not (0 <= parent < len(steps[k - 1]) and steps[k - 1][parent][3]):
                raise ValueError(f"step {k + 1} token {token!r}: parent {parent} is not kept")


def _best_path(steps: Sequence[BeamStep]) -> set[tuple[int, int]]:
    """(step, index) of every node on the path to the best kept hypothesis at the last step."""
    if not steps:
        return set()
    kept = [i for i, n in enumerate(steps[-1]) if n[3]]
    if not kept:
        return set()
    i, path = max(kept, key=lambda j: steps[-1][j][2]), set()
    for k in range(len(steps) - 1, -1, -1):
        path.add((k, i))
        i = steps[k][i][1]
    return path


def _beam_node(
    c: Canvas, x: float, y: float, token: str, score: float, kept: bool, best: bool
) -> Box:
    """One hypothesis: its newest token and its cumulative score."""
    b = c.rect(
        x,
        y,
        NODE_W,
        NODE_H,
        "token" if kept else "plain",
        dashed=not kept,
        stroke_width=2.6 if best else 1.2,
        stroke=ACCENT if best else None,
    )
    c.text(b.cx, y + 17, token, 13, bold=kept, fill=TEXT if kept else FAINT)
    c.text(b.cx, y + 33, f"{score:.1f}".replace("-", "−"), 12, fill=MUTED if kept else FAINT)
    return b


def beam(
    steps: Sequence[BeamStep] | None = None, beam_size: int = 3, source: str | None = None
) -> str:
    """A beam-search tree: kept hypotheses solid, pruned ones dashed, the best path bold."""
    if steps is None:
        steps, source = DEFAULT_BEAM_STEPS, DEFAULT_BEAM_SOURCE if source is None else source
    _check_beam(steps, beam_size)
    best = _best_path(steps)
    c = Canvas(
        "Beam search",
        f"Beam search with beam size {beam_size} over {len(steps)} steps: at each step every kept "
        "hypothesis is extended, the candidates are ranked by total log-probability and only the "
        f"best {beam_size} are kept; pruned candidates are dashed, the best path is bold.",
    )
    tallest = max((len(s) for s in steps), default=1)
    mid = 70 + (tallest * (NODE_H + NODE_GAP) - NODE_GAP) / 2
    root = c.box(12, mid - NODE_H / 2, 80, NODE_H, ["<s>"], "token")
    prev = [root]
    for k, step in enumerate(steps):
        x = 140 + k * (NODE_W + 54)
        top = mid - (len(step) * (NODE_H + NODE_GAP) - NODE_GAP) / 2
        c.text(x + NODE_W / 2, 30, f"step {k + 1}", 13, bold=True)
        c.text(x + NODE_W / 2, 48, f"keep {sum(n[3] for n in step)} of {len(step)}", 12, fill=MUTED)
        boxes = []
        for i, (token, parent, score, kept) in enumerate(step):
            on_path = (k, i) in best
            node = _beam_node(c, x, top + i * (NODE_H + NODE_GAP), token, score, kept, on_path)
            src = prev[parent] if k else root
            color = ACCENT if on_path else (LINE if kept else FAINT)
            c.arrow(
                [(src.right, src.cy), (node.left, node.cy)],
                color=color,
                width=2.6 if on_path else 1.3,
                dashed=not kept,
            )
            boxes.append(node)
        prev = boxes
    _beam_legend(c, mid + (tallest * (NODE_H + NODE_GAP)) / 2 + 30, steps, best, source)
    return c.to_svg()


def _beam_legend(
    c: Canvas, y: float, steps: Sequence[BeamStep], best: set[tuple[int, int]], source: str | None
) -> None:
    """Legend for node styles and the best hypothesis read off the bold path."""
    c.rect(20, y - 13, 28, 18, "token", rx=4)
    c.text(56, y, "kept in the beam", 12, anchor="start")
    c.rect(190, y - 13, 28, 18, "plain", dashed=True, rx=4)
    c.text(226, y, "pruned", 12, anchor="start")
    c.line([(310, y - 4), (346, y - 4)], color=ACCENT, width=2.6)
    c.text(354, y, "best hypothesis so far", 12, anchor="start")
    c.text(560, y, "score = sum of log-probabilities", 12, anchor="start", fill=MUTED)
    words = [steps[k][i][0] for k, i in sorted(best)]
    if words:
        score = steps[-1][max(best)[1]][2]
        best_text = f"Best so far: {' '.join(words)} … ({score:.1f})".replace("-", "−")
        c.text(20, y + 28, best_text, 13, anchor="start", bold=True)
    if source:
        c.text(20, y + 50, f"Source: {source}", 12, anchor="start", fill=MUTED)


# --------------------------------------------------------------------------- the book's figures


def book_figures() -> dict[str, str]:
    """The SVG of every figure the book shows, by file name, drawn from the base configuration."""
    base = preset("base")
    return {
        "figure1.svg": figure1(base.N, base.d_model, base.h, base.d_ff, base.norm_first),
        "figure2-scaled-dot-product.svg": figure2_scaled_dot_product(),
        "figure2-multi-head.svg": figure2_multi_head(h=base.h, d_model=base.d_model),
        "padded-batch.svg": padded_batch(lengths=(7, 5, 9, 3)),
        "masks.svg": masks(length=6, pad_from=4),
        "beam.svg": beam(beam_size=3),
    }


def stale(images: Path = IMAGES) -> list[str]:
    """The figures whose file in `images` is missing or differs from what is drawn now."""
    return [
        name
        for name, svg in book_figures().items()
        if not (images / name).exists() or (images / name).read_text(encoding="utf-8") != svg
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    if parser.parse_args().check:
        for name in stale():
            print(f"nbs/images/{name} differs from what tools/diagrams.py draws: run it")
        return 1 if stale() else 0
    IMAGES.mkdir(exist_ok=True)
    for name, svg in book_figures().items():
        (IMAGES / name).write_text(svg, encoding="utf-8")
        print(f"wrote nbs/images/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
