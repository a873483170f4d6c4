"""The change plan "rotary positions", carried out end to end: one entry in `model.POSITIONS` (the
kind's name, what it adds to the embeddings, and its self-attention) and the attention's code; the
rest follows from the table. A configuration names the kind (`positions = "rotary"` in a config
file); the command line trains it (subwords and tied embeddings, so that every exporter but for
the positions could write it); the checkpoint records it and builds it back; the command line
translates with it, step by step through the cache; and each exporter that cannot write it
refuses it in one line.

The rotary attention is tests/test_model.py's: `MultiHeadedAttention` with `heads` overridden to
rotate queries and keys by their positions (`start` is the step's, in incremental decoding).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from clitools import one_error_line
from test_model import RotaryAttention

from annotated_transformer import model as model_module
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.fast_decoding import Search
from annotated_transformer.model import (
    ModelConfig,
    MultiHeadedAttention,
    PositionalEncoding,
    Positions,
)
from annotated_transformer.translator import Translator

CONFIG = """
epochs = 2
max_tokens = 400
warmup = 20
vocab_size = 300

[model]
N = 1
d_model = 32
d_ff = 64
h = 4
norm_first = true
share_embeddings = true
positions = "rotary"
"""


def no_table(d_model: int, dropout: float, max_len: int) -> PositionalEncoding:
    "Nothing added to the embeddings (a table of zeros): rotary positions act inside attention."
    position = PositionalEncoding(d_model, dropout, max_len)
    position.pe.zero_()
    return position


@pytest.fixture
def rotary(monkeypatch: pytest.MonkeyPatch) -> None:
    "The table with one more kind: the whole of the change."
    monkeypatch.setitem(model_module.POSITIONS, "rotary", Positions(no_table, RotaryAttention))


@pytest.fixture
def rotary_run(rotary, synthetic_corpus: Path, tmp_path: Path) -> Path:
    "A tiny rotary model trained through the command line: its checkpoint."
    config = tmp_path / "rotary.toml"
    config.write_text(CONFIG)
    argv = ["train", "--out", str(tmp_path / "run"), "--config", str(config), "--quiet"]
    assert main([*argv, "--data-dir", str(synthetic_corpus)]) == 0
    return tmp_path / "run" / "last.pt"


def test_a_configuration_names_the_kind(rotary) -> None:
    model = ModelConfig(N=1, d_model=32, d_ff=64, h=4, positions="rotary").build(11, 11)
    layer = model.decoder.layers[0]
    assert type(model.encoder.layers[0].self_attn) is RotaryAttention
    assert type(layer.self_attn) is RotaryAttention and type(layer.src_attn) is MultiHeadedAttention
    assert not model.tgt_embed[1].pe.any()  # nothing added: the positions are in attention


def test_the_kind_is_trained_saved_and_built_back(rotary_run: Path) -> None:
    ckpt = load_checkpoint(rotary_run)
    assert ckpt.config.model.positions == "rotary" and ckpt.epoch == 2
    model = ckpt.build_model()
    assert type(model.decoder.layers[0].self_attn) is RotaryAttention
    translator = Translator(model, ckpt.src_vocab, ckpt.tgt_vocab, *ckpt.tokenizers())
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    greedy, beam = (translator.translate(sentences, s) for s in (Search(), Search(beam_size=3)))
    assert all(greedy) and all(beam)  # the cached, batched searches decode it step by step


def test_the_command_line_translates_with_it(rotary_run: Path, capsys) -> None:
    assert main(["translate", "--checkpoint", str(rotary_run), "Ein Mann fährt Fahrrad."]) == 0
    translator = Translator.from_checkpoint(rotary_run)
    expected = translator.detokenize(translator.translate(["Ein Mann fährt Fahrrad."])[0])
    assert capsys.readouterr().out == expected + "\n"


@pytest.mark.parametrize(
    "format, said",
    [
        ("ctranslate2", "rotary positions cannot be exported: CTranslate2 adds a table"),
        ("transformers", "its positions are rotary; Marian and Pegasus compute sinusoidal ones"),
    ],
)
def test_an_exporter_that_cannot_write_it_refuses_it_in_one_line(
    rotary_run: Path, tmp_path: Path, capsys, format: str, said: str
) -> None:
    out = tmp_path / "export"
    argv = ["export", "--checkpoint", str(rotary_run), "--out", str(out), "--format", format]
    assert main(argv) == 2
    assert said in one_error_line(capsys.readouterr().err, "export")
    assert not out.exists()


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^positions must be 'sinusoidal' or 'learned', got"):
        ModelConfig(positions="rotary")
    assert torch.is_tensor(PositionalEncoding(8, 0.0, 10).pe)
