"""Tests for annotated_transformer.figures and visualization, and `translate --attention`.

What is checked (beyond nbs/08_attention.ipynb, whose checks cover the shapes, row sums and
causality of the weights, the removed hooks, each plotting helper, and the errors for bad indices,
kinds, labels and sentences):
1. The weights are the model's: the first encoder layer's self-attention recomputed by hand from its
   projections.
2. A sentence's maps (`Translator.attention`): the tokens of both sides, and a translation given
   instead of the model's; `AttentionView` offers the kinds the maps hold.
3. The heatmaps show those weights: every cell of every head of every layer equals the weight, with
   the query tokens on the rows and the key tokens on the columns, in token order, for each kind of
   attention.
4. `translate --attention` writes a PNG per sentence (its errors: tests/test_cli.py).
5. What the attention chapter measures: `head_measures` on a sentence's maps against the weights
   they average, `plot_measures` readable at the column's width, and `Translator.attention`
   refusing what it cannot show (an empty sentence, one too long).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from synthetic import synthetic_pairs

from annotated_transformer.cli import main
from annotated_transformer.config import RuntimeOptions, TrainConfig
from annotated_transformer.data import InMemory
from annotated_transformer.figures import (
    KINDS,
    AttentionMaps,
    AttentionView,
    attention_weights,
    plot_attention,
    plot_measures,
    plot_sentence,
)
from annotated_transformer.model import ModelConfig
from annotated_transformer.pipeline import train
from annotated_transformer.translator import Translator
from annotated_transformer.visualization import head_measures

SENTENCE = "Ein Hund sieht einen Ball im Park."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small model trained for two epochs on the synthetic pairs (tests/synthetic.py): 2 layers, 4
    heads."""
    pairs = synthetic_pairs()
    out = tmp_path_factory.mktemp("run")
    config = TrainConfig(
        model=ModelConfig(N=2, d_model=32, d_ff=64, h=4, dropout=0.0),
        epochs=2,
        max_tokens=400,
        warmup=10,
    )
    train(
        out,
        config,
        corpus=InMemory(train=pairs[:160], val=pairs[160:176]),
        options=RuntimeOptions(progress=False),
        log=lambda _: None,
    )
    return out / "last.pt"


