"""`annotated-transformer train`: what a run through the console command writes and how it goes on.

1. A run on a Multi30k-style folder (the synthetic pairs of conftest.py): its checkpoints, a resume
   that takes the configuration from the checkpoint, then evaluate and translate of what it wrote.
2. One writer per run folder: a second run into it is refused, a killed run releases it, a run
   already there is replaced only when told.
3. What an epoch records: history.json, TensorBoard logs, the validation perplexity of the true
   words; --fused-loss trains the same run; --model small is the notebooks' CPU model.
4. Your own files: subwords with one tied vocabulary, empty lines skipped and counted, bad files
   and vocabularies refused before training, a resume on other data refused.
5. Any two languages of a Multi30k-style folder (--src-lang, --tgt-lang).

The checks of the flags themselves are in test_cli.py, of --config in test_config.py.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from clitools import TINY_RUN, environment, one_error_line, own_file_args
from synthetic import made_up_pairs, synthetic_pairs, write_lines

from annotated_transformer._chapters import CPU_CONFIG
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main

ONE_EPOCH = [*TINY_RUN, "--epochs", "1"]


# ======================================================================= 1. a run, resumed and used
def test_train_resume_evaluate_translate(
    data_dir: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    multi30k = ["--out", str(out), "--data-dir", str(data_dir)]
    assert main(["train", *multi30k, "--epochs", "2", *TINY_RUN]) == 0
    assert sorted(p.name for p in out.glob("*.pt")) == ["epoch1.pt", "epoch2.pt", "last.pt"]
    assert not list(out.glob(".*.tmp")), "no temporary checkpoint file is left behind"
    first = load_checkpoint(out / "last.pt")
    assert first.epoch == 2 and len(first.history) == 2  # epochs completed
    assert first.config.model.N == 2 and first.config.model.d_model == 64  # --model tiny

    # --resume takes the configuration from the checkpoint: only the new number of epochs is given
    assert main(["train", *multi30k, "--epochs", "3", "--resume", "--quiet"]) == 0
    resumed = load_checkpoint(out / "last.pt")
    assert resumed.epoch == 3 and [h["epoch"] for h in resumed.history] == [1, 2, 3]
    assert resumed.resume.counts.optimizer_steps > first.resume.counts.optimizer_steps
    assert resumed.run_id == first.run_id
    assert resumed.src_vocab.itos == first.src_vocab.itos  # the checkpoint's, not rebuilt
    capsys.readouterr()
    assert main(["train", *multi30k, "--epochs", "4", "--resume", "--model", "base"]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"--resume with another configuration than {out / 'last.pt'} was trained with: " in line
    assert "model.N=6 (the run has 2)" in line
    assert load_checkpoint(out / "last.pt").epoch == 3  # nothing trained

    checkpoint = ["--checkpoint", str(out / "last.pt")]
    assert main(["evaluate", *checkpoint, "--split", "test2016", "--data-dir", str(data_dir)]) == 0
    report = capsys.readouterr().out
    assert "test2016 (16 sentences, greedy): sacreBLEU" in report and "tok:13a" in report
    assert "tokenized lowercased BLEU" in report
    assert main(["translate", *checkpoint, "Ein Mann sieht einen Ball.", "Ein Hund hat."]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    stdin = "Eine Frau mag einen Baum.\n\nEin Kind sieht ein Haus im Park.\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    assert main(["translate", *checkpoint]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]  # an empty line stays

    # beam search and checkpoint averaging (the decoding chapter)
    beam = [*checkpoint, "--beam", "3", "--alpha", "1.0", "--average-last", "2"]
    assert main(["evaluate", *beam, "--data-dir", str(data_dir), "--quiet"]) == 0
    assert (
        "(16 sentences, beam 3, alpha 1.0, average of the last 2 epochs): sacreBLEU"
        in capsys.readouterr().out
    )
    assert main(["translate", *beam, "Ein Mann sieht einen Ball."]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1
    assert main(["translate", *checkpoint, "--average-last", "4", "Ein Mann."]) == 1
    assert "from epoch 3: there are not 4 epochs to average" in capsys.readouterr().err
    (out / "epoch1.pt").unlink()
    assert main(["translate", *checkpoint, "--average-last", "3", "Ein Mann."]) == 1
    assert "needs epoch1.pt beside it" in capsys.readouterr().err


# =========================================================================== 2. one writer
def test_two_trainings_into_one_folder_one_refuses_and_a_killed_run_releases_the_lock(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--data-dir", str(data_dir)]
    first = subprocess.Popen(
        [sys.executable, "-m", "annotated_transformer.cli", *args, "--epochs", "50", *TINY_RUN],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    try:
        deadline = time.time() + 120
        while not (out / ".writer").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert (out / ".writer").exists(), (
            first.stderr.read()
            if first.poll() is not None
            else "the first run never claimed the folder"
        )
        assert main([*args, "--epochs", "1", *TINY_RUN]) == 1
        line = one_error_line(capsys.readouterr().err, "train")
        assert f"is in use by another training run (pid {first.pid} on" in line
        while not (out / "last.pt").exists() and first.poll() is None:
            time.sleep(0.1)
    finally:
        first.send_signal(signal.SIGKILL)  # the harshest exit: the system releases the lock
        first.wait()
        first.stderr.close()
    ckpt = load_checkpoint(out / "last.pt")
    assert main([*args, "--epochs", str(ckpt.epoch + 1), "--resume", "--quiet"]) == 0
    assert load_checkpoint(out / "last.pt").epoch == ckpt.epoch + 1
    assert not (out / ".writer").exists()  # released and cleaned up on a normal exit


def test_train_refuses_to_replace_a_run_unless_told(data_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--data-dir", str(data_dir), *TINY_RUN]
    assert main([*args, "--epochs", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.glob("*.pt")}
    capsys.readouterr()
    assert main([*args, "--epochs", "1"]) == 1
    assert (
        "already holds a training run (epoch1.pt, epoch2.pt, history.json, last.pt): "
        "pass --resume to continue it or --overwrite to replace it"
    ) in one_error_line(capsys.readouterr().err, "train")
    assert {p.name: p.read_bytes() for p in out.glob("*.pt")} == before  # untouched
    assert main([*args, "--epochs", "1", "--resume", "--overwrite"]) == 2
    assert "give one of them" in one_error_line(capsys.readouterr().err, "train")
    assert main([*args, "--epochs", "1", "--overwrite"]) == 0
    # no stale epoch2.pt mixes in
    assert sorted(p.name for p in out.glob("*.pt")) == ["epoch1.pt", "last.pt"]
    assert load_checkpoint(out / "last.pt").epoch == 1
    # the new run's history only
    assert [h["epoch"] for h in json.loads((out / "history.json").read_text())] == [1]


# ========================================================================= 3. what an epoch records
@pytest.fixture(scope="module")
def run(synthetic_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Two epochs of the tiny size with TensorBoard logs."
    out = tmp_path_factory.mktemp("runs") / "run"
    args = ["--out", str(out), "--data-dir", str(synthetic_corpus), "--tensorboard"]
    assert main(["train", *args, "--epochs", "2", *TINY_RUN]) == 0
    return out


def test_history_json_holds_every_epochs_figures(run: Path) -> None:
    history = json.loads((run / "history.json").read_text())
    assert history == load_checkpoint(run / "last.pt").history
    assert [h["epoch"] for h in history] == [1, 2]
    figures = {"train_loss", "val_loss", "val_ppl", "val_bleu", "lr", "tokens_per_second"}
    for entry in history:
        assert figures | {"steps", "seconds"} <= set(entry)
        assert entry["lr"] > 0 and entry["tokens_per_second"] > 0 and entry["seconds"] > 0
    assert 0 < history[0]["steps"] < history[1]["steps"]


def test_validation_perplexity_is_of_the_true_words_without_smoothing(run: Path) -> None:
    "val_ppl: exp of the mean cross-entropy of the reference words, not of the smoothed loss."
    import torch.nn.functional as F

    from annotated_transformer.data import encode_pairs, make_loader

    ckpt = load_checkpoint(run / "last.pt")
    model, (tok_src, tok_tgt) = ckpt.build_model(), ckpt.tokenizers()
    val = synthetic_pairs()[160:176]
    data = encode_pairs(
        tok_src.tokenize([de for de, _ in val]),
        tok_tgt.tokenize([en for _, en in val]),
        ckpt.src_vocab,
        ckpt.tgt_vocab,
    )
    total, tokens, pad = 0.0, 0, ckpt.tgt_vocab.pad
    with torch.no_grad():
        for batch in make_loader(data, pad, 400, shuffle=False):
            out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
            logits = model.generator.proj(out)  # (B, T, V)
            total += F.cross_entropy(
                logits.flatten(0, 1), batch.tgt_y.flatten(), ignore_index=pad, reduction="sum"
            ).item()
            tokens += batch.ntokens
    last = ckpt.history[-1]
    assert last["val_ppl"] == pytest.approx(math.exp(total / tokens), rel=1e-4)
    # the smoothed loss would give another figure
    assert last["val_ppl"] != pytest.approx(math.exp(last["val_loss"]), rel=1e-2)


def test_tensorboard_logs_the_same_figures(run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logs = EventAccumulator(str(run / "tensorboard"))
    logs.Reload()
    history = json.loads((run / "history.json").read_text())
    tags = {"train_loss", "val_loss", "val_ppl", "val_bleu", "lr", "tokens_per_second"}
    assert tags <= set(logs.Tags()["scalars"])
    assert [(e.step, pytest.approx(e.value, rel=1e-5)) for e in logs.Scalars("val_loss")] == [
        (h["epoch"], h["val_loss"]) for h in history
    ]


def test_fused_loss_trains_the_same_run(run: Path, synthetic_corpus: Path, tmp_path: Path) -> None:
    """--fused-loss (the loss from the decoder's outputs in chunks) gives the readable path's
    figures."""
    out = tmp_path / "fused"
    args = ["--out", str(out), "--data-dir", str(synthetic_corpus), "--fused-loss"]
    assert main(["train", *args, "--epochs", "2", *TINY_RUN]) == 0
    readable, fused = (json.loads((folder / "history.json").read_text()) for folder in (run, out))
    for a, b in zip(readable, fused, strict=True):
        for key in ("train_loss", "val_loss", "val_ppl", "lr"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key


def test_model_small_is_the_notebooks_cpu_model(synthetic_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--out", str(out), "--data-dir", str(synthetic_corpus), "--model", "small"]
    assert main(["train", *args, "--max-tokens", "400", "--warmup", "20", "--epochs", "1"]) == 0
    assert load_checkpoint(out / "last.pt").config.model == CPU_CONFIG.model


# =========================================================================== 4. your own files
def test_a_run_on_your_own_files_is_subwords_with_one_tied_vocabulary(own_run: Path) -> None:
    ckpt = load_checkpoint(own_run / "last.pt")
    assert ckpt.config.vocab_size == 400 and ckpt.config.model.share_embeddings
    assert ckpt.src_vocab.itos == ckpt.tgt_vocab.itos and len(ckpt.src_vocab) == 400
    assert ckpt.tokenizer is not None and load_checkpoint(own_run / "epoch1.pt").tokenizer
    src_tokenizer, tgt_tokenizer = ckpt.tokenizers()
    assert src_tokenizer is tgt_tokenizer is ckpt.tokenizer
    model = ckpt.build_model()
    assert (
        model.src_embed[0].lut.weight
        is model.tgt_embed[0].lut.weight
        is model.generator.proj.weight
    )
    assert set(ckpt.data) == {"train", "val"}
    assert ckpt.data["train"]["files"][0].endswith("train.xa")


def test_empty_training_lines_are_skipped_as_pairs_and_counted(
    own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    args = ["train", "--out", str(tmp_path / "run"), *own_file_args(own_corpus)]
    assert main([*args, "--vocab-size", "400", *ONE_EPOCH]) == 0
    out = capsys.readouterr().out
    assert (
        f"train: skipped 3 pairs with an empty line on one side or both "
        f"({own_corpus['train_src']}, {own_corpus['train_tgt']})"
    ) in out
    assert "297 training pairs" in out


def test_files_of_different_lengths_are_refused_naming_both(
    own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    short = write_lines(tmp_path / "short.xb", ["ABCß !"] * 7)
    args = own_file_args(own_corpus)
    args[args.index("--train-tgt") + 1] = str(short)
    assert main(["train", "--out", str(tmp_path / "run"), *args, *ONE_EPOCH]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"{own_corpus['train_src']} has 300 lines but {short} has 7" in line
    assert not list((tmp_path / "run").glob("*.pt"))


def test_non_utf8_is_refused_naming_file_and_line(
    own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "latin1.xa"
    lines = gzip.decompress(own_corpus["valid_src"].read_bytes()).split(b"\n")
    lines[4] = "Käse".encode("latin-1")
    bad.write_bytes(b"\n".join(lines))
    args = own_file_args(own_corpus)
    args[args.index("--valid-src") + 1] = str(bad)
    assert main(["train", "--out", str(tmp_path / "run"), *args, *ONE_EPOCH]) == 1
    assert f"{bad}:5: invalid UTF-8" in one_error_line(capsys.readouterr().err, "train")


def test_a_vocabulary_the_data_cannot_support_is_refused(
    own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    args = ["train", "--out", str(tmp_path / "run"), *own_file_args(own_corpus)]
    assert main([*args, "--vocab-size", "50000", *ONE_EPOCH]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert "vocab_size=50000" in line or "vocabulary size 50000" in line, line
    assert not list((tmp_path / "run").glob("*.pt"))


def test_a_resume_on_other_data_or_another_vocabulary_is_refused(
    own_run: Path, own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    shutil.copytree(own_run, out)
    lowered = [t.lower() for t in own_corpus["train_tgt"].read_text().split("\n")[:-1]]
    other = write_lines(tmp_path / "other.xb", lowered)
    args = own_file_args(own_corpus)
    args[args.index("--train-tgt") + 1] = str(other)
    resume = ["train", "--out", str(out), "--resume", "--epochs", "2", "--quiet"]
    assert main([*resume, *args]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"--resume with other data than {out / 'last.pt'} was trained on" in line
    assert str(other) in line
    assert main([*resume, *own_file_args(own_corpus), "--vocab-size", "500"]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert "vocab_size=500 (the run has 400)" in line
    assert load_checkpoint(out / "last.pt").epoch == 1  # nothing trained


# =========================================================================== 5. any two languages
def test_any_two_languages_of_a_multi30k_folder(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "multi30k"
    folder.mkdir()
    pairs = made_up_pairs(240, seed=1)
    for stem, rows in (
        ("train", pairs[:200]),
        ("val", pairs[200:220]),
        ("test_2016_flickr", pairs[220:]),
    ):
        write_lines(folder / f"{stem}.xa.gz", [s for s, _ in rows], gzipped=True)
        write_lines(folder / f"{stem}.xb.gz", [t for _, t in rows], gzipped=True)
    langs = ["--data-dir", str(folder), "--src-lang", "xa", "--tgt-lang", "xb"]
    # words need spaCy's tokenizer for the language
    assert main(["train", "--out", str(tmp_path / "words"), *langs, *ONE_EPOCH]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert "spaCy has no tokenizer for the language 'xa': use subwords" in line
    args = ["train", "--out", str(tmp_path / "subwords"), *langs, "--vocab-size", "350"]
    assert main([*args, *ONE_EPOCH]) == 0
    capsys.readouterr()
    ckpt = load_checkpoint(tmp_path / "subwords" / "last.pt")
    assert (ckpt.config.src_lang, ckpt.config.tgt_lang) == ("xa", "xb")
    assert ckpt.data == {"multi30k": ["xa", "xb"], "folder": str(folder.resolve())}
    checkpoint = ["--checkpoint", str(tmp_path / "subwords" / "last.pt")]
    assert main(["evaluate", *checkpoint, "--data-dir", str(folder), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("test2016 (20 sentences, greedy): sacreBLEU ")
    args = ["train", "--out", str(tmp_path / "missing"), "--data-dir", str(folder)]
    assert main([*args, "--src-lang", "xc", "--vocab-size", "350", *ONE_EPOCH]) == 1
    line = one_error_line(capsys.readouterr().err, "train")
    assert "the folder's languages: xa, xb" in line
