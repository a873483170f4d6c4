"""`export --format onnx` (annotated_transformer.engines, the last section of
nbs/22_engines.ipynb) and its reader `OnnxModel`, on a tiny subword run of made-up files (three
epochs: after one, a tiny model's next words are near-ties that int8's rounding tips either way).

What is checked (beyond the chapter, which checks a random model's graphs at untraced lengths and
the chapters' trained model on test2016):
1. Exactness: onnxruntime's greedy search through the float32 folder writes our tokens for every
   sentence, its source ids are ours, and its attention weights are ours within 1e-4; int8 writes
   smaller graphs whose translations are mostly ours.
2. The folder: the files, a tokenizer.json whose ids are ours (Hugging Face's tokenizers) with a
   typed "<s>" read as text, settings that name the special ids, and the export's marker.
3. Refusals in one line, before anything is written: a word-level run, a recurrent run, a
   quantization ONNX has not, an existing --out; --overwrite replaces only an export; translate
   refuses the folder; a tampered config.json field or a graph that is a link is refused by the
   reader.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")

from clitools import TINY_RUN, cli, own_file_args, refused

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.engines import GRAPHS, ONNX_FILES, OnnxModel, export_format, export_model
from annotated_transformer.figures import attention_weights
from annotated_transformer.translator import Translator

SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee vor einem großen Haus.",
    "Eine Frau trägt eine rote Tasche.",
    "Kinder spielen.",
    "Ein Mann ▁ mit 123 Äpfeln!",
]


@pytest.fixture(scope="module")
def onnx_run(own_corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    "A subword run of the made-up files, three epochs, exported to ONNX in both precisions."
    from annotated_transformer.cli import main

    run = tmp_path_factory.mktemp("runs") / "onnx"
    argv = ["train", "--out", str(run), *own_file_args(own_corpus), "--vocab-size", "400"]
    assert main([*argv, *TINY_RUN, "--epochs", "3"]) == 0
    ckpt = load_checkpoint(run / "last.pt")
    out = tmp_path_factory.mktemp("onnx")
    folders = {q: export_model(ckpt, out / q, q, format="onnx") for q in ("float32", "int8")}
    return {"ckpt": ckpt, **folders}


def test_float32_greedy_search_writes_our_tokens_and_attention(onnx_run: dict) -> None:
    ckpt, model = onnx_run["ckpt"], OnnxModel.from_dir(onnx_run["float32"])
    ours = Translator.from_checkpoint(ckpt)
    ids = [model.source_ids(s) for s in SENTENCES]
    tokens = ours.src_tokenizer.tokenize(SENTENCES)
    assert ids == [ckpt.src_vocab.encode_sentence(t) for t in tokens]
    found = [model.greedy(i) for i in ids]
    eos = ckpt.tgt_vocab.eos
    assert [[ckpt.tgt_vocab.itos[i] for i in f if i != eos] for f in found] == ours.translate(
        SENTENCES
    )
    src, tgt = torch.tensor([ids[1]]), torch.tensor([[ckpt.tgt_vocab.bos, *found[1][:-1]]])
    expected = attention_weights(ckpt.build_model(), src, tgt, ckpt.src_vocab.pad)
    weights = model.attention(ids[1], found[1][:-1])
    for kind, w in expected.items():
        assert weights[kind] == pytest.approx(w.numpy(), abs=1e-4), kind


def test_int8_is_smaller_and_mostly_ours(onnx_run: dict) -> None:
    size = {q: sum((onnx_run[q] / g).stat().st_size for g in GRAPHS) for q in ("float32", "int8")}
    assert size["int8"] < 0.9 * size["float32"]
    float32, int8 = (OnnxModel.from_dir(onnx_run[q]) for q in ("float32", "int8"))
    ids = [float32.source_ids(s) for s in SENTENCES]
    same = sum(float32.greedy(i) == int8.greedy(i) for i in ids)
    assert same >= len(SENTENCES) - 2


def test_the_folder_and_its_tokenizer(onnx_run: dict) -> None:
    from tokenizers import Tokenizer

    folder, ckpt = onnx_run["float32"], onnx_run["ckpt"]
    assert export_format(folder) == "onnx"
    info = json.loads((folder / "annotated_transformer.json").read_text())
    assert set(info["files"]) == {*ONNX_FILES, "annotated_transformer.json", "README.md"}
    assert set(os.listdir(folder)) == set(info["files"])
    settings = json.loads((folder / "config.json").read_text())
    vocab = ckpt.tgt_vocab
    assert (settings["bos"], settings["eos"], settings["pad"]) == (vocab.bos, vocab.eos, vocab.pad)
    assert vocab.unk in settings["banned"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = OnnxModel.from_dir(folder)
    texts = [*SENTENCES[:4], "<s> Hallo </s>", "  zwei  Leerzeichen ", "Käse ☃ 漢字", ""]
    assert [tokenizer.encode(t).ids for t in texts] == [model.source_ids(t) for t in texts]


def test_what_cannot_be_exported_is_refused_before_writing(
    tiny_checkpoint: Path, own_run: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "onnx"
    err = refused(["export", "--checkpoint", str(tiny_checkpoint), "--out", str(out),
                   "--format", "onnx"], 2, capsys)  # fmt: skip
    assert "needs a subword run" in err
    err = refused(["export", "--checkpoint", str(own_run / "last.pt"), "--out", str(out),
                   "--format", "onnx", "--quantization", "int8_float32"], 2, capsys)  # fmt: skip
    assert "--format onnx writes float32 or int8" in err
    assert not out.exists()


def test_overwrite_replaces_only_an_export(onnx_run: dict, own_run: Path, tmp_path: Path) -> None:
    last = str(own_run / "last.pt")
    out = tmp_path / "onnx"
    assert (
        cli("export", "--checkpoint", last, "--out", str(out), "--format", "onnx").returncode == 0
    )
    again = cli("export", "--checkpoint", last, "--out", str(out), "--format", "onnx")
    assert again.returncode == 2 and "exists" in again.stderr
    (out / "notes.txt").write_text("mine")
    kept = cli("export", "--checkpoint", last, "--out", str(out), "--format", "onnx", "--overwrite")
    assert kept.returncode == 2 and "notes.txt" in kept.stderr
    (out / "notes.txt").unlink()
    done = cli("export", "--checkpoint", last, "--out", str(out), "--format", "onnx", "--overwrite")
    assert done.returncode == 0, done.stderr
    translate = cli("translate", "--checkpoint", str(out), "Ein Mann.")
    assert translate.returncode == 2 and "model folder for onnx" in translate.stderr


def test_the_reader_checks_each_file(onnx_run: dict, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(onnx_run["float32"], folder)
    settings = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, "eos": 10**9}))
    with pytest.raises(ValueError, match="config.json: field 'eos' is 1000000000"):
        OnnxModel.from_dir(folder)
    (folder / "config.json").write_text(json.dumps(settings))
    (folder / "decoder.onnx").unlink()
    (folder / "decoder.onnx").symlink_to(folder / "encoder.onnx")
    with pytest.raises(ValueError, match="decoder.onnx is a link, not a plain file"):
        OnnxModel.from_dir(folder)