@pytest.fixture(scope="module")
def translator(checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(checkpoint)


@pytest.fixture(scope="module")
def maps(translator: Translator) -> AttentionMaps:
    return translator.attention(SENTENCE)


# =========================================================================== 1. the model's weights
@pytest.mark.parametrize("norm_first", [False, True])
def test_the_first_encoder_layer_matches_a_computation_by_hand(norm_first: bool) -> None:
    torch.manual_seed(0)
    model = ModelConfig(N=2, d_model=32, d_ff=64, h=4, norm_first=norm_first).build(11, 13).eval()
    src, tgt = torch.tensor([[1, 5, 6, 7, 8, 2]]), torch.tensor([[1, 9, 10]])
    weights = attention_weights(model, src, tgt, pad=0)
    layer = model.encoder.layers[0]
    with torch.no_grad():
        x = model.src_embed(src)  # (1, S, D)
        x = layer.sublayer[0].norm(x) if norm_first else x  # what the attention sees
        attn = layer.self_attn
        q, k, _ = attn.heads(x, x, x)  # (1, h, S, d_k)
        expected = (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).softmax(-1)[0]  # (h, S, S)
    torch.testing.assert_close(weights["encoder"][0], expected, atol=1e-6, rtol=1e-5)


# =========================================================================== 2. a sentence's maps
def test_the_tokens_and_a_given_translation(translator: Translator, maps: AttentionMaps) -> None:
    assert maps.src_tokens == [
        "<s>",
        "Ein",
        "Hund",
        "sieht",
        "einen",
        "Ball",
        "im",
        "Park",
        ".",
        "</s>",
    ]
    # the decoder's input
    assert maps.tgt_tokens == ["<s>", *translator.translate([SENTENCE])[0]]
    assert maps.kinds == list(KINDS) and maps.axes("decoder_src") == (
        maps.tgt_tokens,
        maps.src_tokens,
    )
    given = ["A", "dog", "."]
    other = translator.attention(SENTENCE, translation=given)
    assert other.tgt_tokens == ["<s>", *given]
    assert other.weights["decoder_src"].shape[2] == 4
    torch.testing.assert_close(
        other.weights["encoder"], maps.weights["encoder"]
    )  # the source side does not change


# =========================================================================== 3. the heatmaps
@pytest.mark.parametrize("kind", list(KINDS))
def test_heatmap_cells_are_the_weights_with_tokens_in_order(kind: str, maps: AttentionMaps) -> None:
    rows, cols = maps.axes(kind)
    for layer in range(2):
        fig = plot_attention(maps, kind, layer=layer)
        heatmaps = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert len(heatmaps) == 4 and len(fig.axes) == 5  # and one colour bar
        for head, ax in enumerate(heatmaps):
            cells = torch.tensor(ax.collections[0].get_array()).reshape(len(rows), len(cols))
            torch.testing.assert_close(cells, maps.weights[kind][layer, head])
            assert [t.get_text() for t in ax.get_yticklabels()] == rows  # queries down the side
            assert [t.get_text() for t in ax.get_xticklabels()] == cols  # keys along the bottom
            assert ax.get_title() == f"head {head}"


@pytest.mark.parametrize("words", [3, 12, 40])
def test_every_figure_fits_the_column_with_labels_of_10_px(words: int) -> None:
    "At most four heads a row, the figure within the column (never shrunk), labels >= 10 px."
    torch.manual_seed(0)
    model = ModelConfig(N=1, d_model=32, d_ff=64, h=8, dropout=0.0).build(9, 9).eval()
    src, tgt = torch.randint(3, 9, (1, words + 2)), torch.randint(3, 9, (1, words + 1))
    weights = attention_weights(model, src, tgt, pad=0)
    tokens = ["<s>", *[f"w{i}" for i in range(words)], "</s>"]
    maps = AttentionMaps(tokens, tokens[:-1], weights)
    for fig in (plot_attention(maps, "encoder", layer=0), plot_sentence(maps, 0)):
        assert fig.get_size_inches()[0] <= 8.2  # 820 px at 100 dpi: the book's column
        heatmaps = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        rows = Counter(round(ax.get_position().y0, 3) for ax in heatmaps)  # maps per row
        assert max(rows.values()) <= 4
        labels = heatmaps[0].get_yticklabels()
        assert labels and min(t.get_fontsize() for t in labels) * fig.dpi / 72 >= 10
        assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


# =========================================================================== 4. the console command
def test_translate_saves_attention_pngs(checkpoint: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "maps" / "attention.png"
    argv = ["translate", "--checkpoint", str(checkpoint), "--attention", str(out)]
    assert main([*argv, SENTENCE]) == 0
    printed, err = capsys.readouterr()
    assert len(printed.splitlines()) == 1  # the translation
    assert err == f"attention of layer 1 saved to {out}\n"  # the last layer by default
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv, "--layer", "0", SENTENCE, "Ein Mann hat ein Auto."]) == 0
    names = ["attention-1.png", "attention-2.png"]
    assert sorted(p.name for p in out.parent.iterdir()) == [*names, "attention.png"]
    printed, err = capsys.readouterr()
    assert len(printed.splitlines()) == 2
    assert err.splitlines() == [f"attention of layer 0 saved to {out.parent / n}" for n in names]
    assert (out.parent / names[1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_interactive_view_offers_the_kinds_and_tokens_of_the_maps(maps: AttentionMaps) -> None:
    page = AttentionView([maps]).to_html()
    for kind in KINDS:
        assert f'<option value="{kind}">' in page
    data = page.split('class="av-data">')[1].split("</script>")[0]
    assert all(json.dumps(token) in data for token in maps.src_tokens[1:-1])
    source_only = {"decoder_src": maps.weights["decoder_src"]}  # as a recurrent model's maps
    page = AttentionView([AttentionMaps(maps.src_tokens, maps.tgt_tokens, source_only)]).to_html()
    assert '<option value="decoder_src">' in page and '<option value="encoder">' not in page


# ================================================================ 5. what the chapter measures
def test_head_measures_average_the_weights_they_name(maps: AttentionMaps) -> None:
    measures = head_measures(maps.weights)
    encoder, decoder = maps.weights["encoder"], maps.weights["decoder_self"]
    N, h, S, _ = encoder.shape
    for layer in range(N):
        for head in range(h):
            w = encoder[layer, head]
            previous = sum(w[i, i - 1] for i in range(1, S)) / (S - 1)
            assert measures["encoder: previous token"][layer, head] == pytest.approx(previous)
            assert measures["decoder: <s>"][layer, head] == pytest.approx(
                decoder[layer, head, :, 0].mean()
            )
    assert all(v is None or (0 <= v.min() and v.max() <= 1) for v in measures.values())


def test_the_measures_figure_fits_the_column_with_numbers_of_10_px() -> None:
    "Two tables a row at the column's width: the numbers as large as the token labels."
    profile = {name: torch.rand(3, 8) for name in ("a", "b", "c", "d", "e")}
    fig = plot_measures(profile, dict.fromkeys(profile, 0.1))
    assert fig.get_size_inches()[0] <= 8.2
    fig.canvas.draw()
    numbers = [t for ax in fig.axes for t in ax.texts]
    assert len(numbers) == 5 * 3 * 8 and min(t.get_fontsize() for t in numbers) * fig.dpi / 72 >= 10
    width = fig.get_size_inches()[0] * fig.dpi
    for ax in fig.axes[:5]:  # no title wider than its place
        box = ax.title.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= width


def test_attention_refuses_what_it_cannot_show(translator: Translator) -> None:
    with pytest.raises(ValueError, match="too long for this model"):
        translator.attention("Hund " * 5000)
    with pytest.raises(ValueError, match="is empty"):
        translator.attention("  ")
