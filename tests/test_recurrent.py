"""Tests for annotated_transformer.recurrent (Part 8) and `annotated-transformer train --arch`.

What is checked (beyond nbs/09_recurrent.ipynb, whose checks cover the attention score by hand, the
configuration's errors, the shapes, one step of the lexical model, and step-by-step decoding against
teacher forcing):
1. Masking: padding never receives attention, and padding a sentence further changes none of its
   outputs (the encoder reads each sentence to its own length), for every architecture and depth.
2. The lexical model: at every step its extra features are tanh(W f) + f, f being the
   attention-weighted average of the source embeddings.
3. Decoding: the recurrent decoder's steps equal teacher forcing, after `select` reorders and drops
   rows too; beam search with a beam of one returns greedy search's output, with banned tokens as
   well.
4. Training: train_epoch with label smoothing lowers the loss of each architecture on a toy task.
5. The command line: `train --arch lstm|lexical` with layer counts and `--train-pairs`, a checkpoint
   round trip (same weights, same configuration, evaluate and translate work), and one-line errors
   for flags that do not apply, a resumed run of another architecture, more training pairs than
   there are; `translate --attention` and `Translator.attention` draw a recurrent model's attention
   over the source.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from annotated_transformer.batching import Batch
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.fast_decoding import beam_search, greedy_search
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.pipeline import EpochOptions, train_epoch
from annotated_transformer.recurrent import ARCHS, RecurrentConfig, RecurrentEncoderDecoder
from annotated_transformer.training import Updates

DEPTHS = [(1, 1), (2, 3)]  # the baseline and the deeper variant


def build(
    arch: str, enc_layers: int = 1, dec_layers: int = 1, seed: int = 0
) -> RecurrentEncoderDecoder:
    torch.manual_seed(seed)
    return (
        RecurrentConfig(
            arch=arch, enc_layers=enc_layers, dec_layers=dec_layers, d_emb=16, d_hidden=24
        )
        .build(30, 31)
        .eval()
    )


def batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    "Three sources of different lengths, padded with 0, and their decoder inputs."
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 30, (3, 7), generator=g)
    src[:, 0], src[0, 6], src[1, 4], src[2, 2] = 1, 2, 2, 2
    src[1, 5:], src[2, 3:] = 0, 0
    tgt = torch.randint(3, 31, (3, 5), generator=g)
    tgt[:, 0] = 1
    return src, (src != 0).unsqueeze(-2), tgt


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("depth", DEPTHS)
@torch.no_grad()
def test_padding_gets_no_attention_and_changes_nothing(arch: str, depth: tuple[int, int]) -> None:
    model = build(arch, *depth)
    src, src_mask, tgt = batch()
    features, weights = model.run(src, tgt, src_mask)
    assert torch.all(weights.masked_select(~src_mask.expand_as(weights)) == 0)  # exact: masked
    longer = torch.cat(
        [src, torch.zeros(3, 4, dtype=src.dtype)], dim=1
    )  # four more padding positions
    features_longer, weights_longer = model.run(longer, tgt, (longer != 0).unsqueeze(-2))
    torch.testing.assert_close(features_longer, features)
    torch.testing.assert_close(weights_longer[..., :7], weights)


@pytest.mark.parametrize("depth", DEPTHS)
@torch.no_grad()
def test_the_lexical_context_is_the_attention_weighted_source_embeddings(
    depth: tuple[int, int],
) -> None:
    model = build("lexical", *depth)
    src, src_mask, tgt = batch()
    features, weights = model.run(src, tgt, src_mask)  # (B, T, H + E), (B, T, S)
    f = weights @ model.src_embed(src)  # (B, T, E): sum_s a_t(s) f_s
    torch.testing.assert_close(features[..., 24:], torch.tanh(model.lexical(f)) + f)
    plain = build("lstm", *depth)
    assert plain.run(src, tgt, src_mask)[0].size(-1) == 24  # the baseline has no lexical features


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("depth", DEPTHS)
@torch.no_grad()
def test_step_by_step_decoding_equals_teacher_forcing_after_reordering(
    arch: str, depth: tuple[int, int]
) -> None:
    model = build(arch, *depth)
    src, src_mask, tgt = batch()
    teacher = model.generator(model(src, tgt, src_mask))  # (B, T, V)
    decoder = model.begin_decoding(src, src_mask)
    torch.testing.assert_close(decoder.step(tgt[:, 0]), teacher[:, 0])
    rows = torch.tensor([2, 0])  # reorder and drop a row, as beam search does
    decoder.select(rows)
    for t in range(1, tgt.size(1)):
        torch.testing.assert_close(decoder.step(tgt[rows, t]), teacher[rows, t])


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_a_beam_of_one_is_greedy_search(arch: str) -> None:
    model = build(arch, 2, 3)
    src, src_mask, _ = batch()
    for banned in [(), (3, 4, 5)]:
        greedy = greedy_search(model, src, src_mask, 9, 1, 2, banned=banned)
        beams = beam_search(model, src, src_mask, 9, 1, 2, beam_size=1, alpha=0.0, banned=banned)
        assert [b[0].tokens for b in beams] == [g.tokens for g in greedy]
        assert [b[0].score for b in beams] == pytest.approx([g.score for g in greedy], abs=1e-5)


def test_decoding_needs_eval_mode() -> None:
    src, src_mask, _ = batch()
    with pytest.raises(ValueError, match="call model.eval"):
        build("lstm").train().begin_decoding(src, src_mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_train_epoch_trains_every_architecture(arch: str) -> None:
    torch.manual_seed(0)
    model = RecurrentConfig(arch=arch, d_emb=16, d_hidden=32, dropout=0.0).build(12, 12)
    data = torch.randint(3, 12, (16, 6))
    data[:, 0] = 1
    batches = [Batch(data, data, pad=0)]  # the copy task
    criterion = sequence_loss(LabelSmoothing(12, padding_idx=0, smoothing=0.1), model.generator)
    updates = Updates(torch.optim.Adam(model.parameters(), lr=0.01))
    quiet = EpochOptions(progress=False)
    before, _ = train_epoch(batches, model, criterion, options=quiet)
    for _ in range(100):
        train_epoch(batches, model, criterion, updates, options=quiet)
    after, _ = train_epoch(batches, model, criterion, options=quiet)
    assert after < 0.5 * before, (before, after)


# =============================================================================== the command line
TRAIN = ["--max-tokens", "400", "--warmup", "20", "--quiet", "--epochs", "1"]


def train(out: Path, data_dir: Path, *flags: str) -> int:
    "`annotated-transformer train --out OUT --data-dir DATA_DIR FLAGS`: its exit status."
    return main(["train", "--out", str(out), "--data-dir", str(data_dir), *flags])


def translate(checkpoint: Path, *flags: str) -> int:
    "`annotated-transformer translate --checkpoint CHECKPOINT FLAGS`: its exit status."
    return main(["translate", "--checkpoint", str(checkpoint), *flags])


def test_train_a_deeper_lexical_model_and_use_its_checkpoint(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "lexical"
    assert (
        train(
            out,
            data_dir,
            "--arch",
            "lexical",
            "--enc-layers",
            "2",
            "--dec-layers",
            "3",
            "--train-pairs",
            "100",
            *TRAIN,
        )
        == 0
    )
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt.config.model.arch == "lexical" and ckpt.config.train_pairs == 100
    model = ckpt.build_model()
    assert isinstance(model, RecurrentEncoderDecoder) and (
        model.config.enc_layers,
        model.config.dec_layers,
    ) == (2, 3)
    assert (
        model.encoder.num_layers == 2
        and model.decoder.num_layers == 3
        and model.lexical is not None
    )
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, ckpt.model[name])
    capsys.readouterr()
    assert translate(out / "last.pt", "--beam", "2", "Ein Hund sieht einen Ball.") == 0
    assert capsys.readouterr().out.strip()
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out / "last.pt"),
                "--data-dir",
                str(data_dir),
                "--split",
                "val",
                "--quiet",
            ]
        )
        == 0
    )
    assert "BLEU" in capsys.readouterr().out
    assert train(out, data_dir, "--resume", "--quiet", "--epochs", "2") == 0
    assert load_checkpoint(out / "last.pt").epoch == 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--arch", "lstm", "--model", "small"],
            "--model chooses a Transformer's size: it does not apply to --arch lstm",
        ),
        (["--enc-layers", "2"], "--enc-layers and --dec-layers size a recurrent model"),
        (
            ["--arch", "transformer", "--dec-layers", "3"],
            "--enc-layers and --dec-layers size a recurrent model",
        ),
        (["--arch", "gru"], "arch must be one of transformer, lstm, lexical, got arch='gru'"),
    ],
)
def test_flags_that_do_not_apply_are_usage_errors(
    flags: list[str], message: str, tmp_path: Path, capsys
) -> None:
    try:
        status = main(["train", "--out", str(tmp_path / "run"), *flags, *TRAIN])
    except SystemExit as stop:  # argparse's own errors
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_run_of_one_architecture_is_not_resumed_as_another(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert train(out, data_dir, "--model", "tiny", "--train-pairs", "60", *TRAIN) == 0
    capsys.readouterr()
    assert train(out, data_dir, "--resume", "--arch", "lstm", *TRAIN) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("holds a transformer model, not a lstm one") and "\n" not in err


def test_more_training_pairs_than_there_are_is_refused(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    assert (
        train(tmp_path / "run", data_dir, "--arch", "lstm", "--train-pairs", "100000", *TRAIN) == 1
    )
    assert "train_pairs=100,000 is more than the" in capsys.readouterr().err


def test_translate_saves_a_recurrent_model_s_attention(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert train(out, data_dir, "--arch", "lstm", "--train-pairs", "60", *TRAIN) == 0
    capsys.readouterr()
    assert translate(out / "last.pt", "--attention", str(tmp_path / "a.png"), "Ein Hund.") == 0
    assert "attention of layer 0 saved to" in capsys.readouterr().err
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        translate(
            out / "last.pt", "--attention", str(tmp_path / "b.png"), "--layer", "1", "Ein Hund."
        )
        == 2
    )
    assert "--layer 1 is out of range: the model has 1 layers" in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()


def test_the_attention_of_a_recurrent_model_is_its_attention_over_the_source() -> None:
    # Translator.attention takes the maps a recurrent model collects itself: one layer, one head,
    # over the source
    from annotated_transformer.data import SPECIALS, SpacyTokenizer, Vocab
    from annotated_transformer.figures import AttentionView
    from annotated_transformer.translator import Translator

    src_vocab, tgt_vocab = (
        Vocab([*SPECIALS, "Ein", "Hund", "läuft", "."]),
        Vocab([*SPECIALS, "A", "dog", "runs", "."]),
    )
    torch.manual_seed(0)
    model = (
        RecurrentConfig(arch="lexical", d_emb=8, d_hidden=12)
        .build(len(src_vocab), len(tgt_vocab))
        .train()
    )
    words = SpacyTokenizer("de"), SpacyTokenizer("en")
    translator = Translator(model, src_vocab, tgt_vocab, *words)
    maps = translator.attention("Ein Hund läuft.", translation=["A", "dog", "runs", "."])
    assert not model.training  # the maps are dropout-free
    assert (maps.src_tokens, maps.tgt_tokens) == (
        ["<s>", "Ein", "Hund", "läuft", ".", "</s>"],
        ["<s>", "A", "dog", "runs", "."],
    )
    src, tgt = torch.tensor([[0, 4, 5, 6, 7, 1]]), torch.tensor([[0, 4, 5, 6, 7]])
    assert list(maps.weights) == maps.kinds == ["decoder_src"]
    torch.testing.assert_close(
        maps.weights["decoder_src"],
        model.run(src, tgt, torch.ones(1, 1, 6, dtype=torch.bool))[1][None],
    )
    # the interactive view offers the one kind there is
    page = AttentionView([maps]).to_html()
    assert '<option value="decoder_src">' in page and '<option value="encoder">' not in page
