"""Tests for annotated_transformer.visualization and `annotated-transformer translate --attention`.

What is checked (beyond nbs/07_visualization.ipynb, whose checks cover the shapes, row sums and causality of the
weights, the removed hooks, each plotting helper, and the errors for bad indices, kinds, labels and sentences):
1. The weights are the model's: the first encoder layer's self-attention recomputed by hand from its projections.
2. A sentence's maps: the tokens of both sides, and a translation given instead of the model's.
3. The heatmaps show those weights: every cell of every head of every layer equals the weight, with the query tokens
   on the rows and the key tokens on the columns, in token order, for each kind of attention.
4. `translate --attention` writes a PNG per sentence; bad input gets one-line errors.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from synthetic import synthetic_pairs

from annotated_transformer.checkpoint import load_checkpoint, model_from_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.model import ModelConfig
from annotated_transformer.trainer import TrainConfig, train
from annotated_transformer.translation import translate
from annotated_transformer.visualization import (
    KINDS,
    AttentionMaps,
    attention_weights,
    plot_attention,
    sentence_attention,
)

SENTENCE = "Ein Hund sieht einen Ball im Park."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "A small model trained for two epochs on the synthetic pairs (tests/synthetic.py): 2 layers, 4 heads."
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
        pairs={"train": pairs[:160], "val": pairs[160:176]},
        progress=False,
        log=lambda _: None,
    )
    return out / "last.pt"


@pytest.fixture(scope="module")
def trained(checkpoint: Path):
    return model_from_checkpoint(load_checkpoint(checkpoint))


@pytest.fixture(scope="module")
def maps(trained) -> AttentionMaps:
    model, src_vocab, tgt_vocab = trained
    return sentence_attention(model, SENTENCE, src_vocab, tgt_vocab)


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
        q, k = attn.split_heads(attn.w_q(x)), attn.split_heads(attn.w_k(x))  # (1, h, S, d_k)
        expected = (q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)).softmax(-1)[0]  # (h, S, S)
    torch.testing.assert_close(weights["encoder"][0], expected, atol=1e-6, rtol=1e-5)


# =========================================================================== 2. a sentence's maps
def test_the_tokens_and_a_given_translation(trained, maps: AttentionMaps) -> None:
    model, src_vocab, tgt_vocab = trained
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
    assert maps.tgt_tokens == [
        "<s>",
        *translate(model, [SENTENCE], src_vocab, tgt_vocab)[0],
    ]  # the decoder's input
    given = ["A", "dog", "."]
    other = sentence_attention(model, SENTENCE, src_vocab, tgt_vocab, translation=given)
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
        assert len(fig.axes) == 4
        for head, ax in enumerate(fig.axes):
            cells = torch.tensor(ax.collections[0].get_array()).reshape(len(rows), len(cols))
            torch.testing.assert_close(cells, maps.weights[kind][layer, head])
            assert [t.get_text() for t in ax.get_yticklabels()] == rows  # queries down the side
            assert [t.get_text() for t in ax.get_xticklabels()] == cols  # keys along the bottom
            assert ax.get_title() == f"head {head}"


# =========================================================================== 4. the console command
def test_translate_saves_attention_pngs(checkpoint: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "maps" / "attention.png"
    assert (
        main(["translate", "--checkpoint", str(checkpoint), "--attention", str(out), SENTENCE]) == 0
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(checkpoint),
                "--attention",
                str(out),
                "--layer",
                "0",
                SENTENCE,
                "Ein Mann hat ein Auto.",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "attention-1.png",
        "attention-2.png",
        "attention.png",
    ]
    capsys.readouterr()
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(checkpoint),
                "--attention",
                str(out),
                "--layer",
                "7",
                SENTENCE,
            ]
        )
        == 2
    )
    assert "layer 7 is out of range" in capsys.readouterr().err
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(checkpoint),
                "--attention",
                str(tmp_path / "x.jpg"),
                SENTENCE,
            ]
        )
        == 2
    )
    assert "--attention needs a .png file name" in capsys.readouterr().err
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(checkpoint),
                "--attention",
                str(out),
                "The dog sees a ball.",
            ]
        )
        == 1
    )
    assert "is the sentence in the language the model translates from" in capsys.readouterr().err
